"""Fig. 3: every head's weight sigmoid(M) over mask training (heads kept at the end in blue, removed in red)."""

from __future__ import annotations

import pandas as pd

from _common import parser, setup
from headsup_lens.analysis import weight_trajectories
from headsup_lens.plots import trajectory_figure


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__).parse_args(argv)
    xp = setup("fig3", args)
    task = xp.task()
    trained = xp.mask(task)
    steps, weights = weight_trajectories(trained.run_dir, task=task.name)
    n_layers, n_heads = weights.shape[1:]
    xp.table(pd.DataFrame({
        "step": [s for s in steps for _ in range(n_layers * n_heads)],
        "layer": [l for _ in steps for l in range(n_layers) for _ in range(n_heads)],
        "head": [h for _ in steps for _ in range(n_layers) for h in range(n_heads)],
        "weight": weights.flatten().numpy(),
    }), "fig3_trajectories", task)
    xp.figure(trajectory_figure(steps, weights, title=f"Fig. 3 — head weights σ(M) during training, {task.name}"),
              "fig3_trajectories", task)
    final = weights[-1] >= 0.5
    summary = pd.DataFrame([{"task": task.name, "checkpoints": len(steps), "last step": steps[-1],
                             "heads kept": int(final.sum()), "heads removed": int((~final).sum())}])
    xp.done(summary)


if __name__ == "__main__":
    main()
