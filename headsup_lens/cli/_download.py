"""`headsup download-data`: fetch the paper's public datasets (needs internet).

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .._io import atomic_write
from ..data import ENV_VAR, FV_TASKS, default_data_dir
from ..options import Given
from ._registry import check_out_dir, command

_HEADSUP = "https://raw.githubusercontent.com/OpenDFM/HeadsUp/main/dataset"
_XNLI = "https://raw.githubusercontent.com/wuhjie/few_shots_that_matters_wu/6bfe6324e428ec21a777b5543cd8e50ec82dcb3c/data/xnli"
XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
FEWSHOT_TASKS = (
    "antonym",
    "capitalize_first_letter",
    "conll2003_location",
    "fruit_v_animal_3",
    "hybrid",
    "product-company",
    "sentiment",
)
DATASETS = ("function_vectors", "xnli", "iwslt2017")


@dataclass(frozen=True)
class DownloadCommand:
    """Options of `headsup download-data`."""

    CLAIMS_OUT: ClassVar[bool] = False  # a data folder that other tools may fill too; existing files are kept

    out: str | None = None
    """Destination folder (default: $HEADSUP_DATA_DIR, else the per-user cache folder)."""
    only: list[str] = field(default_factory=lambda: list(DATASETS))
    """Datasets to fetch: function_vectors, xnli, iwslt2017."""
    languages: list[str] = field(default_factory=lambda: list(XNLI_LANGUAGES))
    """XNLI languages to fetch."""
    overwrite: bool = False
    """Fetch files that already exist."""
    dry_run: bool = False
    """Print the URL -> file plan without downloading."""


def download_plan(only: list[str], languages: list[str]) -> list[tuple[str, str]]:
    """(url, relative path) of every public file `headsup download-data` fetches."""
    unknown = sorted(set(only) - set(DATASETS))
    if unknown:
        raise ValueError(f"--only: unknown dataset(s) {unknown}; choose from {list(DATASETS)}")
    bad_languages = sorted(set(languages) - set(XNLI_LANGUAGES))
    if bad_languages:
        raise ValueError(f"--languages: unknown XNLI language(s) {bad_languages}; choose from {list(XNLI_LANGUAGES)}")
    plan = []
    if "function_vectors" in only:
        plan += [
            (f"{_HEADSUP}/function_vectors/abstractive/{t}.json", f"function_vectors/abstractive/{t}.json")
            for t in FV_TASKS
        ]
        plan += [
            (f"{_HEADSUP}/function_vectors/fewshot/{t}.json", f"function_vectors/fewshot/{t}.json")
            for t in FEWSHOT_TASKS
        ]
    if "xnli" in only:
        plan += [
            (f"{_XNLI}/{split}-{lang}.tsv", f"xnli/{split}-{lang}.tsv")
            for split in ("dev", "test")
            for lang in languages
        ]
    if "iwslt2017" in only:
        plan += [
            (f"{_HEADSUP}/iwslt2017/{p}-test.parquet", f"iwslt2017/{p}-test.parquet")
            for p in ("en-de", "en-fr", "en-zh")
        ]
    return plan


@command("download-data", DownloadCommand)
def run_download(args: DownloadCommand, given: Given) -> int:
    out = Path(args.out or os.environ.get(ENV_VAR) or default_data_dir()).expanduser()
    plan = download_plan(args.only, args.languages)
    if not args.dry_run:
        check_out_dir(out)
    for url, relative in plan:
        target = out / relative
        if args.dry_run:
            print(f"{url} -> {target}")
            continue
        if target.exists() and not args.overwrite:
            continue
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                payload = response.read()
        except OSError as error:
            raise ValueError(f"could not fetch {url}: {error}") from error
        atomic_write(target, lambda tmp: tmp.write_bytes(payload))
        print(f"{relative} ({len(payload) / 1e3:.0f} kB)", file=sys.stderr)
    if not args.dry_run:
        print(f"wrote {len(plan)} files to {out}; use it with {ENV_VAR}={out} or --data-dir {out}")
    return 0
