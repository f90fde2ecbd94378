"""The README: short, its commands and library example run as written on the default model (the
organism), its headline table is the one generated from the data, and its links resolve."""

import importlib.util
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 8000


def readme_tool():
    spec = importlib.util.spec_from_file_location("docs_hooks_readme", ROOT / "docs" / "_hooks" / "readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_is_short():
    assert len(README.read_bytes()) <= MAX_BYTES


def test_the_first_two_commands_install_and_run_then_test():
    text = README.read_text()
    found = re.search(r"## Set up and run\n\n```bash\n(.*?)```", text, flags=re.S)
    assert found is not None, "README: no '## Set up and run' block"
    commands = found.group(1)
    assert text.index("## Set up and run") < text.index("```")  # the first code of the page
    install_run, test = commands.strip().splitlines()[:2]
    assert install_run.startswith("pip install torch==2.13.0") and install_run.endswith("headsup demo")
    assert test.endswith("python3 -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^python3 -m pytest( |$)", ci, flags=re.M)  # CI runs the README's test command verbatim


def test_every_python_block_runs_as_written(tmp_path, monkeypatch):
    """All blocks in order, in one namespace, as a reader pasting them into a notebook would."""
    from headsup_lens.masks import HeadMask
    from headsup_lens.models import fingerprint

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code = blocks("python")
    assert len(code) >= 1
    namespace: dict = {}
    for i, block in enumerate(code):
        exec(compile(block, f"README block {i}", "exec"), namespace)
    assert namespace["model"].cfg.n_layers == 8  # the organism
    assert namespace["table"].setting.tolist()[:3] == ["original", "instructed", "masked"]
    assert namespace["sweep"].steps[-1] == len(namespace["mask"].removal_order())
    assert namespace["logits"].shape[-1] == namespace["model"].cfg.d_vocab
    loaded = HeadMask.load(tmp_path / "mask.safetensors", namespace["model"])
    assert loaded.model.structural() == fingerprint(namespace["model"]).structural()


def test_every_readme_name_exists():
    import headsup_lens as hl

    text = "\n".join(blocks("python"))
    for dotted in sorted(set(re.findall(r"\bhl\.([A-Za-z_][\w.]*)", text))):
        target = hl
        for part in dotted.split("."):
            if not hasattr(target, part):
                pytest.fail(f"README uses hl.{dotted}, which does not exist")
            target = getattr(target, part)


def test_every_command_line_example_parses():
    from headsup_lens.cli import command_lines

    parsers = command_lines()
    lines = [line for block in blocks("bash") for line in block.splitlines() if line.startswith("headsup ")]
    assert lines
    for line in lines:
        command, *args = shlex.split(line.split("#")[0])[1:]
        assert command in parsers, f"README: unknown command in {line!r}"
        parsers[command].read(args)  # an unknown or misspelt option is a UsageError here


def test_the_headline_table_is_generated_from_its_csv():
    """A number edited by hand in the README, or a CSV regenerated without `docs/_hooks/readme.py`."""
    tool = readme_tool()
    assert tool.current(README.read_text()) == tool.headline(), "run: python3 docs/_hooks/readme.py"


def test_the_sentence_under_the_headline_table_says_what_the_data_says():
    tool = readme_tool()
    data = pd.read_csv(ROOT / tool.SOURCE).set_index(["task", "setting"])["accuracy"]
    beats = {t for t in tool.TASKS if data[t, "masked"] > data[t, "instructed"]}
    assert beats == {"sentiment", "conll2003_person", "conll2003_location", "antonym"}
    assert not any(data[t, "random mask"] > data[t, "instructed"] for t in tool.TASKS)
    text = README.read_text()
    # The README's verdict summary is the plan's: the three SmolLM2 tasks whose masks elicit them.
    verdicts = pd.read_csv(ROOT / "figures" / "smollm2" / "verdicts.csv")
    elicited = verdicts[(verdicts.claim == "elicits") & (verdicts.verdict == "reproduces")]
    assert set(elicited.task) == {"conll2003_person", "conll2003_location", "antonym"}
    assert "the masks elicit conll2003_person, conll2003_location and antonym" in text
    sentiment = verdicts[(verdicts.claim == "elicits") & (verdicts.task == "sentiment") & verdicts.headline]
    assert set(sentiment.verdict) == {"inconclusive"} and "the verdict is **inconclusive**" in text


def test_the_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
