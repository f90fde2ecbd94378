"""One rule for every command that writes a folder: a folder holding another command's results, or the
same command's results for another recipe, is refused before any work (before torch is imported) with
one line naming what it holds and the way out; `--fresh` moves them aside; the same recipe continues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headsup_lens._io import RUN_RECORD, claimed_folder, folder_holds
from headsup_lens.cli import main
from headsup_lens.cli._registry import SIGNATURES
from headsup_lens.evaluation import MaskTaskWarning

from ..conftest import cli_in_a_fresh_process

# Every command that writes an --out folder, with options that pass every check made before the folder.
WRITERS = [
    "train",
    "evaluate",
    "sweep",
    "lens",
    "similarity",
    "pathways",
    "compare-methods",
    "demo",
    "organism",
    "bake",
]


def argv(command: str, out: Path, mask: Path) -> list[str]:
    task = ["--task", "organism/reverse"]
    return {
        "train": ["train", *task, "--preset", "fast"],
        "evaluate": ["evaluate", *task, "--mask", str(mask)],
        "sweep": ["sweep", "--prompt", "farm", "--order", "random"],
        "lens": ["lens", "--prompt", "farm"],
        "similarity": ["similarity", "--prompt", "farm", *task],
        "pathways": ["pathways", "--mask", str(mask)],
        "compare-methods": ["compare-methods", *task],
        "demo": ["demo"],
        "organism": ["organism", "train"],
        "bake": ["bake", "--mask", str(mask)],
    }[command] + ["--out", str(out)]


def as_written(folder: Path, command: str) -> Path:
    """A folder holding `command`'s results as this version writes them: its run record and a result."""
    folder.mkdir(parents=True)
    (folder / RUN_RECORD).write_text(json.dumps({"command": command, "recipe": {"model": "smollm2"}}))
    (folder / "result.csv").write_text("a,b\n1,2\n")
    return folder


