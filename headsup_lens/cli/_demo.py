"""`headsup demo`: the main job, on the built-in organism by default.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from .._validate import check_batch_fits
from ..demo._config import DemoConfig, stored_mask_files
from ..options import Given
from ._outputs import compact_table
from ._registry import check_out_dir, command


def check_demo(config: DemoConfig, given: Given) -> None:
    """The tasks must load, stored masks exist for each (`--masks`), else a training batch must fit each
    task's training pairs."""
    from ..data import load_task  # deferred: the task registry is not needed for --help

    tasks = [load_task(name, config.data_dir) for name in config.tasks]
    if config.masks is not None:
        stored_mask_files(config.masks, [task.name for task in tasks])
        return
    for task in tasks:
        check_batch_fits(config.batch_size, task.n_train, f"training pairs of {task.name}", "--batch-size")


@command("demo", DemoConfig, check=check_demo)
def run(config: DemoConfig, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..analysis import step_or_never
    from ..demo import run_demo

    check_out_dir(config.out)
    result = run_demo(config)
    print()
    print(compact_table(result.summary, full="tables/summary.csv"))
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
