"""Fig. 8 (App. C.3.1): re-order the first k heads of the weight-order sweep by how much each removal
raised the target token, sweep again, and compare where the switch to the task happens."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import influence_order, random_order, removal_sweep, step_or_never, weight_order
from headsup_lens.plots import rank_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--example", type=int, default=0, help="index of the held-out example to sweep")
    p.add_argument(
        "--k",
        type=int,
        default=None,
        help="heads to re-order (default: twice the heads the mask removes; the paper: 320 of 1024)",
    )
    args = p.parse_args(argv)
    xp = setup("fig8", args)
    task = xp.task()
    mask = xp.mask(task).mask
    x, y = task.eval_pairs[args.example]
    k = args.k or min(mask.n_total, max(1, 2 * (mask.n_total - mask.n_kept)))
    options = dict(target_tokens=[y], max_new_tokens=task.max_new_tokens)
    weight = removal_sweep(xp.model, x, weight_order(mask), **options)
    sweeps = {
        "weight order": weight,
        "influence order": removal_sweep(xp.model, x, influence_order(weight, k=k), **options),
        "random order": removal_sweep(xp.model, x, random_order(xp.model, seed=args.seed), **options),
    }
    for name, sweep in sweeps.items():
        slug = name.split()[0]
        xp.table(sweep.long(), f"fig8_ranks_{slug}", task)
        xp.figure(
            rank_figure(sweep, title=f"Fig. 8 — {task.name}, input {x!r}, target {y!r}: {name}"),
            f"fig8_ranks_{slug}",
            task,
        )
    summary = pd.DataFrame(
        [
            {
                "task": task.name,
                "order": name,
                "k": k,
                "switch step (target top-1)": step_or_never(s.switch_step),
                "first change": step_or_never(s.change_step),
            }
            for name, s in sweeps.items()
        ]
    )
    xp.table(summary, "fig8_summary", task)
    xp.done(summary)


if __name__ == "__main__":
    main()
