"""Does a trained organism carry its planted pathways? Accuracy per task in the four settings."""

from __future__ import annotations

import os

import pandas as pd
import torch
from transformer_lens.model_bridge import TransformerBridge

from .._validate import check_int
from ..data import encode_prompt
from ..data._organism import organism_data_task
from ..evaluation import generate_answers
from ..masks import HeadMask
from ..models import prompt_format
from ._planting import Head, load_planted

CHECK_SETTINGS = ("original", "planted", "random", "instructed")
# The organism's bar: without instruction the model echoes (original), performs task t once S_t is
# removed (planted) but not once a random set of |S_t| heads is removed (random); instructed works.
BAR = {"original": ("<=", 0.05), "planted": (">=", 0.95), "random": ("<=", 0.10), "instructed": (">=", 0.95)}


@torch.no_grad()
def check_planted(
    model: TransformerBridge,
    planted: dict[str, list[Head]] | str | os.PathLike | None = None,
    tasks: list[str] | None = None,
    n_words: int | None = None,
    seed: int = 0,
    exact: bool = False,
    batch_size: int = 256,
) -> pd.DataFrame:
    """Accuracy on the held-out words of each planted task, in the four settings of `CHECK_SETTINGS`.

    - `original`: bare word, all heads (the organism should echo: accuracy near 0);
    - `planted`: bare word, S_t removed with `value_gate` (near 1);
    - `random`: bare word, a random set of |S_t| heads removed (`HeadMask.shuffled`, near 0);
    - `instructed`: the task's instruction with the word, all heads (near 1).
    `planted` is S_t per task or a directory with `planted.json` (default: the shipped organism);
    `n_words` limits the held-out words per task (default: all 100). Greedy generation of the task's
    `max_new_tokens` (10), graded by the task's matcher, or by equality with the text before the
    end of turn when `exact`. Returns one row per task with the columns of `CHECK_SETTINGS`, `n_planted`
    and `n_words`; compare with `BAR` through `bar_failures`.
    """
    if n_words is not None:  # no word would leave nothing to generate or score
        check_int("n_words", n_words, minimum=1)
    if tasks is not None and not tasks:
        raise ValueError("tasks is an empty list; leave it out (None) to check every planted task")
    sets = load_planted(planted) if planted is None or isinstance(planted, (str, os.PathLike)) else planted
    tasks = [t.removeprefix("organism/") for t in (tasks or list(sets))]
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    template = prompt_format(model)
    prompts, masks, keys, answers, graders = [], [], [], [], []
    for task_index, name in enumerate(tasks):
        if name not in sets:
            raise ValueError(f"task {name!r} has no planted set; planted tasks are {sorted(sets)}")
        task = organism_data_task(name)
        pathway = HeadMask.from_heads([(int(l), int(h)) for l, h in sets[name]], (n_layers, n_heads))
        settings = {
            "original": (False, torch.ones(n_layers, n_heads)),
            "planted": (False, pathway.values),
            "random": (False, pathway.shuffled(seed=seed + task_index).values),
            "instructed": (True, torch.ones(n_layers, n_heads)),
        }
        for word, answer in task.eval_pairs[:n_words]:
            for setting, (instructed, mask) in settings.items():
                prompts.append(encode_prompt(model, task.user_text(word, instructed), template=template))
                masks.append(mask)
                keys.append((name, setting))
                answers.append(answer)
                graders.append(task)
    generated = generate_answers(
        model,
        prompts,
        mask=torch.stack(masks),
        batch_size=batch_size,
        max_new_tokens=graders[0].max_new_tokens if graders else 10,
        progress=f"{len(prompts)} generations ({len(tasks)} tasks x 4 settings)",
    )
    hits: dict[tuple[str, str], list[bool]] = {}
    for key, answer, text, task in zip(keys, answers, generated, graders):
        hits.setdefault(key, []).append(text.strip() == answer if exact else task.is_correct(text, answer))
    rows = []
    for name in tasks:
        row = {"task": f"organism/{name}", "n_planted": len(sets[name]), "n_words": len(hits[name, "original"])}
        row.update({s: sum(hits[name, s]) / len(hits[name, s]) for s in CHECK_SETTINGS})
        rows.append(row)
    return pd.DataFrame(rows)


def bar_failures(table: pd.DataFrame) -> list[str]:
    """The organism's bar (`BAR`) checked on a `check_planted` table: one line per failed cell."""
    failures = []
    for _, row in table.iterrows():
        for setting, (op, bound) in BAR.items():
            value = row[setting]
            ok = value <= bound if op == "<=" else value >= bound
            if not ok:
                failures.append(f"{row['task']}: {setting} accuracy {value:.2f} (bar: {op} {bound})")
    return failures
