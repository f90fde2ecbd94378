"""Fig. 6: instructed answer loss as the heads outside the learned mask are scaled by alpha (0 = removed, 1 = full)."""

from __future__ import annotations

from _common import parser, setup

from headsup_lens.analysis import alpha_grid
from headsup_lens.plots import alpha_figure


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument(
        "--alphas",
        type=float,
        nargs="+",
        default=[i / 10 for i in range(11)],
        help="alpha values (default: 0, 0.1, ..., 1)",
    )
    args = p.parse_args(argv)
    xp = setup("fig6", args)
    task = xp.task()
    mask = xp.mask(task).mask
    table = alpha_grid(xp.model, task, mask, args.alphas, batch_size=args.eval_batch_size)
    xp.table(table, "fig6_alpha_grid", task)
    xp.figure(alpha_figure(table, title=f"Fig. 6 — instructed answer loss vs α, {task.name}"), "fig6_alpha_grid", task)
    best = table.loc[table.loss.idxmin()]
    xp.done(
        table.assign(task=task.name)[["task", "alpha", "loss"]].to_string(
            index=False, float_format=lambda v: f"{v:.3f}"
        )
        + f"\nlowest loss {best.loss:.3f} at alpha {best.alpha:.1f}"
    )


if __name__ == "__main__":
    main()
