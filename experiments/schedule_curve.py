"""The schedule curve: accuracy (the paper's matcher and the strict one, with echo counts) and answer
loss (the paper's "PPL", nats) of a training run's mask at chosen steps (default 300, 1 000, 3 000 and
6 250 where a checkpoint exists, plus the latest), on the task's 100 held-out examples, with the
generations behind every accuracy.

    python experiments/schedule_curve.py --model smollm2 --task antonym \\
        --run figures/smollm2/paper_schedule/antonym --update-figures

Without `--run` the script trains (or reuses) the schedule's mask and reads its own run folder.
`--save-masks` also writes the mask of each step read to `<run>/step_masks/step<N>/<task>.safetensors`,
so any script can use it with `--masks <run>/step_masks/step<N>` (e.g. Fig. 4 with a mid-run mask).
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from _common import parser, setup
from plotly.subplots import make_subplots

from headsup_lens.evaluation import SCHEDULE_STEPS, schedule_curve
from headsup_lens.training import safe_name


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--run", default=None, help="training run folder (headsup train --out DIR) to read")
    p.add_argument(
        "--at",
        type=int,
        nargs="+",
        default=list(SCHEDULE_STEPS),
        help=f"steps to read (default: {' '.join(map(str, SCHEDULE_STEPS))}; missing ones are skipped)",
    )
    p.add_argument("--save-masks", action="store_true", help="write each step's mask to <run>/step_masks/step<N>/")
    args = p.parse_args(argv)
    xp = setup("schedule", args)
    task = xp.task()
    run = args.run if args.run is not None else xp.mask(task).run_dir
    if run is None:
        raise SystemExit("schedule: stored masks have no checkpoints; give --run DIR")
    curve = schedule_curve(xp.model, task, run, args.at, batch_size=args.eval_batch_size)
    table = curve.table.assign(task=task.name)
    xp.table(table, "schedule_curve", task)
    xp.table(curve.generations, "schedule_generations", task)
    if args.save_masks:
        for step, mask in curve.masks.items():
            folder = Path(run) / "step_masks" / f"step{step}"
            folder.mkdir(parents=True, exist_ok=True)
            mask.save(folder / f"{safe_name(task.name)}.safetensors")
    fig = make_subplots(rows=1, cols=2, subplot_titles=["accuracy (no instruction, masked)", "answer loss (nats)"])
    for column, name in (("accuracy", "paper matcher"), ("strict", "strict")):
        fig.add_trace(
            go.Scatter(
                x=table.step,
                y=table[column],
                mode="lines+markers",
                name=name,
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=table[f"{column}_high"] - table[column],
                    arrayminus=table[column] - table[f"{column}_low"],
                ),
                text=[f"{e} echoes" for e in table.echo],
            ),
            row=1,
            col=1,
        )
    fig.add_trace(go.Scatter(x=table.step, y=table.answer_nll, mode="lines+markers", name="answer loss"), row=1, col=2)
    fig.update_xaxes(type="log", title_text="training step")
    fig.update_yaxes(range=[0, 1], row=1, col=1)
    fig.update_layout(
        title=f"schedule curve, {task.name} (n = {int(table.n.iloc[0])} held-out examples, 95% Wilson intervals)"
    )
    xp.figure(fig, "schedule_curve", task)
    xp.done(table)


if __name__ == "__main__":
    main()
