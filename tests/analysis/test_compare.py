"""compare_methods: elicitation curves against plain evaluation runs, AUROC and precision by hand, the CLI."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
import torch

from headsup_lens import HeadMask, compare_methods, fingerprint, head_scores
from headsup_lens.analysis import auroc, curve_area, precision_at
from headsup_lens.cli import main
from headsup_lens.data import Task
from headsup_lens.evaluation import accuracy, answer_loss

PAIRS = [
    ("cat", "cat"),
    ("apple", "apple"),
    ("sun", "sun"),
    ("ab", "ab"),
    ("tree", "tree"),
    ("x", "x"),
    ("dog", "dog"),
    ("hat", "hat"),
]


def echo_task() -> Task:
    return Task.from_pairs("echo", PAIRS, n_eval=3)


def test_curves_equal_plain_evaluation_and_scores_are_checked_by_hand(llama):
    task = echo_task()
    logits = torch.randn(llama.cfg.n_layers, llama.cfg.n_heads, generator=torch.Generator().manual_seed(0))
    learned = head_scores(llama, task, "learned_mask", mask=HeadMask.from_logits(logits, fingerprint(llama)))
    planted = [(0, 1), (1, 2), (1, 5)]
    result = compare_methods(
        llama,
        task,
        [learned, "random", "attribution_patching"],
        k_max=4,
        k_step=2,
        n_eval=None,
        planted=planted,
        n_examples=4,
        max_rows=5,
    )
    assert list(result.summary.method) == ["learned_mask", "random", "attribution_patching"]
    assert sorted(set(result.curves.k)) == [0, 2, 4] and len(result.curves) == 9
    first = result.curves[result.curves.k == 0]
    assert first.answer_loss.nunique() == 1 and first.accuracy.nunique() == 1  # the full model, once
    for name, ranking in result.scores.items():
        for k in (2, 4):
            row = result.curves[(result.curves.method == name) & (result.curves.k == k)].iloc[0]
            mask = HeadMask.from_heads(ranking.order[:k], fingerprint(llama))
            assert row.answer_loss == pytest.approx(answer_loss(llama, task, mask=mask), rel=1e-5)
            assert row.accuracy == pytest.approx(accuracy(llama, task, mask=mask))
        # AUROC by hand: the share of (planted, other) pairs the scores order correctly (ties count half)
        flat = {
            (l, h): ranking.scores[l, h].item() for l in range(llama.cfg.n_layers) for h in range(llama.cfg.n_heads)
        }
        others = [h for h in flat if h not in planted]
        pairs = [(flat[p] > flat[o]) + 0.5 * (flat[p] == flat[o]) for p, o in itertools.product(planted, others)]
        row = result.summary.set_index("method").loc[name]
        assert row.auroc == pytest.approx(sum(pairs) / len(pairs)) == pytest.approx(auroc(ranking, planted))
        assert row.precision_at_planted == sum(h in planted for h in ranking.order[:3]) / 3
        assert precision_at(ranking, planted, k=1) in (0.0, 1.0)
    roc = result.roc()
    assert set(roc.method) == set(result.scores) and roc.tpr.max() == 1.0


def test_curve_area_and_best_k():
    assert curve_area([0, 2, 4], [0.0, 1.0, 1.0]) == pytest.approx((1.0 + 2.0) / 4)
    assert curve_area([3], [0.5]) == 0.5


def test_compare_methods_refuses_bad_input(llama):
    with pytest.raises(ValueError, match="listed twice"):
        compare_methods(llama, echo_task(), ["random", "random"], k_max=1, n_eval=2, generate=False)
    with pytest.raises(ValueError, match="k_max must be"):
        compare_methods(llama, echo_task(), ["random"], k_max=10_000)
    with pytest.raises(ValueError, match="planted must be 'auto'"):
        compare_methods(llama, echo_task(), ["random"], k_max=1, n_eval=2, planted="yes", generate=False)


def test_cli_compare_methods_on_the_organism(tmp_path, capsys, monkeypatch):
    import torch

    threads = []  # the organism runs on one thread unless --threads says otherwise (as headsup demo)
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    out = tmp_path / "cmp"
    code = main(
        [
            "compare-methods",
            "--task",
            "organism/reverse",
            "--out",
            str(out),
            "--method",
            "random",
            "attribution_patching",
            "--k-max",
            "2",
            "--k-step",
            "1",
            "--n-eval",
            "2",
            "--n-examples",
            "2",
            "--no-png",
            "--device",
            "cpu",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert threads == [1]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.method) == ["random", "attribution_patching"]
    assert summary.auroc.between(0, 1).all() and (summary.n_planted == 12).all()
    for name in ("curves.csv", "roc.csv", "curves.html", "roc.html", "random.json", "attribution_patching.json"):
        assert (out / name).is_file(), name
    capsys.readouterr()
    elsewhere = out.with_name("unknown-method")  # into `out`, other methods are another recipe: refused first
    assert main(["compare-methods", "--task", "organism/reverse", "--out", str(elsewhere), "--method", "nope"]) == 2
    assert "--method 'nope' is not a method" in capsys.readouterr().err and not elsewhere.exists()
