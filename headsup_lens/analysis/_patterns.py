"""Gradient-based activation patterns of attention heads (Zhao, Du et al., "SFT achieves rapid task
adaption via alternating attention head activation patterns") and their statistics."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

import numpy as np
import pandas as pd
import scipy.stats
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from typing_extensions import Unpack

from ..data import TaskBatch, tokenize_pairs, tokenize_task
from ..gates import MaskLike
from ..models import model_device
from ..models._sharding import every_rank
from ..objective import answer_nll
from ._common import Gate, gated
from ._pathways import overlap_p_value


def _as_batch(model: TransformerBridge, data, split: str, instructed: bool) -> TaskBatch:
    if isinstance(data, TaskBatch):
        return data.to(model_device(model))
    if hasattr(data, "pairs") and hasattr(data, "split_indices"):
        return tokenize_task(model, data, split=split, instructed=instructed)
    pairs = list(data)
    if not pairs:
        raise ValueError("no examples given")
    return tokenize_pairs(model, pairs)


ACTIVATIONS = {"pattern": "attn.hook_pattern", "z": "attn.hook_z"}


class PatternOptions(TypedDict, total=False):
    """The keyword options of `activation_pattern` and `example_patterns`."""

    mask: MaskLike | None
    """A mask that gates the model while the patterns are taken (default None: ungated)."""
    gate: Gate
    """The gate `mask` acts through, a key of `gates.GATES` (default "value")."""
    instructed: bool
    """A `Task`'s prompts with its instruction (default False)."""
    split: str
    """The split of a `Task` (default "train")."""
    batch_size: int
    """Examples per backward pass (default 8)."""
    activation: str
    """"pattern" (the attention probabilities, `hook_pattern`; default) or "z" (the head's output, `hook_z`)."""


@every_rank
def activation_pattern(
    model: TransformerBridge, data, **options: Unpack[PatternOptions]
) -> Float[Tensor, "n_layers n_heads"]:
    """Per head, `E_x[ sum |A ⊙ ∂L_x/∂A| ]`, with A the head's attention probabilities
    (`blocks.L.attn.hook_pattern`, `[query, key]`, summed over both) and L_x the example's mean
    answer-token cross-entropy; `activation="z"` uses the head's output `blocks.L.attn.hook_z`
    (`[pos, d_head]`) instead: the mean over the examples of `example_patterns`.

    `∂L/∂A` is the total derivative: the gradient reaching A through every later layer (A is an
    intermediate of one backward pass, not a detached copy). `data` is a `TaskBatch`
    (right-padded, answer-only labels), a `Task` (its `split`, instructed or not) or a list of
    `(input, output)` pairs. An optional `mask` gates the model (a pattern change is then
    `activation_pattern(..., mask=m) - activation_pattern(...)`). Padding carries no gradient, so
    batching does not change the result.
    """
    return example_patterns(model, data, **options).mean(0).float()


