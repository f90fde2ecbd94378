"""Put the seconds since start in front of every line of a command's output and report its silences.

Lines are split at newlines and at carriage returns (a progress bar redraws itself with `\\r`), so
each redraw of a bar counts as output. At the end: the wall time, and the longest gaps between two
lines (what a user watching the command waits without a sign of life).

    headsup demo --model smollm2 --task antonym --masks figures/smollm2/masks 2>&1 \\
        | python experiments/bench/timestamps.py --out figures/bench/demo_smollm2_gaps.txt
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from headsup_lens.options import parse


@dataclass
class Options:
    """Options of the timestamper."""

    top: int = 5
    """How many of the longest gaps to report."""
    out: str | None = None
    """Also write the report (wall time and longest gaps) to this file."""


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="timestamps.py", description=__doc__)
    start = last = time.monotonic()
    gaps: list[tuple[float, float, str]] = []
    pending = b""
    stream = sys.stdin.buffer
    while True:
        chunk = stream.read1(1 << 16)
        if not chunk:
            break
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        for raw in lines:
            line = raw.decode(errors="replace").rstrip()
            if not line.strip():
                continue
            now = time.monotonic()
            gaps.append((now - last, now - start, line))
            last = now
            print(f"{now - start:8.1f}  {line}", flush=True)
    if pending.strip():
        now = time.monotonic()
        gaps.append((now - last, now - start, pending.decode(errors="replace")))
        print(f"{now - start:8.1f}  {pending.decode(errors='replace')}", flush=True)
    wall = time.monotonic() - start
    longest = sorted(gaps, reverse=True)[: options.top]
    report = [f"wall time {wall:.1f} s, {len(gaps)} lines; longest gaps between lines:"]
    report += [f"  {gap:6.1f} s before the line at {at:.1f} s: {line[:120]}" for gap, at, line in longest]
    print("\n".join(report))
    if options.out is not None:
        Path(options.out).parent.mkdir(parents=True, exist_ok=True)
        Path(options.out).write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