def as_left_by_an_earlier_version(folder: Path, command: str) -> Path:
    """A folder of `command` written before run records: the files only it writes, or its output set's
    manifest (`.headsup-<name>.json`, owner and files)."""
    folder.mkdir(parents=True)
    for name in SIGNATURES.get(command, ()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    if command not in SIGNATURES or command in ("evaluate", "demo", "organism"):
        (folder / "result.csv").write_text("a,b\n1,2\n")
        manifest = {"owner": command, "files": ["result.csv"]}
        (folder / f".headsup-{command}.json").write_text(json.dumps(manifest))
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Each writer against a folder of each other command (as written now, and as an earlier version
    left it) and against its own folder for another recipe: (exit code, stderr) per case, the folders
    before and after, and whether torch was imported."""
    root = tmp_path_factory.mktemp("folders")
    mask = root / "mask.safetensors"
    mask.write_bytes(b"never read: the folder is refused first")
    cases, keys = [], []
    for writer in WRITERS:
        for holder in WRITERS:
            layouts = (
                {"record": as_written}
                if holder == writer
                else {"record": as_written, "legacy": as_left_by_an_earlier_version}
            )
            for layout, make in layouts.items():
                folder = make(root / f"{writer}-over-{holder}-{layout}", holder)
                keys.append((writer, holder, layout, folder, snapshot(folder)))
                cases.append(argv(writer, folder, mask))
    results, torch_imported = cli_in_a_fresh_process(cases)
    return {key[:3]: (code, err, key[3], key[4]) for key, (code, err) in zip(keys, results)}, torch_imported


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("holder", WRITERS)
def test_a_folder_of_another_command_or_recipe_is_refused_before_any_work(matrix, writer, holder):
    cases, torch_imported = matrix
    assert not torch_imported  # every refusal came before the heavy imports
    for layout in ("record", "legacy"):
        if (writer, holder, layout) not in cases:
            continue
        code, err, folder, before = cases[writer, holder, layout]
        assert code == 2 and err.count("\n") == 1, (layout, err)
        assert snapshot(folder) == before, layout  # nothing written, nothing moved
        if writer == "bake":  # a bake writes a new folder only
            assert f"exists and holds the results of `headsup {holder}`" in err, err
        elif holder != writer:
            assert f"holds the results of `headsup {holder}`" in err and "--fresh" in err, (layout, err)
        else:
            assert "for another recipe" in err and "model ('smollm2' there," in err and "--fresh" in err, err


def test_fresh_moves_another_commands_results_aside_and_records_the_new_owner(tmp_path):
    folder = as_written(tmp_path / "out", "evaluate")
    before = snapshot(folder)
    with claimed_folder(folder, "sweep", {"prompt": "farm"}, fresh=True) as moved:
        pass
    assert moved is not None and moved.name.startswith("out.old-") and snapshot(moved) == before
    assert folder_holds(folder, {}) == ("sweep", {"prompt": "farm"})
    # The same command with the same recipe continues; another recipe is refused, naming the difference.
    with claimed_folder(folder, "sweep", {"prompt": "farm"}) as moved:
        assert moved is None
    with (
        pytest.raises(ValueError, match=r"another recipe: prompt \('farm' there, 'cat' here\)"),
        claimed_folder(folder, "sweep", {"prompt": "cat"}),
    ):
        pass
    # A folder that holds no command's results (empty, or only files of its own) is taken as it is.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with claimed_folder(tmp_path / "mine", "lens", {}) as moved:
        assert moved is None and (tmp_path / "mine" / "notes.txt").is_file()


def test_real_runs_refuse_each_others_folders_and_fresh_replaces(tmp_path, capsys):
    train = ["train", "--task", "organism/reverse", "--preset", "fast", "--steps", "2", "--no-progress"]
    evaluate = ["evaluate", "--task", "organism/reverse", "--settings", "original", "--no-generate"]
    assert main([*train, "--out", str(tmp_path / "run")]) == 0
    assert main([*evaluate, "--mask", str(tmp_path / "run"), "--out", str(tmp_path / "eval")]) == 0
    capsys.readouterr()
    before = snapshot(tmp_path / "run")
    assert main([*evaluate, "--mask", str(tmp_path / "run"), "--out", str(tmp_path / "run")]) == 2
    assert "holds the results of `headsup train`" in capsys.readouterr().err
    assert main([*train, "--out", str(tmp_path / "eval")]) == 2
    assert "holds the results of `headsup evaluate` (task 'organism/reverse'" in capsys.readouterr().err
    assert snapshot(tmp_path / "run") == before
    # Another task's evaluation over this one: refused, naming the difference; --fresh replaces it.
    other = [*evaluate, "--task", "organism/plural", "--mask", str(tmp_path / "run"), "--out", str(tmp_path / "eval")]
    assert main(other) == 2
    assert "task ('organism/reverse' there, 'organism/plural' here)" in capsys.readouterr().err
    with pytest.warns(MaskTaskWarning, match="trained for task 'organism/reverse'"):
        assert main([*other, "--fresh"]) == 0
    assert "moved the earlier run aside to" in capsys.readouterr().out
    assert json.loads((tmp_path / "eval" / "evaluation.json").read_text())["task"] == "organism/plural"
    assert [p.name for p in tmp_path.glob("eval.old-*")] != []


def test_an_evaluation_of_another_model_or_mask_is_not_replaced_by_the_library(tmp_path):
    """Without a run record (the library, or an earlier version's folder) the finished evaluation's
    own record is compared: another mask is refused, the same evaluation is rerun in place."""
    import torch

    from headsup_lens import EvalConfig, HeadMask, evaluate, load_model, load_task

    model, task = load_model("organism"), load_task("organism/reverse")
    config = EvalConfig(settings=("masked",), generate=False, progress=False)
    full = HeadMask.full(model)
    evaluate(model, task, full, config, out_dir=tmp_path)
    evaluate(model, task, full, config, out_dir=tmp_path)  # the same evaluation: rerun in place
    half = HeadMask((torch.arange(model.cfg.n_layers * model.cfg.n_heads) % 2).float().view_as(full.values))
    with pytest.raises(ValueError, match="holds the evaluation of another run .*differs in mask"):
        evaluate(model, task, half, config, out_dir=tmp_path)


def test_a_run_record_that_is_not_an_object_is_one_line_from_every_writer(tmp_path):
    """`echo '[]' > X/.headsup.json` before any writing command: one line naming the file, not an
    AttributeError; nothing in the folder changes and torch is not imported."""
    mask = tmp_path / "mask.safetensors"
    mask.write_bytes(b"never read: the folder is refused first")
    folders, cases = [], []
    for writer in WRITERS:
        for i, text in enumerate(["[]", '{"command": ["lens"]}', "{"]):
            folder = tmp_path / f"{writer}-{i}"
            folder.mkdir()
            (folder / RUN_RECORD).write_text(text)
            folders.append((folder, snapshot(folder)))
            cases.append(argv(writer, folder, mask))
    results, torch_imported = cli_in_a_fresh_process(cases)
    assert not torch_imported
    for (folder, before), (code, err), case in zip(folders, results, cases):
        assert code == 2 and err.count("\n") == 1, (case, err)
        assert f"run record '{folder / RUN_RECORD}'" in err and "Traceback" not in err, err
        assert snapshot(folder) == before


@pytest.mark.parametrize(
    ("command", "file"),
    [
        (["lens", "--prompt", "farm", "--k", "2"], "lens.csv"),
        (["lens", "--prompt", "farm", "--k", "2"], "lens_resid.html"),  # a figure: refused at the commit
        (["sweep", "--prompt", "farm", "--order", "random", "--max-new-tokens", "2"], "ranks.csv"),
        (["similarity", "--prompt", "farm", "--task", "organism/reverse"], "similarity.csv"),
    ],
)
def test_a_users_own_file_in_out_is_never_replaced(tmp_path, capsys, command, file):
    """`mkdir X; echo mine > X/lens.csv; headsup lens --out X` keeps the user's file: one line, exit 2."""
    out = tmp_path / "X"
    out.mkdir()
    (out / file).write_text("mine\n")
    assert main([*command, "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"holds {file}, which no headsup command wrote there" in err and err.count("\n") == 1, err
    assert (out / file).read_text() == "mine\n"
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == {file}
    assert not (out / RUN_RECORD).exists()  # the refused run leaves no record: another command may use X
