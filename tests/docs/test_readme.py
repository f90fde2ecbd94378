"""The README's library examples run as written, on a tiny local model instead of a hub model."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_first_two_commands_install_and_run_then_test():
    commands = re.search(r"## Set up and run\n\n```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    install_run, test = commands.strip().splitlines()[:2]
    assert install_run.startswith("pip install torch==2.13.0") and install_run.endswith("headsup demo")
    assert test.endswith("python3 -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "\npython3 -m pytest\n" in ci  # CI runs the README's test command verbatim


def test_quick_start_runs(tmp_path, llama_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = python_blocks()[0].replace('"Qwen/Qwen2.5-0.5B-Instruct"', repr(str(llama_dir)))
    namespace: dict = {}
    exec(compile(code, "README quick start", "exec"), namespace)
    assert (tmp_path / "mask.safetensors").is_file()
    import headsup_lens as hl

    loaded = hl.HeadMask.load(tmp_path / "mask.safetensors")
    assert loaded.model == hl.fingerprint(namespace["model"])
    assert loaded.values.equal(namespace["mask"].values)


def test_every_readme_name_exists():
    import headsup_lens as hl

    text = "\n".join(python_blocks())
    for dotted in sorted(set(re.findall(r"\bhl\.([A-Za-z_][\w.]*)", text))):
        target = hl
        for part in dotted.split("."):
            if not hasattr(target, part):
                pytest.fail(f"README uses hl.{dotted}, which does not exist")
            target = getattr(target, part)
