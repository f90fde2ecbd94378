"""`headsup train`, `headsup evaluate` and `headsup download-data`."""

from __future__ import annotations

import sys
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path

from .._io import atomic_write, atomic_write_json
from ..data import FV_TASKS, default_data_dir, load_task
from ..training import TrainConfig
from ._registry import command

PRESETS = {"paper": TrainConfig.paper, "negative": TrainConfig.negative_init, "fast": TrainConfig.fast}


@dataclass
class TrainCommand:
    """Options of `headsup train`."""

    task: list[str]
    """Task name(s), e.g. `antonym` or `translation/en-zh`; several train one mask each, simultaneously."""
    out: str
    """Output folder: mask.safetensors (masks/ for several tasks), history.csv, checkpoints/."""
    model: str = "organism"
    """Model: hub name, local Hugging Face directory, or `organism`."""
    data_dir: str | None = None
    """Data directory (default: $HEADSUP_DATA_DIR, then the per-user cache)."""
    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
    preset: str = "paper"
    """Schedule preset: paper, negative (init N(-3, 0.02)) or fast; options below that keep their paper default take the preset's value."""
    fresh: bool = False
    """Start over instead of resuming from the checkpoint in `out`."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Training hyper-parameters."""


def resolve_preset(preset: str, config: TrainConfig) -> TrainConfig:
    """`config` with every field still at the paper default replaced by the preset's value."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; use one of {sorted(PRESETS)}")
    paper, chosen = TrainConfig(), PRESETS[preset]()
    changes = {f.name: getattr(chosen, f.name) for f in fields(TrainConfig)
               if getattr(config, f.name) == getattr(paper, f.name)}
    return config.replace(**changes)


@command("train", TrainCommand, help="Train head masks that make a model perform tasks without instruction.")
def run_train(args: TrainCommand) -> int:
    from ..models import load_model
    from ..training import train_mask, train_masks

    config = resolve_preset(args.preset, args.train)
    config.validate()
    tasks = [load_task(name, args.data_dir) for name in args.task]  # bad names fail before the model loads
    model = load_model(args.model, device=args.device, dtype=args.dtype)
    out = Path(args.out)
    if len(tasks) == 1:
        result = train_mask(model, tasks[0], config, out_dir=out, resume=not args.fresh)
        print(f"{tasks[0].name}: kept {result.mask.n_kept}/{result.mask.n_total} heads -> {out / 'mask.safetensors'}")
    else:
        results = train_masks(model, tasks, config, out_dir=out, resume=not args.fresh)
        for name, result in results.items():
            print(f"{name}: kept {result.mask.n_kept}/{result.mask.n_total} heads")
        print(f"masks -> {out / 'masks'}")
    atomic_write_json(out / "train_config.json", {"model": args.model, "tasks": args.task, **config.recipe()})
    return 0


@dataclass
class EvaluateCommand:
    """Options of `headsup evaluate`."""

    task: str
    """Task name, e.g. `antonym` or `translation/en-zh`."""
    mask: str
    """Mask file (safetensors) trained for this model."""
    out: str
    """Output folder for results.csv."""
    model: str = "organism"
    """Model: hub name, local Hugging Face directory, or `organism`."""
    other_mask: str | None = None
    """Mask of another model of the same architecture (base <-> instruct swap)."""
    alpha: float = 0.25
    """Scale of the heads outside the mask in the "instructed + scaled mask" setting."""
    gate: str = "value"
    """Gate: value (hook_z) or query (uniform attention)."""
    split: str = "eval"
    """Split to evaluate: eval (the last 100 pairs), train or all."""
    batch_size: int = 16
    """Examples per forward pass / generation batch."""
    max_new_tokens: int | None = None
    """Greedy tokens per answer (default: the task's, 10 for simple tasks)."""
    no_generate: bool = False
    """Only compute the answer loss (skip generation, accuracy, ROUGE-L, BLEU)."""
    data_dir: str | None = None
    """Data directory (default: $HEADSUP_DATA_DIR, then the per-user cache)."""
    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""


@command("evaluate", EvaluateCommand, help="Compare original, instructed, masked and baseline settings on a task.")
def run_evaluate(args: EvaluateCommand) -> int:
    from ..evaluation import evaluate
    from ..masks import HeadMask
    from ..models import load_model

    task = load_task(args.task, args.data_dir)
    for path in (args.mask, args.other_mask):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"no mask file at {path}")
    model = load_model(args.model, device=args.device, dtype=args.dtype)
    mask = HeadMask.load(args.mask, model, allow_other_name=True)
    other = HeadMask.load(args.other_mask, model, allow_other_name=True) if args.other_mask else None
    table = evaluate(model, task, mask, other_mask=other, alpha=args.alpha, gate=args.gate, split=args.split,
                     batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, generate=not args.no_generate)
    out = Path(args.out)
    atomic_write(out / "results.csv", lambda tmp: table.to_csv(tmp, index=False))
    print(table.to_string(index=False))
    return 0


# --------------------------------------------------------------------------- download-data
_HEADSUP = "https://raw.githubusercontent.com/OpenDFM/HeadsUp/main/dataset"
_XNLI = "https://raw.githubusercontent.com/wuhjie/few_shots_that_matters_wu/6bfe6324e428ec21a777b5543cd8e50ec82dcb3c/data/xnli"
XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
FEWSHOT_TASKS = ("antonym", "capitalize_first_letter", "conll2003_location", "fruit_v_animal_3", "hybrid",
                 "product-company", "sentiment")
DATASETS = ("function_vectors", "xnli", "iwslt2017")


@dataclass
class DownloadCommand:
    """Options of `headsup download-data`."""

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
        raise ValueError(f"unknown dataset(s) {unknown}; choose from {list(DATASETS)}")
    bad_languages = sorted(set(languages) - set(XNLI_LANGUAGES))
    if bad_languages:
        raise ValueError(f"unknown XNLI language(s) {bad_languages}; choose from {list(XNLI_LANGUAGES)}")
    plan = []
    if "function_vectors" in only:
        plan += [(f"{_HEADSUP}/function_vectors/abstractive/{t}.json", f"function_vectors/abstractive/{t}.json")
                 for t in FV_TASKS]
        plan += [(f"{_HEADSUP}/function_vectors/fewshot/{t}.json", f"function_vectors/fewshot/{t}.json")
                 for t in FEWSHOT_TASKS]
    if "xnli" in only:
        plan += [(f"{_XNLI}/{split}-{lang}.tsv", f"xnli/{split}-{lang}.tsv")
                 for split in ("dev", "test") for lang in languages]
    if "iwslt2017" in only:
        plan += [(f"{_HEADSUP}/iwslt2017/{p}-test.parquet", f"iwslt2017/{p}-test.parquet")
                 for p in ("en-de", "en-fr", "en-zh")]
    return plan


@command("download-data", DownloadCommand, help="Fetch the paper's public datasets into the data directory.")
def run_download(args: DownloadCommand) -> int:
    import os

    from ..data import ENV_VAR

    out = Path(args.out or os.environ.get(ENV_VAR) or default_data_dir()).expanduser()
    plan = download_plan(args.only, args.languages)
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
        print(f"{len(plan)} files in {out}; use it with {ENV_VAR}={out} or data_dir=...")
    return 0
