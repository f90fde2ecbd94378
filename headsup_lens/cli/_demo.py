"""`headsup demo`: the main job, on the built-in organism by default.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from ..demo._config import DemoConfig
from ..options import Given
from ._registry import check_out_dir, command


@command("demo", DemoConfig)
def run(config: DemoConfig, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..analysis import step_or_never
    from ..demo import run_demo

    check_out_dir(config.out)
    result = run_demo(config)
    with_none = result.summary.fillna("—")
    print()
    print(with_none.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    for name, sweep in result.sweeps.items():
        switch, change = step_or_never(sweep.switch_step), step_or_never(sweep.change_step)
        print(
            f"{name:>16}: target becomes top-1 {'never' if switch == 'never' else f'after {switch} removals'}; "
            f"continuation first changes {'never' if change == 'never' else f'after {change}'}"
        )
    masks = config.masks if config.masks is not None else result.out / "training"
    print(
        f"\nwrote {result.out / 'report.html'} (figures in {result.out / 'figures'}, tables in "
        f"{result.out / 'tables'}, masks in {masks}; {result.seconds:.0f} s)"
    )
    return 0