@every_rank
def example_patterns(
    model: TransformerBridge,
    data,
    *,
    mask: MaskLike | None = None,
    gate: Gate = "value",
    instructed: bool = False,
    split: str = "train",
    batch_size: int = 8,
    activation: str = "pattern",
) -> Float[Tensor, "n_examples n_layers n_heads"]:
    """Every example's own activation pattern `sum |A ⊙ ∂L_x/∂A|` (float64; `activation_pattern` is
    their mean), so that a statistic of the mean pattern can be bootstrapped over the examples."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {activation!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batch = _as_batch(model, data, split, instructed)
    n_layers = model.cfg.n_layers
    scores = torch.zeros(len(batch), n_layers, model.cfg.n_heads, dtype=torch.float64)
    counts = (batch.labels != -100).sum(1)
    if (counts == 0).any():
        raise ValueError("some examples have no answer tokens")
    names = [f"blocks.{l}.{ACTIVATIONS[activation]}" for l in range(n_layers)]
    for start in range(0, len(batch), batch_size):
        rows = slice(start, start + batch_size)
        width = int(batch.attention_mask[rows].sum(1).max())
        chunk = TaskBatch(batch.input_ids[rows, :width], batch.attention_mask[rows, :width], batch.labels[rows, :width])
        seen: dict[int, Tensor] = {}
        probes: dict[int, Tensor] = {}

        def keep(layer: int):
            def hook(value: Tensor, hook) -> Tensor:
                # A zero added at A: its gradient is the total derivative dL/dA, through every later
                # layer (the frozen model would otherwise carry no gradient at all).
                seen[layer] = value.detach()
                probes[layer] = torch.zeros_like(value, requires_grad=True)
                return value + probes[layer]

            return hook

        hooks = [(name, keep(l)) for l, name in enumerate(names)]
        with torch.enable_grad(), gated(model, mask, gate=gate), model.hooks(fwd_hooks=hooks):
            nll, owner = answer_nll(model, chunk)
            per_example = torch.zeros(len(chunk), device=nll.device).index_add(0, owner, nll) / counts[rows].to(
                nll.device
            )
            missing = [names[l] for l in range(n_layers) if l not in probes]
            if missing:
                raise ValueError(f"{missing[0]} was never reached by the forward pass")
            # Examples do not interact, so the gradient of the sum is every example's own gradient.
            grads = torch.autograd.grad(per_example.sum(), [probes[l] for l in range(n_layers)], allow_unused=True)
        for layer, grad in enumerate(grads):
            if grad is None:
                raise ValueError(
                    f"{names[layer]} does not reach the loss on this architecture (attention is "
                    "computed outside the hook), so no activation pattern can be taken from it"
                )
            product = (seen[layer] * grad).abs()
            # pattern: [batch, head, q, k]; z: [batch, pos, head, d_head]
            score = product.sum((-1, -2)) if activation == "pattern" else product.sum((1, 3))
            scores[rows, layer] = score.double().cpu()
    return scores


def gini(pattern: Float[Tensor, "*shape"]) -> float:
    """Gini coefficient of the (non-negative) head scores, `Σ_i Σ_j |x_i - x_j| / (2 n² mean)`:
    0 = all heads equal, -> 1 = one head has all."""
    x = np.sort(np.asarray(pattern, dtype=np.float64).ravel())
    if (x < 0).any():
        raise ValueError("the Gini coefficient needs non-negative values")
    n, total = x.size, x.sum()
    if total == 0:
        return 0.0
    return float(((2 * np.arange(1, n + 1) - n - 1) * x).sum() / (n * total))


def coefficient_of_variation(pattern: Float[Tensor, "*shape"]) -> float:
    """`σ / μ` of the head scores, with σ the *population* standard deviation (divisor n).

    The paper defines CV as standard deviation over mean without naming the divisor; the scores of
    all heads are the whole population (not a sample of it), and its kurtosis is the moment ratio
    of the same population, so n is used for both. (With n-1 the CV grows by sqrt(n / (n-1)):
    1.0009 for 576 heads.)
    """
    x = np.asarray(pattern, dtype=np.float64).ravel()
    mean = x.mean()
    if mean == 0:
        raise ValueError("the coefficient of variation needs a non-zero mean")
    return float(x.std(ddof=0) / mean)


def kurtosis(pattern: Float[Tensor, "*shape"], *, excess: bool = False) -> float:
    """Pearson kurtosis `E[(x - μ)^4] / σ^4` of the head scores (population moments): 3 for a normal
    distribution, > 3 = heavy tails, as the paper reads it. `excess=True` gives Fisher's excess
    kurtosis (Pearson - 3)."""
    x = np.asarray(pattern, dtype=np.float64).ravel()
    return float(scipy.stats.kurtosis(x, fisher=excess, bias=True))


def pattern_statistics(patterns: Mapping[str, Tensor]) -> pd.DataFrame:
    """Gini, coefficient of variation and (Pearson) kurtosis per named pattern: the paper's Table 1."""
    return pd.DataFrame(
        [
            {"pattern": name, "gini": gini(p), "cv": coefficient_of_variation(p), "kurtosis": kurtosis(p)}
            for name, p in patterns.items()
        ]
    )


