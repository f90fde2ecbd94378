"""Command-line options shared by every command, the demo and the experiment scripts.

Options are dataclass fields whose docstrings become their `--help` text (simple-parsing), so one
definition serves `headsup`, `headsup demo` and `experiments/*.py`. This module imports nothing heavy.
"""

from __future__ import annotations

import argparse


class Collect(argparse.Action):
    """A list option that keeps every value: `--task a --task b` and `--task a b` both give [a, b]
    (a given list replaces the default instead of extending it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        fresh = current is None or current is self.default or self.dest not in _collected(namespace)
        _collected(namespace).add(self.dest)
        setattr(namespace, self.dest, ([] if fresh else list(current)) + list(values))


def _collected(namespace: argparse.Namespace) -> set[str]:
    return namespace.__dict__.setdefault("_collected_lists", set())
