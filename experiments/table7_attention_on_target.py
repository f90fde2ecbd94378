"""Table 7: for "pick one of three words" tasks (e.g. fruit_v_animal_3), the attention of the last input
token to the target word (share over the three words), averaged over heads inside and outside the mask,
without instruction, with instruction and with the mask, over the task's 100 held-out examples (as the paper).
Beside it, `evaluate` of the same mask on the same examples (`table7_evaluation_<task>.csv`, with its
generations): whether the mask makes the model pick the right word at all.

The organism has no three-word task, so this script needs `--task` with such a task (and a model that can
read it), e.g. `--model meta-llama/Llama-3.1-8B-Instruct --task fruit_v_animal_3 --data-dir ...`."""

from __future__ import annotations

from dataclasses import dataclass

from headsup_lens.analysis import attention_on_target, candidate_spans
from headsup_lens.evaluation import EvalConfig, evaluate
from headsup_lens.plots import attention_target_figure, head_heatmap
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script

SETTINGS = ("original", "instructed", "masked", "masked+instructed")


@dataclass(frozen=True)
class Options(ExperimentOptions):
    """Options of Table 7."""


def run(xp: Experiment, options: Options) -> str:
    task = xp.task()
    try:  # fail before training a mask for a task this table cannot use
        for x, y in task.eval_pairs:
            candidate_spans(x, y)
    except ValueError as error:
        raise ValueError(f"task {task.name!r} is not a pick-one-of-three-words task ({error})") from None
    mask = xp.mask(task).mask
    result = attention_on_target(xp.model, task, mask, settings=SETTINGS, batch_size=options.eval_batch_size)
    table = result.table.assign(task=task.name, n_examples=result.n_examples)
    xp.table(table, "table7_attention_on_target", task)
    title = f"Table 7 — attention on the target word, {task.name}"
    xp.figure(attention_target_figure(result.table, title=title), "table7_attention_on_target", task)
    title = "share of attention on the target, per head"
    xp.figure(head_heatmap(result.per_head, title=title, zmin=0, zmax=1), "table7_attention_per_head", task)
    config = EvalConfig(random_seed=options.seed, batch_size=options.eval_batch_size)
    result = evaluate(xp.model, task, mask, config)
    evaluation, generations = result.table, result.generations
    xp.table(evaluation, "table7_evaluation", task)
    xp.table(generations, "table7_generations", task)
    columns = ["setting", "n_kept", "accuracy", "strict", "echo", "balanced_accuracy"]
    return table.to_string(index=False) + "\n" + evaluation[columns].to_string(index=False)


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