def pattern_trajectory(
    patterns: Mapping[int, Tensor], final: Float[Tensor, "n_layers n_heads"] | None = None
) -> pd.DataFrame:
    """Per step, the Pearson correlation and the mean squared error of the pattern to the final one
    (the paper's Fig. 5). `patterns` maps training step -> pattern; `final` defaults to the pattern
    of the last step."""
    if not patterns:
        raise ValueError("no patterns given")
    steps = sorted(patterns)
    target = np.asarray(patterns[steps[-1]] if final is None else final, dtype=np.float64).ravel()
    rows = []
    for step in steps:
        x = np.asarray(patterns[step], dtype=np.float64).ravel()
        if x.shape != target.shape:
            raise ValueError(f"the pattern of step {step} has {x.size} values, the final one {target.size}")
        rows.append(
            {"step": step, "correlation": float(np.corrcoef(x, target)[0, 1]), "mse": float(((x - target) ** 2).mean())}
        )
    return pd.DataFrame(rows)


@dataclass
class HeadOverlap:
    """How many of the `k` heads of one set are in another of `m` heads, out of `n` heads in all."""

    overlap: int
    k: int
    m: int
    n: int
    expected: float
    """`k m / n`: the overlap of a random set of k heads, on average."""
    p_value: float
    """P(overlap >= observed) for a random set of k heads (hypergeometric, one-sided)."""


def head_overlap(
    selected: Float[Tensor, "n_layers n_heads"], reference: Float[Tensor, "n_layers n_heads"]
) -> HeadOverlap:
    """Overlap of two head sets (non-zero entries of two `[n_layers, n_heads]` indicators) against
    chance: e.g. the heads whose activation pattern changed most vs the heads a learned mask removes."""
    a = np.asarray(selected, dtype=np.float64).ravel() != 0
    b = np.asarray(reference, dtype=np.float64).ravel() != 0
    if a.shape != b.shape:
        raise ValueError(f"selected has {a.size} heads, reference {b.size}")
    n, k, m, overlap = a.size, int(a.sum()), int(b.sum()), int((a & b).sum())
    return HeadOverlap(overlap, k, m, n, k * m / n, overlap_p_value(overlap, m, k, n))


def top_heads(scores: Float[Tensor, "n_layers n_heads"], k: int) -> Tensor:
    """A 0/1 `[n_layers, n_heads]` indicator of the k heads with the largest scores."""
    scores = torch.as_tensor(scores)
    if not 0 < k <= scores.numel():
        raise ValueError(f"k must lie in [1, {scores.numel()}], got {k}")
    out = torch.zeros(scores.numel())
    out[scores.flatten().topk(k).indices] = 1.0
    return out.reshape(scores.shape)


def pattern_correlation(patterns: Mapping[str, Tensor]) -> pd.DataFrame:
    """Pearson correlation matrix between named patterns (flattened over heads). A constant pattern
    (a change that is zero everywhere, say) has no correlation with anything: its row and column
    are NaN."""
    names = list(patterns)
    if len(names) < 2:
        raise ValueError("need at least two patterns to correlate")
    with np.errstate(invalid="ignore", divide="ignore"):  # the NaN of a constant pattern is the answer
        matrix = np.corrcoef(np.stack([np.asarray(patterns[n], dtype=np.float64).ravel() for n in names]))
    return pd.DataFrame(matrix, index=names, columns=names)


