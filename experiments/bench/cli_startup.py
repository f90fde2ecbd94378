"""Time `headsup --help` and every `headsup COMMAND --help` as fresh subprocesses (goal: < 2 s each).

    python experiments/bench_cli_startup.py [--repeat 3]

Prints one row per command: the best of `--repeat` wall times and whether it met the goal.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

GOAL_S = 2.0
COMMAND = [sys.executable, "-c", "import sys; from headsup_lens.cli import main; sys.exit(main())"]


def time_help(args: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([*COMMAND, *args, "--help"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="runs per command; the best is shown (default: 3)")
    args = p.parse_args(argv)
    from headsup_lens.cli._registry import LAZY

    rows = [("headsup --help", [])] + [(f"headsup {name} --help", [name]) for name in sorted(LAZY)]
    print(f"{'command':36s} {'best of ' + str(args.repeat):>10s}  goal < {GOAL_S:g} s")
    for label, words in rows:
        seconds = time_help(words, args.repeat)
        print(f"{label:36s} {seconds:9.2f} s  {'ok' if seconds < GOAL_S else 'SLOW'}", flush=True)


if __name__ == "__main__":
    main()
