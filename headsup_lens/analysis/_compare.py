"""Head-finding methods side by side: elicitation curves, and ROC against planted heads where known.

The **elicitation curve** of a ranking: remove its first k heads (k = 0..K, value gate, zero
ablation as in the paper's removal sweeps) and measure, *without instruction*, greedy accuracy
and the answer loss on the task's evaluation examples. Every (k, example) pair is one row of a
batched pass (per-row masks), and identical masks (k = 0 of every method) are evaluated once.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformer_lens.model_bridge import TransformerBridge

from .._validate import check_choice, check_int, describe
from ..data import Task, task_prompts
from ..data._tokenize import encode_prompt
from ..evaluation import generate_answers
from ..masks import Head
from ..models import builtin_model_dir, prompt_format
from ..models._sharding import every_rank
from ._methods import METHODS, HeadScores, head_scores, mask_losses
from ._methods._base import example_batch
from ._sweep import sweep_masks

DEFAULT_METHODS = (
    "learned_mask",
    "single_ablation",
    "gate_gradient",
    "attribution_patching",
    "activation_pattern",
    "soft_gate_necessary",
    "soft_gate_sufficient",
    "random",
)


@dataclass
class MethodComparison:
    """The result of `compare_methods` for one task.

    `curves`: one row per (method, k) with `accuracy` and `answer_loss` without instruction.
    `summary`: one row per method with its cost (`seconds`, `cpu_seconds`), the curve's normalised areas
    (`accuracy_area`: mean accuracy over k in 0..K by the trapezoid rule; `loss_area` likewise),
    `best_k` (fewest heads removed at the highest accuracy), `best_accuracy`, `loss_at_best_k`,
    and, with `planted` heads, `auroc` (scores against planted membership) and
    `precision_at_planted` (share of the first |planted| heads of the order that are planted).
    """

    task: str
    scores: dict[str, HeadScores]
    curves: pd.DataFrame
    summary: pd.DataFrame
    planted: list[Head] | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def roc(self) -> pd.DataFrame:
        """ROC points per method (`method, fpr, tpr, threshold`) against the planted heads."""
        if not self.planted:
            raise ValueError("no planted heads: ROC needs the true heads (compare_methods(..., planted=...))")
        frames = [roc_points(s, self.planted).assign(method=name) for name, s in self.scores.items()]
        return pd.concat(frames, ignore_index=True).loc[:, ["method", "fpr", "tpr", "threshold"]]


def _labels(scores: HeadScores, planted: Sequence[Head]) -> tuple[np.ndarray, np.ndarray]:
    n_layers, n_heads = scores.scores.shape
    truth = {tuple(h) for h in planted}
    outside = [h for h in truth if not (0 <= h[0] < n_layers and 0 <= h[1] < n_heads)]
    if outside:
        raise ValueError(f"planted head {outside[0]} is outside the {n_layers} x {n_heads} scores")
    labels = np.array([(l, h) in truth for l in range(n_layers) for h in range(n_heads)], dtype=int)
    return labels, scores.scores.flatten().double().numpy()


def check_ranking(name: str, ranking: HeadScores, model: TransformerBridge, task: Task) -> None:
    """A ranking compared on `task` must score every head of `model` and be made for `task`.

    Another shape (a ranking of another model) and another task name (`ranking.task`; a ranking
    without one is taken as given) are ValueErrors; NaN scores cannot reach here (`HeadScores`
    refuses them)."""
    if not isinstance(ranking, HeadScores):
        raise TypeError(f"ranking {name!r} must be a HeadScores, got {describe(ranking)}")
    shape = [model.cfg.n_layers, model.cfg.n_heads]
    if list(ranking.scores.shape) != shape:
        raise ValueError(
            f"ranking {name!r} scores a {list(ranking.scores.shape)} grid of heads; this model has "
            f"[n_layers, n_heads] = {shape}: it was made for another model"
        )
    if ranking.task is not None and ranking.task != task.name:
        raise ValueError(
            f"ranking {name!r} was made for task {ranking.task!r}, not {task.name!r}; rank the heads on "
            f"{task.name!r} (head_scores) to compare on it"
        )


def auroc(scores: HeadScores, planted: Sequence[Head]) -> float:
    """Area under the ROC curve of the scores (higher = removed earlier) for planted membership."""
    from sklearn.metrics import roc_auc_score  # deferred: scikit-learn is slow to import

    labels, values = _labels(scores, planted)
    if labels.min() == labels.max():
        raise ValueError("AUROC needs both planted and other heads")
    return float(roc_auc_score(labels, values))


def roc_points(scores: HeadScores, planted: Sequence[Head]) -> pd.DataFrame:
    """The ROC curve of the scores (higher = removed earlier) for planted membership, as `auroc` scores it.

    Returns a frame with one row per threshold: `fpr`, `tpr` and `threshold` (sklearn's `roc_curve`).
    """
    from sklearn.metrics import roc_curve  # deferred: scikit-learn is slow to import

    labels, values = _labels(scores, planted)
    fpr, tpr, threshold = roc_curve(labels, values)
    return pd.DataFrame({"fpr": fpr, "tpr": tpr, "threshold": threshold})


def precision_at(scores: HeadScores, planted: Sequence[Head], k: int | None = None) -> float:
    """Share of the first `k` heads of the order (default |planted|) that are planted."""
    truth = {tuple(h) for h in planted}
    k = len(truth) if k is None else k
    return sum(h in truth for h in scores.order[:k]) / k


def curve_area(ks: Sequence[int], values: Sequence[float]) -> float:
    """Trapezoid area under `values` over `ks`, divided by the k range (a mean over the curve)."""
    x, y = np.asarray(ks, dtype=float), np.asarray(values, dtype=float)
    if len(x) == 1:
        return float(y[0])
    return float(((y[1:] + y[:-1]) / 2 * np.diff(x)).sum() / (x[-1] - x[0]))


@every_rank
def elicitation_curves(
    model: TransformerBridge,
    task: Task,
    rankings: Mapping[str, HeadScores],
    ks: Sequence[int],
    *,
    split: str = "eval",
    n_eval: int | None = 50,
    max_new_tokens: int | None = None,
    max_rows: int = 256,
    generate: bool = True,
) -> pd.DataFrame:
    """Accuracy and answer loss without instruction after removing the first k heads of each
    ranking, for every k in `ks`: one row per (method, k). Masks shared by several rankings (k = 0)
    are evaluated once; all rows go through batched passes of at most `max_rows` rows."""

    shape = (model.cfg.n_layers, model.cfg.n_heads)
    ks = [check_int("k", k, minimum=0, maximum=shape[0] * shape[1]) for k in ks]
    if not rankings:
        raise ValueError("rankings is empty: pass at least one HeadScores")
    for name, ranking in rankings.items():
        check_ranking(name, ranking, model, task)
    masks, keys, index = [], [], {}
    for name, ranking in rankings.items():
        for k, mask in zip(ks, sweep_masks(ranking.order, ks, shape)):
            key = mask.numpy().tobytes()
            if key not in index:
                index[key] = len(masks)
                masks.append(mask)
            keys.append((name, k, index[key]))
    stacked = torch.stack(masks)
    batch = example_batch(model, task, split, n_eval)
    losses = mask_losses(model, batch, stacked, max_rows=max_rows)
    accuracy = [float("nan")] * len(masks)
    if generate:
        indices = list(task.split_indices(split))[: len(batch)]
        users, shots, answers = task_prompts(task, split, False)
        users, shots, answers = users[: len(indices)], shots[: len(indices)], answers[: len(indices)]
        template = prompt_format(model)
        prompts = [encode_prompt(model, u, s, template=template) for u, s in zip(users, shots)]
        rows = stacked.repeat_interleave(len(prompts), dim=0)
        texts = generate_answers(
            model,
            [p for _ in masks for p in prompts],
            mask=rows,
            max_new_tokens=max_new_tokens or task.max_new_tokens,
            batch_size=max_rows,
            progress=f"generations under {len(masks)} masks",
        )
        correct = np.array([task.is_correct(t, a) for t, a in zip(texts, answers * len(masks))], dtype=float)
        accuracy = correct.reshape(len(masks), len(prompts)).mean(1).tolist()
    return pd.DataFrame(
        [{"method": name, "k": k, "accuracy": accuracy[i], "answer_loss": float(losses[i])} for name, k, i in keys]
    )


def summarize(curves: pd.DataFrame, rankings: Mapping[str, HeadScores], planted: Sequence[Head] | None) -> pd.DataFrame:
    """One row per method: cost, curve areas, best k and, with planted heads, AUROC and precision."""
    records = []
    for name, ranking in rankings.items():
        curve = curves.loc[curves.method == name].sort_values(by="k")
        best = int(curve.accuracy.to_numpy().argmax()) if curve.accuracy.notna().any() else 0
        record = {
            "method": name,
            "seconds": ranking.seconds,
            "cpu_seconds": ranking.cpu_seconds,
            "accuracy_k0": float(curve.accuracy.iloc[0]),
            "accuracy_area": curve_area(curve.k.tolist(), curve.accuracy.tolist()),
            "loss_area": curve_area(curve.k.tolist(), curve.answer_loss.tolist()),
            "best_k": int(curve.k.iloc[best]),
            "best_accuracy": float(curve.accuracy.iloc[best]),
            "loss_at_best_k": float(curve.answer_loss.iloc[best]),
            "min_loss": float(curve.answer_loss.min()),
        }
        if planted:
            record.update(
                auroc=auroc(ranking, planted),
                precision_at_planted=precision_at(ranking, planted),
                n_planted=len(set(map(tuple, planted))),
            )
        records.append(record)
    return pd.DataFrame.from_records(records)


def planted_heads(task: Task, model: TransformerBridge) -> list[Head] | None:
    """The planted pathway S_t of an organism task when `model` has the shipped organism's shape
    (`organism/weights/planted.json`), else None."""
    folder = builtin_model_dir("organism")
    if not task.name.startswith("organism/") or folder is None:
        return None
    data = json.loads((folder / "planted.json").read_text(encoding="utf-8"))
    if (data["n_layers"], data["n_heads"]) != (model.cfg.n_layers, model.cfg.n_heads):
        return None
    heads = data["sets"].get(task.name.removeprefix("organism/"))
    return [tuple(h) for h in heads] if heads else None


@every_rank
def compare_methods(
    model: TransformerBridge,
    task: Task,
    methods: Sequence[str | HeadScores] = DEFAULT_METHODS,
    *,
    k_max: int = 32,
    k_step: int = 1,
    n_eval: int | None = 50,
    planted: Sequence[Head] | str | None = "auto",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    n_examples: int | None = 32,
    ablation: str = "zero",
    alpha: float = 0.25,
    seed: int = 0,
    max_rows: int = 256,
    max_new_tokens: int | None = None,
    generate: bool = True,
    on_method: Callable[[HeadScores], object] | None = None,
) -> MethodComparison:
    """Rank heads with each method (`head_scores`) and compare the rankings on one task.

    `methods` are method names (scored here with `n_examples`, `ablation`, `alpha`, `seed` and
    `options[name]`, e.g. `{"learned_mask": {"mask": m}}`) or finished `HeadScores`. Each
    ranking's elicitation curve covers k = 0, k_step, ..., k_max heads removed on `n_eval`
    evaluation examples without instruction. `planted="auto"` uses the organism's planted pathway
    for organism tasks (`organism/weights/planted.json`); a list of heads gives the truth
    explicitly; None skips ROC/AUROC. `on_method` is called with each finished ranking.
    """
    k_max = check_int("k_max", k_max, minimum=0, maximum=model.cfg.n_layers * model.cfg.n_heads)
    k_step = check_int("k_step", k_step, minimum=1)
    # Checked here by their own names, before any method runs (each is passed on as `n_examples`).
    for name, value in (("n_eval", n_eval), ("n_examples", n_examples)):
        if value is not None:
            check_int(name, value, minimum=1)
    if not methods:
        raise ValueError("methods is empty: name at least one method")
    options = dict(options or {})
    unknown = [name for name in options if name not in METHODS]
    if unknown:  # a misspelt name would leave its method on the defaults, unseen
        close = difflib.get_close_matches(str(unknown[0]), list(METHODS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"options names {unknown[0]!r}, which is not a method{hint}; the methods are {', '.join(sorted(METHODS))}"
        )
    for method in methods:
        if isinstance(method, str):
            check_choice("methods", method, sorted(METHODS))
        else:  # a HeadScores (check_ranking refuses anything else with a TypeError)
            check_ranking(str(getattr(method, "method", method)), method, model, task)
    rankings: dict[str, HeadScores] = {}
    for method in methods:
        if isinstance(method, HeadScores):
            ranking = method
        else:
            ranking = head_scores(
                model,
                task,
                method,
                n_examples=n_examples,
                ablation=ablation,
                alpha=alpha,
                seed=seed,
                max_rows=max_rows,
                **dict(options.get(method, {})),
            )
        if ranking.method in rankings:
            raise ValueError(f"method {ranking.method!r} is listed twice")
        rankings[ranking.method] = ranking
        if on_method is not None:
            on_method(ranking)
    if isinstance(planted, str):
        if planted != "auto":
            raise ValueError(f"planted must be 'auto', a list of (layer, head) or None, not {planted!r}")
        planted = planted_heads(task, model)
    ks = sorted(set(range(0, k_max + 1, k_step)) | {k_max})
    start = time.perf_counter()
    curves = elicitation_curves(
        model, task, rankings, ks, n_eval=n_eval, max_new_tokens=max_new_tokens, max_rows=max_rows, generate=generate
    )
    summary = summarize(curves, rankings, planted)
    settings = {
        "k_max": k_max,
        "k_step": k_step,
        "n_eval": n_eval,
        "n_examples": n_examples,
        "ablation": ablation,
        "curve_seconds": time.perf_counter() - start,
    }
    return MethodComparison(task.name, rankings, curves, summary, list(planted) if planted else None, settings)
