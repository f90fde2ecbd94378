"""`DemoConfig`: the options of `headsup demo` (kept light so `headsup demo --help` imports no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..data._task import safe_name
from ..options import DataOptions, FigureOptions, ModelOptions, ThreadOptions, check_counts, option

DEFAULT_TASKS = ("organism/reverse", "organism/antonym", "organism/translate")
# The default output folder, relative to the current directory; the repository's .gitignore lists it.
DEFAULT_OUT = "headsup_demo"


@dataclass(frozen=True)
class DemoConfig(ThreadOptions, FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup demo`."""

    tasks: list[str] = option(default_factory=lambda: list(DEFAULT_TASKS), aliases=["--task"])
    """Tasks to train masks for: names (`headsup tasks` lists them) or your own .json/.jsonl/.csv files of
    input/output pairs; repeat --task or give several (default: the organism's reverse, antonym, translate)."""
    out: str = DEFAULT_OUT
    """Output folder for the report, figures, tables and masks (default: ./headsup_demo, git-ignored in the repository)."""
    masks: str | None = None
    """Folder of stored masks, one `<task>.safetensors` per task (e.g. figures/smollm2/masks): used instead of training."""
    steps: int = 300
    """Mask-training steps (the fast schedule of `TrainConfig.fast`; the paper uses 6 250)."""
    batch_size: int = 16
    """Training examples per task per step."""
    seed: int = 0
    """Seed of mask training, the random baselines and the random removal order."""
    influence_k: int = 64
    """Influence order: re-order the first K heads of the weight-order sweep by their effect."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_counts(self, steps=1, batch_size=1, seed=0, influence_k=1)


def stored_mask_files(folder: str, tasks: list[str]) -> dict[str, Path]:
    """`<folder>/<task>.safetensors` for each task; a missing folder or file is a ValueError naming it."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ValueError(f"--masks {folder}: no such folder")
    files = {name: root / f"{safe_name(name)}.safetensors" for name in tasks}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise ValueError(f"--masks {folder}: no stored mask for {', '.join(missing)}")
    return files