@dataclass
class GroupingTest:
    """Do tasks of one group (e.g. antonym and synonym) have more similar pattern changes than tasks
    of different groups? The statistic is the mean correlation of the pairs inside a group."""

    within: float
    """Mean correlation of the pairs of tasks inside a group."""
    between: float
    """Mean correlation of the pairs of tasks from different groups."""
    p_value: float
    """P(within >= observed) when the task labels are assigned to the groups at random (same group
    sizes); exact over every assignment up to `max_exact` tasks, else from `n` random draws."""
    nearest_in_group: int
    """Tasks whose most correlated other task is in their own group."""
    n_tasks: int
    n_assignments: int
    """Assignments the p-value counts (the observed one included)."""
    min_p: float
    """The smallest p-value any matrix could give with these group sizes (the share of assignments
    that make the same groups): at or above the test's level, the test has no power."""


def grouping_test(
    correlation: pd.DataFrame,
    groups: Sequence[Sequence[str]],
    *,
    max_exact: int = 9,
    n: int = 100_000,
    seed: int = 0,
) -> GroupingTest:
    """Permutation test of whether `groups` of related tasks show in a task-by-task correlation matrix
    of pattern changes (`pattern_correlation`; the paper's Fig. 2 groups related tasks by eye).
    Every task of the matrix must be in exactly one group, and some group must hold two tasks."""
    names = list(correlation.index)
    members = [name for group in groups for name in group]
    if sorted(members) != sorted(names) or len(set(members)) != len(members):
        raise ValueError(f"groups must hold every task of the matrix once: {names}, got {list(map(list, groups))}")
    if list(correlation.columns) != names:
        raise ValueError("the correlation matrix must have the same tasks as rows and columns")
    if all(len(group) < 2 for group in groups):
        raise ValueError("no group holds two tasks: nothing to test")
    matrix = correlation.to_numpy(dtype=np.float64)
    index = {name: i for i, name in enumerate(names)}
    label = np.empty(len(names), dtype=int)
    for g, group in enumerate(groups):
        label[[index[name] for name in group]] = g
    upper = np.triu(np.ones_like(matrix, dtype=bool), k=1)

    def within(labels: np.ndarray) -> float:
        return float(matrix[upper & (labels[:, None] == labels[None, :])].mean())

    observed = within(label)
    same = label[:, None] == label[None, :]
    between = float(matrix[upper & ~same].mean()) if (upper & ~same).any() else float("nan")
    if len(names) <= max_exact:
        draws = [label[list(order)] for order in itertools.permutations(range(len(names)))]
    else:
        rng = np.random.default_rng(seed)
        draws = [label] + [rng.permutation(label) for _ in range(n - 1)]
    null = np.array([within(d) for d in draws])
    same_groups = np.array([((d[:, None] == d[None, :]) == same).all() for d in draws])
    off = matrix.copy()
    np.fill_diagonal(off, -np.inf)
    nearest = int(sum(label[off[i].argmax()] == label[i] for i in range(len(names))))
    return GroupingTest(
        within=observed,
        between=between,
        p_value=float((null >= observed - 1e-12).mean()),
        nearest_in_group=nearest,
        n_tasks=len(names),
        n_assignments=len(draws),
        min_p=float(same_groups.mean()),
    )


@dataclass
class PatternFit:
    """`target ≈ intercept + Σ coefficients[name] · components[name]`, with R² of the fit."""

    coefficients: dict[str, float]
    intercept: float
    r2: float
    fitted: Tensor


def fit_pattern_change(target: Tensor, components: Mapping[str, Tensor], *, intercept: bool = False) -> PatternFit:
    """Least-squares fit of one pattern change (e.g. a complex task's) from others' (basic tasks')."""
    if not components:
        raise ValueError("no component patterns given")
    y = np.asarray(target, dtype=np.float64).ravel()
    columns = []
    for name, component in components.items():
        c = np.asarray(component, dtype=np.float64).ravel()
        if c.shape != y.shape:
            raise ValueError(f"component {name!r} has {c.size} values, the target {y.size}")
        columns.append(c)
    if intercept:
        columns.append(np.ones_like(y))
    design = np.stack(columns, axis=1)
    solution, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ solution
    residual = ((y - fitted) ** 2).sum()
    spread = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - residual / spread if spread > 0 else float(residual == 0)
    names = list(components)
    return PatternFit(
        coefficients={n: float(v) for n, v in zip(names, solution)},
        intercept=float(solution[-1]) if intercept else 0.0,
        r2=float(r2),
        fitted=torch.tensor(fitted, dtype=torch.float32).reshape(torch.as_tensor(target).shape),
    )


