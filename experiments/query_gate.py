"""App. C.3.2, a negative result: a mask acting inside the softmax (the query gate: a masked head attends
uniformly to every allowed position) does not make the model perform the task, unlike the value gate.

Each gate gets its own learned mask (trained through that gate) and is evaluated with `evaluate` under
that gate: masked and a random mask of the same size, against the original and instructed model and the
echo baseline, with strict scores, echo counts, Wilson intervals and McNemar p-values.
`query_gate_generations_<task>.csv` holds every output behind the table."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script

REFERENCE_ROWS = ("original", "instructed", "echo baseline", "majority label")
# Shown first, in this order; the rest of evaluate's columns follow.
COLUMNS = ["task", "gate", "setting", "n_kept", "answer_nll", "accuracy", "accuracy_low", "accuracy_high", "strict"]
COLUMNS += ["strict_low", "strict_high", "echo", "empty", "p_vs_original", "p_vs_instructed"]


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of App. C.3.2."""


def run(xp: Experiment, options: Options) -> pd.DataFrame:
    task = xp.task()
    settings = ["original", "instructed", "masked", "random mask", "echo baseline"]
    settings = [s for s in settings if s != "instructed" or task.instruction is not None]
    tables, texts = [], []
    for gate in ("value", "query"):
        mask = (xp.mask(task) if gate == "value" else xp.masks([task], gate="query")[task.name]).mask
        config = EvalConfig(
            gate=gate, batch_size=options.eval_batch_size, random_seed=options.seed, settings=tuple(settings)
        )
        result = evaluate(xp.model, task, mask, config)
        table, generations = result.table, result.generations
        if gate == "query":  # the reference rows do not depend on the gate: keep one copy
            table = table[~table.setting.isin(REFERENCE_ROWS)]
            generations = generations[~generations.setting.isin(REFERENCE_ROWS)]
        tables.append(table.assign(gate=[gate if s not in REFERENCE_ROWS else "-" for s in table.setting]))
        texts.append(generations.assign(gate=gate))
    table = pd.concat(tables, ignore_index=True).assign(task=task.name)
    first = [c for c in COLUMNS if c in table.columns]
    table = table[first + [c for c in table.columns if c not in COLUMNS]]
    xp.table(table, "query_gate", task)
    xp.table(pd.concat(texts, ignore_index=True), "query_gate_generations", task)
    return table[first]


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
