"""Fig. 3: every head's weight sigmoid(M) over mask training, and the heads that join and leave the pathway.

As the reference's figure: a negative-init run (N(-3, 0.02), `--init default` for N(4, 0.02) or the
schedule's own init), logits saved every 31 steps (`--checkpoint-every`), the first half of the run
plotted (`--until`). Heads kept at the end are blue, removed red; the heads that crossed 0.5 and came
back (joined the pathway and left it, or left and came back) are drawn bold and counted, both in the
plotted window and over the whole run (`analysis.trajectory_crossings`). `--run DIR` reads an
existing training run folder (`headsup train --out DIR`) instead of training.
"""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.analysis import TRAJECTORY_KINDS, trajectory_crossings, weight_trajectories
from headsup_lens.plots import trajectory_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument(
        "--init",
        choices=("negative", "default"),
        default="negative",
        help="mask init of the run: negative N(-3, 0.02) as the reference's Fig. 3 (default), or the schedule's",
    )
    p.add_argument("--run", default=None, help="an existing training run folder to read instead of training")
    p.add_argument(
        "--until",
        type=float,
        default=0.5,
        help="fraction of the run to plot (default 0.5: the reference plots the first half)",
    )
    p.add_argument(
        "--run-steps",
        type=int,
        default=None,
        help="planned steps of the run, for --until (default: its last checkpoint; give it for a run in progress)",
    )
    args = p.parse_args(argv)
    if not 0 < args.until <= 1:
        raise SystemExit(f"fig3: --until must lie in (0, 1], got {args.until}")
    xp = setup("fig3", args)
    task = xp.task()
    run_dir = args.run if args.run is not None else xp.mask(task, negative=args.init == "negative").run_dir
    if run_dir is None:
        raise SystemExit("fig3: stored masks have no checkpoints; give --run DIR (a training run folder)")
    steps, weights = weight_trajectories(run_dir, task=task.name)
    planned = args.run_steps or steps[-1]
    shown = [i for i, step in enumerate(steps) if step <= args.until * planned] or [0]
    window = trajectory_crossings(weights[shown])
    whole = trajectory_crossings(weights)
    n_layers, n_heads = weights.shape[1:]
    xp.table(
        pd.DataFrame(
            {
                "step": [s for s in steps for _ in range(n_layers * n_heads)],
                "layer": [l for _ in steps for l in range(n_layers) for _ in range(n_heads)],
                "head": [h for _ in steps for _ in range(n_layers) for h in range(n_heads)],
                "weight": weights.flatten().numpy(),
            }
        ),
        "fig3_trajectories",
        task,
    )
    xp.table(
        whole.merge(window[["layer", "head", "crossings", "kind"]], on=["layer", "head"], suffixes=("", "_plotted")),
        "fig3_crossings",
        task,
    )
    highlight = list(zip(window.loc[window.came_back, "layer"], window.loc[window.came_back, "head"]))
    first, last = steps[shown[0]], steps[shown[-1]]
    xp.figure(
        trajectory_figure(
            [steps[i] for i in shown],
            weights[shown],
            highlight=highlight,
            title=f"Fig. 3 — σ(M), {task.name}, {args.init} init, steps {first}–{last}<br>"
            f"<sup>bold: the {len(highlight)} heads that crossed 0.5 and came back</sup>",
        ),
        "fig3_trajectories",
        task,
    )
    rows = []
    for name, table, until in (("plotted", window, last), ("whole run", whole, steps[-1])):
        counts = table.kind.value_counts()
        rows.append(
            {
                "task": task.name,
                "init": args.init,
                "span": name,
                "last step": until,
                "checkpoints": len(shown) if name == "plotted" else len(steps),
                **{kind: int(counts.get(kind, 0)) for kind in TRAJECTORY_KINDS},
                "crossed and came back": int(table.came_back.sum()),
            }
        )
    summary = pd.DataFrame(rows)
    xp.table(summary, "fig3_summary", task)
    xp.done(summary)


if __name__ == "__main__":
    main()
