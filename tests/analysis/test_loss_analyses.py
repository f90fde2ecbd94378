import pytest
import torch

from headsup_lens import HeadMask, Task
from headsup_lens.analysis import alpha_grid, group_ablation
from headsup_lens.evaluation import answer_loss

from ..conftest import random_mask

PAIRS = [("cat", "dog"), ("sun", "moon"), ("red", "blue"), ("up", "down"), ("hot", "cold"), ("big", "small")]


@pytest.fixture(scope="module")
def task():
    return Task.from_pairs("opposites", PAIRS, instruction="Opposite of {input}:", n_eval=3)


def test_alpha_grid_is_the_instructed_loss_of_the_scaled_mask(llama, task):
    mask = HeadMask(random_mask(llama, seed=7))
    grid = alpha_grid(llama, task, mask, alphas=[0.0, 0.5, 1.0])
    assert grid.alpha.tolist() == [0.0, 0.5, 1.0]
    assert grid.loss[1] == pytest.approx(answer_loss(llama, task, mask=mask, alpha=0.5, instructed=True))
    # alpha = 1 keeps every head at full strength: the unmasked instructed loss.
    assert grid.loss[2] == pytest.approx(answer_loss(llama, task, instructed=True), abs=1e-5)
    assert grid.loss[0] != pytest.approx(grid.loss[2], abs=1e-4)
    with pytest.raises(ValueError, match="alpha"):
        alpha_grid(llama, task, mask, alphas=[1.5])


def test_group_ablation_against_answer_loss(llama, task):
    group = [(0, 1), (1, 4), (1, 5)]
    table = group_ablation(llama, task, {"g": group, "empty": []}, n_random=2, seed=3).set_index("group")
    original = answer_loss(llama, task, instructed=True)
    assert table.loc["g", "loss"] == pytest.approx(
        answer_loss(llama, task, mask=HeadMask.from_heads(group, (2, 8)), instructed=True)
    )
    assert table.loc["g", "original"] == pytest.approx(original) and table.loc["g", "size"] == 3
    assert table.loc["empty", "loss"] == pytest.approx(original)
    # Random groups of the same size, drawn from the seed: the same draw gives the same numbers.
    generator = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(2):
        picks = torch.randperm(16, generator=generator)[:3]
        heads = [divmod(int(i), 8) for i in picks]
        losses.append(answer_loss(llama, task, mask=HeadMask.from_heads(heads, (2, 8)), instructed=True))
    assert table.loc["g", "random_mean"] == pytest.approx(sum(losses) / 2)
    with pytest.raises(ValueError, match="outside"):
        group_ablation(llama, task, {"bad": [(5, 0)]})
