"""`python -m headsup_lens ARGS`, with the rank `STOP_RANK` of a torchrun job killed (SIGKILL, no
clean-up) as it starts training step `STOP_STEP` (counted from 0): a rank lost at a known step."""

from __future__ import annotations

import os
import signal
import sys

from headsup_lens.cli import main
from headsup_lens.training import _train

_run_steps = _train.run_steps


def run_steps(step, **options):
    def stepping(s: int):
        if s == int(os.environ["STOP_STEP"]) and os.environ.get("RANK") == os.environ["STOP_RANK"]:
            os.kill(os.getpid(), signal.SIGKILL)
        return step(s)

    return _run_steps(stepping, **options)


_train.run_steps = run_steps
sys.exit(main())
