"""App. C.3.2, a negative result: a mask acting inside the softmax (the query gate: a masked head attends
uniformly to every allowed position) does not make the model perform the task, unlike the value gate.

Each gate gets its own learned mask (trained through that gate) and is evaluated with `evaluate` under
that gate: masked and a random mask of the same size, against the original and instructed model and the
echo baseline, with strict scores, echo counts, Wilson intervals and McNemar p-values.
`query_gate_generations_<task>.csv` holds every output behind the table."""

from __future__ import annotations

import pandas as pd
from _common import parser, setup

from headsup_lens.evaluation import EvalConfig, evaluate

REFERENCE_ROWS = ("original", "instructed", "echo baseline", "majority label")
COLUMNS = [
    "task",
    "gate",
    "setting",
    "n_kept",
    "answer_nll",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "strict",
    "strict_low",
    "strict_high",
    "echo",
    "empty",
    "p_vs_original",
    "p_vs_instructed",
]


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__).parse_args(argv)
    xp = setup("query_gate", args)
    task = xp.task()
    tables, texts = [], []
    for gate in ("value", "query"):
        mask = (xp.mask(task) if gate == "value" else xp.masks([task], gate="query")[task.name]).mask
        settings = ["original", "instructed", "masked", "random mask", "echo baseline"]
        config = EvalConfig(
            gate=gate,
            batch_size=args.eval_batch_size,
            random_seed=args.seed,
            settings=tuple(s for s in settings if s != "instructed" or task.instruction is not None),
        )
        result = evaluate(xp.model, task, mask, config)
        table, generations = result.table, result.generations
        if gate == "query":  # the reference rows do not depend on the gate: keep one copy
            keep = ~table.setting.isin(REFERENCE_ROWS)
            table, generations = table[keep], generations[~generations.setting.isin(REFERENCE_ROWS)]
        tables.append(table.assign(gate=[gate if s not in REFERENCE_ROWS else "-" for s in table.setting]))
        texts.append(generations.assign(gate=gate))
    table = pd.concat(tables, ignore_index=True).assign(task=task.name)
    table = table[[c for c in COLUMNS if c in table.columns] + [c for c in table.columns if c not in COLUMNS]]
    xp.table(table, "query_gate", task)
    xp.table(pd.concat(texts, ignore_index=True), "query_gate_generations", task)
    xp.done(table[[c for c in COLUMNS if c in table.columns]])


if __name__ == "__main__":
    main()
