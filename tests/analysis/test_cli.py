import json

import pandas as pd
import pytest
import torch

from headsup_lens import HeadMask
from headsup_lens.cli import main


@pytest.fixture(scope="module")
def mask_files(llama, tmp_path_factory):
    folder = tmp_path_factory.mktemp("masks")
    paths = []
    for seed in range(3):
        logits = torch.randn(2, 8, generator=torch.Generator().manual_seed(seed))
        paths.append(HeadMask.from_logits(logits, model=None).save(folder / f"task{seed}.safetensors"))
    return folder, paths


def test_sweep_command_writes_tables_and_figures(llama_dir, mask_files, tmp_path):
    _, paths = mask_files
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            "--prompt",
            "cat",
            "--out",
            str(out),
            "--model",
            str(llama_dir),
            "--mask",
            str(paths[0]),
            "--order",
            "influence",
            "--influence-k",
            "6",
            "--target",
            "x",
            "--max-new-tokens",
            "3",
            "--reference-prompt",
            "say cat",
            "--png",
            "false",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    ranks = pd.read_csv(out / "ranks.csv")
    assert len(ranks) == 17 and "target 'x'" in ranks.columns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["order_kind"] == "influence" and len(summary["order"]) == 16
    assert sorted(map(tuple, summary["order"][:6])) == sorted(HeadMask.load(paths[0]).removal_order()[:6])
    assert len(pd.read_csv(out / "generations.csv")) == 17
    assert len(pd.read_csv(out / "sweep_similarity.csv")) == 17 * 2
    assert {p.name for p in out.glob("*.html")} == {
        "ranks.html",
        "logits.html",
        "generations.html",
        "sweep_similarity.html",
    }


def test_lens_and_similarity_commands(llama_dir, mask_files, tmp_path):
    _, paths = mask_files
    assert (
        main(
            [
                "lens",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "lens"),
                "--model",
                str(llama_dir),
                "--k",
                "3",
                "--mask",
                str(paths[1]),
                "--png",
                "false",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    lens = pd.read_csv(tmp_path / "lens" / "lens.csv")
    assert len(lens) == 2 * 2 * 3 and (tmp_path / "lens" / "lens_resid.html").exists()
    assert (
        main(
            [
                "lens",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "raw"),
                "--model",
                str(llama_dir),
                "--k",
                "3",
                "--no-final-norm",
                "--png",
                "false",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    raw = pd.read_csv(tmp_path / "raw" / "lens.csv")
    assert not raw[raw.layer == 0].prob.equals(pd.read_csv(tmp_path / "lens" / "lens.csv")[lens.layer == 0].prob)
    assert (
        main(
            [
                "similarity",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "sim"),
                "--model",
                str(llama_dir),
                "--instruction",
                "Say {input} twice",
                "--mask",
                str(paths[1]),
                "--png",
                "false",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    table = pd.read_csv(tmp_path / "sim" / "similarity.csv")
    assert set(table.comparison) == {"original vs instructed", "masked vs instructed", "masked vs masked+instructed"}
    assert (
        main(
            [
                "similarity",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "bad"),
                "--model",
                str(llama_dir),
                "--png",
                "false",
            ]
        )
        == 2
    )  # no instruction: a clear error, exit code 2


def test_pathways_command(mask_files, tmp_path):
    folder, paths = mask_files
    out = tmp_path / "pathways"
    assert main(["pathways", "--mask", str(folder), "--out", str(out), "--png", "false"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    masks = [HeadMask.load(p) for p in paths]
    kept = torch.stack([m.values for m in masks])
    assert summary["used_by_all"] == [list(h) for h in (kept.min(0).values > 0).nonzero().tolist()]
    assert summary["names"] == ["task0", "task1", "task2"]
    jaccard = pd.read_csv(out / "jaccard.csv")
    assert len(jaccard) == 3 and jaccard.jaccard[0] == pytest.approx(masks[0].jaccard(masks[1]))
    assert main(["pathways", "--mask", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_sweep_targets_as_text_and_as_ids_are_distinct_options(gpt2_dir, tmp_path):
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "--prompt",
                "cat",
                "--out",
                str(out),
                "--model",
                str(gpt2_dir),
                "--order",
                "random",
                "--target",
                "x",
                "--target-id",
                "5",
                "--max-new-tokens",
                "1",
                "--png",
                "false",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    targets = [c for c in pd.read_csv(out / "ranks.csv").columns if c.startswith("target")]
    assert len(targets) == 2 and "target 'x'" in targets


def test_lens_and_similarity_name_every_file_written(llama_dir, tmp_path, capsys):
    assert (
        main(
            [
                "lens",
                "--prompt",
                "cat",
                "--out",
                str(tmp_path / "lens"),
                "--model",
                str(llama_dir),
                "--k",
                "3",
                "--png",
                "false",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    wrote = capsys.readouterr().out.splitlines()[-1]
    for path in (tmp_path / "lens").iterdir():
        if not path.name.startswith("."):
            assert path.name in wrote, (path.name, wrote)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lens", "--alpha", "0.5", "--gate", "value"], "--gate value, --alpha 0.5: they gate a mask, and no --mask"),
        (["lens", "--gate", "value"], "--gate value: they gate a mask, and no --mask"),
        (["similarity", "--instruction", "Say {input}", "--gate", "query"], "--gate query: they gate a mask"),
        (["sweep", "--order", "random", "--mask", "m.safetensors"], "--mask m.safetensors: the random order does not"),
        (["sweep", "--mask", "m.safetensors", "--seed", "3"], "--seed 3: --seed draws the random order only"),
        (["sweep", "--order", "random", "--influence-k", "4"], "--influence-k 4: --influence-k applies to --order"),
    ],
    ids=["lens-gate-alpha", "lens-gate", "similarity-gate", "sweep-random-mask", "sweep-seed", "sweep-influence-k"],
)
def test_options_the_run_would_ignore_are_refused_before_the_model_loads(argv, expected, tmp_path, capsys):
    out = tmp_path / "out"
    command = [*argv[:1], "--prompt", "cat", "--out", str(out), "--model", "no-such-model", *argv[1:]]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert not out.exists()


def test_sweep_over_evaluates_results_is_refused_and_leaves_them_whole(llama, llama_dir, tmp_path, capsys):
    from headsup_lens.data import Task
    from headsup_lens.evaluation import EvalConfig, evaluate

    out = tmp_path / "out"
    task = Task.from_pairs("words", [(w, w[::-1]) for w in ("abc", "xy", "hello", "tail")], n_eval=2)
    evaluate(llama, task, None, EvalConfig(settings=("original",), progress=False), out_dir=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    sweep = ["sweep", "--prompt", "cat", "--out", str(out), "--model", str(llama_dir), "--order", "random"]
    assert main([*sweep, "--max-new-tokens", "1", "--png", "false", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "holds the results of `headsup evaluate`" in err and "--fresh" in err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # The other way round: evaluate refuses before any work to replace the sweep's generations.csv.
    assert main([*sweep[:4], str(tmp_path / "sweep"), *sweep[5:], "--max-new-tokens", "1", "--png", "false"]) == 0
    with pytest.raises(ValueError, match="generations.csv written by `sweep`"):
        evaluate(llama, task, None, EvalConfig(settings=("original",), progress=False), out_dir=tmp_path / "sweep")
