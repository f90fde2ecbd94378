"""App. C.3.2, a negative result: a mask acting inside the softmax (the query gate: a masked head attends
uniformly to every allowed position) does not make the model perform the task, unlike the value gate.

Each gate gets its own learned mask (trained through that gate) and is compared with a random mask of
the same size under the same gate; the original and instructed model are the references."""

from __future__ import annotations

import pandas as pd

from _common import parser, setup
from headsup_lens.evaluation import accuracy, answer_loss


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__).parse_args(argv)
    xp = setup("query_gate", args)
    task = xp.task()
    options = dict(batch_size=args.eval_batch_size)
    rows = [{"gate": "-", "setting": setting, "heads kept": xp.model.cfg.n_layers * xp.model.cfg.n_heads,
             "answer_nll": answer_loss(xp.model, task, instructed=instructed, **options),
             "accuracy": accuracy(xp.model, task, instructed=instructed, **options)}
            for setting, instructed in (("original", False), ("instructed", True))]
    for gate in ("value", "query"):
        mask = (xp.mask(task) if gate == "value" else xp.masks([task], gate="query")[task.name]).mask
        for setting, m in (("masked", mask), ("random mask", mask.shuffled(args.seed))):
            rows.append({"gate": gate, "setting": setting, "heads kept": m.n_kept,
                         "answer_nll": answer_loss(xp.model, task, mask=m, gate=gate, **options),
                         "accuracy": accuracy(xp.model, task, mask=m, gate=gate, **options)})
    table = pd.DataFrame(rows).assign(task=task.name)
    xp.table(table, "query_gate", task)
    xp.done(table)


if __name__ == "__main__":
    main()
