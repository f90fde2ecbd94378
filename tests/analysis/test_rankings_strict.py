"""Rankings and their comparison refuse what they cannot compare: another model's shape, another task,
NaN scores, a misspelt method's options; saved rankings are read strictly and round-trip."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import FileFormatError, compare_methods, head_scores, load_model
from headsup_lens.analysis import HeadScores, elicitation_curves
from headsup_lens.data import Task

PAIRS = [("cat", "cat"), ("apple", "apple"), ("sun", "sun"), ("ab", "ab"), ("tree", "tree"), ("dog", "dog")]


def echo_task(name: str = "echo") -> Task:
    return Task.from_pairs(name, PAIRS, n_eval=2)


def test_a_ranking_of_another_shape_is_refused(llama):
    other = HeadScores("random", torch.rand(3, 5), task="echo")
    with pytest.raises(
        ValueError, match=r"ranking 'random' scores a \[3, 5\] grid of heads; this model has .* \[2, 8\]"
    ):
        compare_methods(llama, echo_task(), [other], k_max=2, n_eval=2, planted=None)
    with pytest.raises(ValueError, match="made for another model"):
        elicitation_curves(llama, echo_task(), {"random": other}, [0, 1], n_eval=2, generate=False)


def test_a_ranking_of_another_task_is_refused(llama):
    ranking = head_scores(llama, echo_task("antonym"), "random")
    with pytest.raises(ValueError, match="ranking 'random' was made for task 'antonym', not 'echo'"):
        compare_methods(llama, echo_task(), [ranking], k_max=2, n_eval=2, planted=None)
    hand_made = HeadScores("mine", torch.rand(2, 8))  # no task recorded: taken as given
    result = compare_methods(llama, echo_task(), [hand_made], k_max=1, n_eval=2, planted=None, generate=False)
    assert list(result.summary.method) == ["mine"]


@pytest.fixture
def custom_method():
    """Registers `run` as the method "custom" for one test."""
    from headsup_lens.analysis import METHODS, register_method

    def register(run):
        register_method("custom", "a method of one test")(run)
        return "custom"

    yield register
    METHODS.pop("custom", None)


@pytest.mark.parametrize(
    "result, error, message",
    [
        ((torch.rand(2, 2), {}), ValueError, r"'custom' returned scores of shape \[2, 2\]; this model has .* \[2, 8\]"),
        ((torch.rand(8, 2), {}), ValueError, r"shape \[8, 2\]"),  # transposed
        ((torch.rand(16), {}), ValueError, r"shape \[16\]"),  # flat
        ((torch.rand(2, 8, 1), {}), ValueError, r"shape \[2, 8, 1\]"),
        (([[0.0] * 8] * 2, {}), TypeError, "scores as a tensor"),
        ((torch.rand(2, 8), None), TypeError, "settings as a dict"),
        (torch.rand(2, 8), TypeError, r"must return \(scores, settings\)"),
    ],
)
def test_a_custom_method_must_score_every_head_of_the_model(llama, custom_method, result, error, message):
    name = custom_method(lambda context: result)
    with pytest.raises(error, match=message):
        head_scores(llama, echo_task(), name, n_examples=2)


def test_a_custom_method_of_the_right_shape_is_ranked(llama, custom_method):
    scores = torch.arange(16.0).view(2, 8)
    name = custom_method(lambda context: (scores, {"note": 1}))
    ranking = head_scores(llama, echo_task(), name, n_examples=2)
    assert torch.equal(ranking.scores, scores) and ranking.order[0] == (1, 7) and ranking.settings["note"] == 1


@pytest.mark.parametrize("bad", [float("nan"), "all"])
def test_nan_scores_are_refused(bad):
    scores = torch.full((2, 3), float("nan")) if bad == "all" else torch.tensor([[0.1, bad, 0.3], [0.0, 1.0, 2.0]])
    count = 6 if bad == "all" else 1
    with pytest.raises(ValueError, match=f"the scores of 'm' hold NaN at {count} of 6 heads"):
        HeadScores("m", scores)


def test_an_option_for_a_misspelt_method_is_refused(llama):
    with pytest.raises(
        ValueError,
        match=r"options names 'soft_gate_necesary', which is not a method \(did you mean 'soft_gate_necessary'\?\)",
    ):
        compare_methods(
            llama,
            echo_task(),
            ["random"],
            k_max=1,
            n_eval=2,
            planted=None,
            options={"soft_gate_necesary": {"steps": 1}},
        )
    with pytest.raises(ValueError, match="methods must be one of"):
        compare_methods(llama, echo_task(), ["randm"], k_max=1, n_eval=2, planted=None)


def test_nan_activations_are_a_clear_error(llama_dir):
    model = load_model(llama_dir, device="cpu", dtype="float32")
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if "embed" in name).fill_(float("nan"))
    with pytest.raises(ValueError, match="logits on a probe input hold NaN or infinite values"):
        head_scores(model, echo_task(), "single_ablation", n_examples=2)


def test_nan_scores_from_a_method_are_refused_by_name(llama_dir):
    model = load_model(llama_dir, device="cpu", dtype="float32")
    head_scores(model, echo_task(), "single_ablation", n_examples=2)  # the read-out is checked once, on finite weights
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if "embed" in name).fill_(float("nan"))
    with pytest.raises(ValueError, match="the scores of 'single_ablation' hold NaN .* NaN activations"):
        head_scores(model, echo_task(), "single_ablation", n_examples=2)


# ---------------------------------------------------------------------- saved rankings
@pytest.mark.parametrize(
    "change, message",
    [
        ({"scores": [[0.1, 0.2], [0.3]]}, "field 'scores': rows of different lengths"),
        ({"scores": [[0.1, "0.2"]]}, r"field 'scores\[0\]\[1\]': expected a number, got '0.2'"),
        ({"scores": [[0.1, True]]}, r"field 'scores\[0\]\[1\]': expected a number, got True"),
        ({"scores": [[float("nan"), float("nan")]]}, r"field 'scores\[0\]\[0\]': is NaN"),
        ({"scores": []}, "expected a non-empty list of non-empty lists"),
        ({"seconds": -1}, "field 'seconds': expected a number >= 0"),
        ({"seconds": "3"}, "field 'seconds': expected a number"),
        ({"method": ""}, "field 'method': expected a non-empty string"),
        ({"task": 3}, "field 'task': expected a string"),
        ({"settings": []}, "field 'settings': expected an object"),
        ({"extra": 1}, r"unknown key\(s\) \['extra'\]"),
    ],
)
def test_saved_rankings_are_read_strictly(tmp_path, change, message):
    path = HeadScores("m", torch.rand(2, 2), {"a": 1}, 1.5, "echo", 0.5).save(tmp_path / "r.json")
    data = json.loads(path.read_text())
    data.update(change)
    path.write_text(json.dumps(data))
    with pytest.raises(FileFormatError, match=message):
        HeadScores.load(path)


def test_a_saved_ranking_of_another_shape_is_refused_on_load(llama, tmp_path):
    path = HeadScores("m", torch.rand(3, 5)).save(tmp_path / "r.json")
    with pytest.raises(FileFormatError, match=r"field 'scores': has shape \[3, 5\]; this model has .* \[2, 8\]"):
        HeadScores.load(path, llama)
    assert HeadScores.load(path, (3, 5)).scores.shape == (3, 5)
    path.write_text(path.read_text().replace('"method": "m",', '"method": "m", "method": "n",'))
    with pytest.raises(FileFormatError, match="the key 'method' appears twice"):
        HeadScores.load(path)


score_values = st.floats(width=32, allow_nan=False)  # infinities are an order too


@given(
    n_layers=st.integers(1, 4),
    n_heads=st.integers(1, 4),
    data=st.data(),
    task=st.none() | st.text(min_size=1, max_size=8),
    seconds=st.floats(0, 1e6),
    cpu=st.none() | st.floats(0, 1e6),
)
def test_rankings_round_trip(n_layers, n_heads, data, task, seconds, cpu):
    values = data.draw(st.lists(score_values, min_size=n_layers * n_heads, max_size=n_layers * n_heads))
    ranking = HeadScores("m", torch.tensor(values).view(n_layers, n_heads), {"k": [1, "x"]}, seconds, task, cpu)
    with tempfile.TemporaryDirectory() as folder:
        back = HeadScores.load(ranking.save(Path(folder) / "r.json"), (n_layers, n_heads))
    assert torch.equal(back.scores, ranking.scores) and back.order == ranking.order
    assert (back.method, back.task, back.settings) == (ranking.method, ranking.task, ranking.settings)
    assert back.seconds == ranking.seconds and back.cpu_seconds == ranking.cpu_seconds


json_values = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4) | st.lists(st.integers(), max_size=2)
)


@given(
    key=st.sampled_from(["method", "scores", "settings", "seconds", "task", "cpu_seconds", None]),
    value=json_values,
    data=st.data(),
)
def test_a_damaged_ranking_is_read_or_a_format_error(key, value, data):
    ranking = HeadScores("m", torch.rand(2, 3), {}, 1.0, "echo", 0.5)
    with tempfile.TemporaryDirectory() as folder:
        path = ranking.save(Path(folder) / "r.json")
        stored = json.loads(path.read_text())
        if key is None:
            stored.pop(data.draw(st.sampled_from(sorted(stored))))
        else:
            stored[key] = value
        path.write_text(json.dumps(stored))
        try:
            back = HeadScores.load(path)
        except FileFormatError as error:
            assert str(path) in str(error)
        else:  # still valid: the value fit its field
            assert back.scores.ndim == 2 and not back.scores.isnan().any() and math.isfinite(back.seconds)
