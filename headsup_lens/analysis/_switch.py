"""Fig. 2 over many inputs: how often removing heads in the mask's weight order makes the answer the
model's next token, against removing as many heads in random order.

The paper shows one removal sweep per task. One input cannot tell a switch the mask's order causes from
one that any removal of that many heads would cause, nor how often it happens. `switch_rates` sweeps
every held-out input twice, in the mask's weight order and in a fresh random order per input, over
the same steps (by default up to the number of heads the mask removes: in weight order that step is
the masked model itself), and records whether and when the answer's first token becomes the top-1
next token. `SwitchRates.summary` gives each order's rate with a 95% Wilson interval and an exact
McNemar test of the paired difference (the same inputs in both orders).

`baseline="shuffled"` compares the weight order with a random order *of the same heads*: the heads the
mask removes, shuffled per input, then the rest in weight order. Both orders reach the masked model at
the same step, so the comparison asks what the random-mask control cannot: whether the mask's weights
rank its removed heads (the earliest removals carry the switch), not only whether the set matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch
from transformer_lens.model_bridge import TransformerBridge

from .._progress import progress
from .._validate import check_int
from ..data import Task
from ..evaluation import mcnemar_exact, wilson_interval
from ..masks import Head, HeadMask
from ..models._sharding import every_rank
from ._sweep import random_order, removal_sweep, weight_order

SweepLength = Literal["mask", "all"]
Baseline = Literal["random", "shuffled"]


@dataclass
class SwitchRates:
    """The result of `switch_rates`.

    `table`: one row per input and order: `example`, `input`, `answer`, `order` (weight, and random or
    shuffled: the baseline), `random_seed` (the baseline order's seed; NaN for the weight order), `switch_step` (the first swept
    step at which the answer's first token is the top-1 next token; NaN if none), `at_start` (the full
    model already puts the answer first: step 0, the same in both orders, so no removal switched it),
    `switched` (a step after 0), `last_step` and `stride` (the steps swept: 0, stride, 2·stride, ...
    and `last_step`).
    """

    task: str
    table: pd.DataFrame

    def summary(self) -> pd.DataFrame:
        """Per order: `n` inputs (those whose answer the full model does not already put first;
        `at_start` counts the others), `switched` count, `rate` with its 95% Wilson interval (`low`,
        `high`), the median switch step among the inputs that switched, and (on every row) the exact
        McNemar p-value of weight against the baseline order on the same inputs (`p_weight_vs_random`,
        named so for either baseline)."""
        table = self.table.loc[~self.table.at_start.astype(bool)]
        names = ("weight", *(o for o in dict.fromkeys(self.table.order) if o != "weight"))
        if len(names) != 2:
            raise ValueError(f"switch rates need the weight order and one baseline order, got {names}")
        by_order = {order: table.loc[table.order == order].sort_values("example") for order in names}
        weight, shuffled = (by_order[o].switched.astype(bool).tolist() for o in names)
        p = mcnemar_exact(weight, shuffled) if len(weight) == len(shuffled) and weight else float("nan")
        rows = []
        for order, part in by_order.items():
            n, hits = len(part), int(part.switched.sum())
            low, high = wilson_interval(hits, n) if n else (float("nan"), float("nan"))
            steps = part.switch_step.dropna()
            rows.append(
                {
                    "task": self.task,
                    "order": order,
                    "n": n,
                    "at_start": int(self.table.loc[self.table.order == order].at_start.sum()),
                    "switched": hits,
                    "rate": hits / n if n else float("nan"),
                    "low": low,
                    "high": high,
                    "median_switch_step": float(steps.median()) if len(steps) else float("nan"),
                    "p_weight_vs_random": p,
                }
            )
        return pd.DataFrame(rows)


@every_rank
def switch_rates(
    model: TransformerBridge,
    task: Task,
    mask: HeadMask,
    *,
    n_inputs: int | None = None,
    up_to: SweepLength = "mask",
    stride: int = 1,
    random_seed: int = 0,
    baseline: Baseline = "random",
    split: str = "eval",
    batch_size: int | None = None,
    progress_bar: bool = True,
) -> SwitchRates:
    """Removal sweeps (`removal_sweep`, next token only: no continuation) on the uninstructed prompt
    of each of the first `n_inputs` pairs of `split` (default: all), in `mask`'s weight order and in
    a random order (`random_order(model, seed=random_seed + example)`), tracking the answer's first
    token. Steps: 0, `stride`, 2·`stride`, ... up to the number of heads `mask` removes
    (`up_to="mask"`; in weight order that last step is the masked model) or every head (`"all"`), the
    last step always included. `baseline`: the second order, a random order of every head (`"random"`,
    the default) or of the heads the mask removes, then the rest in weight order (`"shuffled"`)."""
    mask.check_model(model)
    check_int("stride", stride, minimum=1)
    check_int("random_seed", random_seed, minimum=0)
    indices = task.split_indices(split)
    if n_inputs is not None:
        indices = indices[: check_int("n_inputs", n_inputs, minimum=1)]
    n_heads = model.cfg.n_layers * model.cfg.n_heads
    last = n_heads - mask.n_kept if up_to == "mask" else n_heads
    if last < 1:
        raise ValueError("the mask removes no head: there is nothing to sweep (use up_to='all')")
    steps = sorted(set(range(0, last + 1, stride)) | {last})
    learned = weight_order(mask)
    removed = n_heads - mask.n_kept
    orders = ("weight", baseline)
    rows = []
    with progress(
        total=2 * len(indices), desc=f"{task.name}: switch rates ({baseline})", unit="sweep", enabled=progress_bar
    ) as bar:
        for example, index in enumerate(indices):
            x, answer = task.pairs[index]
            for order_name in orders:
                seed = random_seed + example if order_name != "weight" else None
                if seed is None:
                    order = learned
                elif order_name == "random":
                    order = random_order(model, seed=seed)
                else:
                    order = shuffled_order(learned, removed, seed)
                sweep = removal_sweep(
                    model,
                    task.user_text(x),
                    order,
                    target_tokens=[answer],
                    top_k=0,
                    max_new_tokens=0,
                    steps=steps,
                    batch_size=batch_size,
                    progress=False,
                )
                step = sweep.switch_step
                rows.append(
                    {
                        "example": example,
                        "input": x,
                        "answer": answer,
                        "order": order_name,
                        "random_seed": np.nan if seed is None else seed,
                        "switch_step": np.nan if step is None else step,
                        "at_start": step == 0,
                        "switched": step is not None and step > 0,
                        "last_step": last,
                        "stride": stride,
                    }
                )
                bar.update(1)
    return SwitchRates(task=task.name, table=pd.DataFrame(rows))


def shuffled_order(order: list[Head], n_first: int, seed: int) -> list[Head]:
    """`order` with its first `n_first` heads in a random order (seeded), the rest as they are."""
    generator = torch.Generator().manual_seed(seed)
    first = [order[int(i)] for i in torch.randperm(n_first, generator=generator)]
    return first + list(order[n_first:])
