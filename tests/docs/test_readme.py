"""The README's library examples run as written, on the default model (the organism)."""

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
PAPER_DATA = 'hl.load_task("antonym")'  # marks the block that needs the paper's data directory


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_first_two_commands_install_and_run_then_test():
    commands = re.search(r"## Set up and run\n\n```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    install_run, test = commands.strip().splitlines()[:2]
    assert install_run.startswith("pip install torch==2.13.0") and install_run.endswith("headsup demo")
    assert test.endswith("python3 -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "\npython3 -m pytest\n" in ci  # CI runs the README's test command verbatim


def test_every_python_block_runs_as_written(tmp_path, monkeypatch):
    """All blocks in order, in one namespace, as a reader pasting them into a notebook would."""
    import headsup_lens as hl

    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    assert len(blocks) >= 4
    namespace: dict = {}
    data = os.environ.get("HEADSUP_DATA_DIR")
    ran_paper_block = False
    for i, code in enumerate(blocks):
        if PAPER_DATA in code:
            if not data or not Path(data, "function_vectors").is_dir():
                continue
            ran_paper_block = True
        exec(compile(code, f"README block {i}", "exec"), namespace)
    assert (tmp_path / "mask.safetensors").is_file()
    assert namespace["model"].cfg.n_layers == 8  # the organism
    assert namespace["table"].setting.tolist()[:3] == ["original", "instructed", "masked"]
    assert namespace["sweep"].steps[-1] == len(namespace["mask"].removal_order())
    assert set(namespace["masks"]) == {"organism/reverse", "organism/antonym"}
    if ran_paper_block:
        assert namespace["shares"].n_examples > 0 and len(namespace["fewshot"].shots[0]) == 5
    loaded = hl.HeadMask.load(tmp_path / "mask.safetensors", namespace["model"])
    assert loaded.model.structural() == hl.fingerprint(namespace["model"]).structural()


def test_every_readme_name_exists():
    import headsup_lens as hl

    text = "\n".join(python_blocks())
    for dotted in sorted(set(re.findall(r"\bhl\.([A-Za-z_][\w.]*)", text))):
        target = hl
        for part in dotted.split("."):
            if not hasattr(target, part):
                pytest.fail(f"README uses hl.{dotted}, which does not exist")
            target = getattr(target, part)
