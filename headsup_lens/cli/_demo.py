"""`headsup demo`: the main job, on the built-in organism by default."""

from __future__ import annotations

from ..demo import DemoConfig, run_demo
from ._registry import command


@command("demo", DemoConfig, help="Train masks without instructions, evaluate them and run the analyses; "
         "writes an HTML report (built-in organism by default, no downloads).")
def run(config: DemoConfig) -> int:
    result = run_demo(config)
    with_none = result.summary.fillna("—")
    print()
    print(with_none.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    for name, sweep in result.sweeps.items():
        print(f"{name:>16}: target becomes top-1 after {sweep.switch_step} removals; "
              f"continuation first changes after {sweep.change_step}")
    print(f"\nreport: {result.out / 'report.html'}  (figures in {result.out / 'figures'}, "
          f"tables in {result.out / 'tables'}; {result.seconds:.0f} s)")
    return 0