def shuffled_fit_r2(
    target: Tensor, components: Mapping[str, Tensor], *, n: int = 1000, seed: int = 0, intercept: bool = False
) -> np.ndarray:
    """R² of `fit_pattern_change` when each component's values are permuted over the heads
    (independently per component and draw): the chance level of a composition fit, `[n]`."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    rng = np.random.default_rng(seed)
    flat = {name: np.asarray(c, dtype=np.float64).ravel() for name, c in components.items()}
    return np.array(
        [
            fit_pattern_change(
                target, {k: torch.from_numpy(rng.permutation(v)) for k, v in flat.items()}, intercept=intercept
            ).r2
            for _ in range(n)
        ]
    )


def rank_by_pattern(
    target: Float[Tensor, "n_layers n_heads"],
    candidates: Mapping[str, Tensor],
    *,
    similarity: Literal["pearson", "cosine"] = "pearson",
    center: bool = False,
) -> pd.DataFrame:
    """Candidate (source) tasks ranked by how similar their activation-pattern *change* is to the
    target task's: pattern-guided data selection (the paper's Tables 2/3), fine-tune on the top k.

    Pass pattern changes, `after - before` a fine-tuning run (`activation_pattern` at both ends):
    the quantity the paper compares between tasks (Fig. 2, task-specific changes) and composes from
    basic tasks (Eq. 3), so a basic task whose SFT moves the heads the way the target's SFT does is
    taken to teach the target what it needs. Patterns themselves can be passed as well (the ranking
    only sees vectors over heads). `similarity`: Pearson correlation over the heads (as
    `pattern_correlation`) or cosine similarity (no mean removed). `center=True` first subtracts the
    mean of the candidates' vectors from the target and from every candidate: it removes a change
    that all tasks share (on the organism, changes correlate 0.94-0.99, so the plain ranking sees
    mostly their small differences), an option of this project, not the paper's.

    Returns one row per candidate, most similar first: `rank` (1 = most similar; ties keep the
    order of `candidates`), `candidate`, `similarity`.
    """
    if not candidates:
        raise ValueError("no candidates given")
    y = np.asarray(target, dtype=np.float64).ravel()
    names = list(candidates)
    rows = []
    for name in names:
        x = np.asarray(candidates[name], dtype=np.float64).ravel()
        if x.shape != y.shape:
            raise ValueError(f"candidate {name!r} has {x.size} values, the target {y.size}")
        rows.append(x)
    matrix = np.stack(rows)
    if center:
        shared = matrix.mean(0)
        matrix, y = matrix - shared, y - shared
    if similarity == "pearson":
        matrix, y = matrix - matrix.mean(1, keepdims=True), y - y.mean()
    norms = np.linalg.norm(matrix, axis=1)
    if np.linalg.norm(y) == 0:
        raise ValueError(f"the target is constant{' after centring' if center else ''}: no {similarity} similarity")
    flat = [n for n, v in zip(names, norms) if v == 0]
    if flat:
        raise ValueError(
            f"candidate {flat[0]!r} is constant{' after centring' if center else ''}: no {similarity} similarity"
        )
    scores = matrix @ y / (norms * np.linalg.norm(y))
    order = np.argsort(-scores, kind="stable")
    return pd.DataFrame(
        {"rank": np.arange(1, len(names) + 1), "candidate": [names[i] for i in order], "similarity": scores[order]}
    )
