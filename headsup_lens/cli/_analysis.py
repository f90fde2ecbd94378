"""`headsup sweep`, `headsup lens`, `headsup similarity` and `headsup pathways`: the paper's analyses
as tables (CSV/JSON) and figures (HTML with a shared plotly.min.js, PNG) in an output folder.

Heavy modules (torch, TransformerLens, pandas, the analyses) are imported inside the commands, so
`--help` answers at once."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import simple_parsing

from .._io import OutputSet
from ..options import Collect, DataOptions, FigureOptions, Given, ModelOptions, model_arguments
from ._registry import check_out_dir, command, mask_file

if TYPE_CHECKING:
    from ..gates import Gate


def _write_csv(path: Path, table, index: bool = False) -> Path:
    from .._io import atomic_write_text

    return atomic_write_text(path, table.to_csv(index=index))


def _figures(out: Path, figures: dict, png: bool, files: list[str] | None = None) -> dict[str, str]:
    """Save figures (HTML beside one plotly.min.js, PNG); a PNG failure is one line on stderr.
    Returns each figure's main file; `files` receives the name of every file written."""
    from ..plots import save_figure

    written, errors = {}, set()
    for name, fig in figures.items():
        saved = save_figure(fig, out / name, png=png)
        written[name] = str(saved.png or saved.html)
        if files is not None:
            for path in (saved.html, saved.png, saved.plotly_js):
                if path is not None and path.is_file() and path.name not in files:
                    files.append(path.name)
        if png and saved.png_error:
            errors.add(saved.png_error)
    for error in sorted(errors):
        print(f"PNG figures not written (HTML written): {error}", file=sys.stderr)
    return written


def _portable(name: str) -> str:
    from ..models._fingerprint import portable_name

    return portable_name(name)


def _names(written: dict[str, str]) -> dict[str, str]:
    """Figure files by name within the output folder: summaries hold no machine's absolute paths."""
    return {name: Path(path).name for name, path in written.items()}


def _report(out: Path, files: list[str]) -> None:
    print(f"wrote to {out}: {', '.join(files)}")


def _refuse_unused(args, given: Given, fields: tuple[str, ...], reason: str) -> None:
    """Options typed on the command line that the chosen mode does not use are refused, not ignored."""
    typed = [f"{given.typed[f]} {getattr(args, f)}" for f in fields if f in given]
    if typed:
        raise ValueError(f"{', '.join(typed)}: {reason}")


def _load(args):
    from ..models import load_model

    return load_model(args.model, **model_arguments(args))


def _mask(path: str | None, model, option: str = "--mask"):
    if path is None:
        return None
    from ..masks import HeadMask

    return HeadMask.load(mask_file(path, option), model)


@dataclass
class SweepCommand(FigureOptions, ModelOptions):
    """Options of `headsup sweep`."""

    prompt: str
    """User text, wrapped in the model's chat template unless --formatted."""
    out: str
    """Output folder: ranks.csv, logits.csv, generations.csv, tokens.csv, summary.json and figures."""
    mask: str | None = None
    """Mask file (or `headsup train` output folder) whose weights give the removal order (weight and influence orders)."""
    order: str = "weight"
    """Removal order: weight (ascending sigmoid(M)), influence (App. C.3.1) or random."""
    influence_k: int | None = None
    """Influence order: how many first heads of the weight order are re-ordered (paper: 320 of 1024; default all)."""
    target: list[str] = simple_parsing.field(default_factory=list, action=Collect, nargs="+", required=False)
    """Target tokens as text (its first token is tracked; `8` is the text "8"); repeat --target or give several."""
    target_id: list[int] = simple_parsing.field(default_factory=list, action=Collect, nargs="+", required=False)
    """Target tokens as token ids of the model's vocabulary, e.g. --target-id 8 42."""
    top_k: int = 5
    """Track the full model's top-k next tokens."""
    max_new_tokens: int = 20
    """Greedy continuation length at each step."""
    batch_size: int | None = None
    """Steps per forward pass (default: as many as fit the memory budget; 1 = sequential)."""
    memory_gb: float | None = None
    """Memory budget for a chunk of steps in GiB (default: half the free GPU memory, 2 GiB on CPU)."""
    seed: int = 0
    """Seed of the random order."""
    formatted: bool = False
    """The prompt is already chat-formatted."""
    reference_prompt: str | None = None
    """Also compare every layer along the sweep with this prompt's run (e.g. the instructed user text; Fig. 5)."""


@command("sweep", SweepCommand, help="Remove heads one by one and track token ranks and continuations (Fig. 2).")
def run_sweep(args: SweepCommand, given: Given) -> int:
    from ..analysis import influence_order, layer_states, random_order, removal_sweep, sweep_similarity
    from ..plots import generation_table, logit_figure, rank_figure, sweep_similarity_figure

    if args.order not in ("weight", "influence", "random"):
        raise ValueError(f"unknown order {args.order!r}; use weight, influence or random")
    if args.order != "random" and args.mask is None:
        raise ValueError(f"the {args.order} order needs --mask")
    if args.order == "influence" and not (args.target or args.target_id):
        raise ValueError("the influence order needs at least one --target or --target-id")
    if args.order == "random":
        _refuse_unused(
            args, given, ("mask",), "the random order does not read a mask; leave it out or use --order weight"
        )
    else:
        _refuse_unused(args, given, ("seed",), f"--seed draws the random order only, not the {args.order} order")
    if args.order != "influence":
        _refuse_unused(args, given, ("influence_k",), f"--influence-k applies to --order influence, not {args.order}")
    out = check_out_dir(args.out)
    tables = ["ranks.csv", "logits.csv", "tokens.csv", "generations.csv", "summary.json"]
    tables += ["sweep_similarity.csv"] if args.reference_prompt is not None else []
    stage = OutputSet(out, "sweep", option="--out", files=tables)  # another command's files: refused before any work
    model = _load(args)
    mask = _mask(args.mask, model)
    targets: list[int | str] = [*args.target, *args.target_id]
    sweep_of = functools.partial(
        removal_sweep,
        model,
        args.prompt,
        target_tokens=targets,
        top_k=args.top_k,
        batch_size=args.batch_size,
        memory_gb=args.memory_gb,
        formatted=args.formatted,
    )
    if args.order == "random" or mask is None:  # every other order has a mask (checked above)
        order = random_order(model, seed=args.seed)
    else:
        order = mask.removal_order()
    if args.order == "influence":
        k = args.influence_k or len(order)
        first = sweep_of(order[:k], max_new_tokens=0)
        order = influence_order(first, k=k) + order[k:]
    sweep = sweep_of(order, max_new_tokens=args.max_new_tokens, record_layers=args.reference_prompt is not None)
    import pandas as pd

    _write_csv(stage.path / "ranks.csv", sweep.ranks)
    _write_csv(stage.path / "logits.csv", sweep.logits)
    _write_csv(stage.path / "tokens.csv", sweep.tokens)
    _write_csv(stage.path / "generations.csv", pd.DataFrame({"step": sweep.steps, "generation": sweep.generations}))
    figures = {"ranks": rank_figure(sweep), "logits": logit_figure(sweep), "generations": generation_table(sweep)}
    if args.reference_prompt is not None:
        from ..analysis import Setting

        reference = layer_states(model, Setting(args.reference_prompt, formatted=args.formatted))
        table = sweep_similarity(sweep, reference)
        _write_csv(stage.path / "sweep_similarity.csv", table)
        figures["sweep_similarity"] = sweep_similarity_figure(table)
    written = _figures(stage.path, figures, args.png)
    summary = {
        "model": _portable(args.model),
        "prompt": sweep.prompt,
        "order_kind": args.order,
        "order": sweep.order,
        "switch_step": sweep.switch_step,
        "change_step": sweep.change_step,
        "figures": _names(written),
        "batch_size": sweep.metadata["batch_size"],
    }
    from .._io import atomic_write_json

    atomic_write_json(stage.path / "summary.json", summary)
    stage.commit()
    from ..analysis import step_or_never

    switch, change = step_or_never(sweep.switch_step), step_or_never(sweep.change_step)
    print(
        f"{len(sweep.steps)} steps; target top-1 {'never' if switch == 'never' else f'at step {switch}'}, "
        f"continuation changes {'never' if change == 'never' else f'at step {change}'}"
    )
    _report(out, sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    return 0


@dataclass
class LensCommand(FigureOptions, ModelOptions):
    """Options of `headsup lens`."""

    prompt: str
    """User text, wrapped in the model's chat template unless --formatted."""
    out: str
    """Output folder: lens.csv and one heat map per stream."""
    mask: str | None = None
    """Optional mask file (or `headsup train` output folder) to gate the model with."""
    gate: str = "value"
    """Gate for the mask: value or query."""
    alpha: float = 0.0
    """Scale of heads outside the mask (value gate)."""
    k: int = 10
    """Top-k tokens per layer."""
    final_norm: bool = True
    """Apply the final norm before the unembedding; --no-final-norm reads the raw residual (the reference notebook)."""
    formatted: bool = False
    """The prompt is already chat-formatted."""


@command("lens", LensCommand, help="Logit lens: each layer's top tokens at the last position (final norm applied).")
def run_lens(args: LensCommand, given: Given) -> int:
    from ..analysis import logit_lens
    from ..plots import logit_lens_figure

    if args.mask is None:
        _refuse_unused(
            args, given, ("gate", "alpha"), "they gate a mask, and no --mask is given (the run would be ungated)"
        )
    out = check_out_dir(args.out)
    stage = OutputSet(out, "lens", option="--out", files=["lens.csv"])
    model = _load(args)
    lens = logit_lens(
        model,
        args.prompt,
        args.k,
        _mask(args.mask, model),
        gate=cast("Gate", args.gate),  # checked against the gates by the function
        alpha=args.alpha,
        formatted=args.formatted,
        final_norm=args.final_norm,
    )
    _write_csv(stage.path / "lens.csv", lens.table)
    files = ["lens.csv"]
    _figures(stage.path, {f"lens_{s}": logit_lens_figure(lens, s) for s in lens.probs}, args.png, files)
    stage.commit()
    last = lens.table[(lens.table.stream == "resid") & (lens.table["rank"] == 1)].token.tolist()
    print(f"top-1 per layer: {last}")
    _report(out, files)
    return 0


@dataclass
class SimilarityCommand(FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup similarity`."""

    prompt: str
    """User text without instruction."""
    out: str
    """Output folder: similarity.csv (one row per comparison and layer) and a figure."""
    mask: str | None = None
    """Mask file or folder for the masked settings (without it only original vs instructed is compared)."""
    instruction: str | None = None
    """Instruction template with `{input}` for the instructed settings (default: the --task's)."""
    task: str | None = None
    """Task whose instruction template to use, e.g. `antonym`."""
    gate: str = "value"
    """Gate for the mask: value or query."""


@command(
    "similarity", SimilarityCommand, help="Per-layer cosine similarity of settings to the instructed run (Fig. 4)."
)
def run_similarity(args: SimilarityCommand, given: Given) -> int:
    from ..analysis import Setting, layer_similarity
    from ..plots import similarity_figure

    instruction = args.instruction
    if instruction is None and args.task is not None:
        from ..data import load_task

        instruction = load_task(args.task, args.data_dir).instruction
    if instruction is None or "{input}" not in instruction:
        raise ValueError("give --instruction (a template with {input}) or a --task that has one")
    if args.mask is None:
        _refuse_unused(
            args, given, ("gate",), "it gates a mask, and no --mask is given (only original vs instructed would run)"
        )
    out = check_out_dir(args.out)
    stage = OutputSet(out, "similarity", option="--out", files=["similarity.csv"])
    model = _load(args)
    mask = _mask(args.mask, model)
    instructed_text = instruction.replace("{input}", args.prompt)
    original, instructed = Setting(args.prompt), Setting(instructed_text)
    comparisons = {"original vs instructed": (original, instructed)}
    if mask is not None:
        masked = Setting(args.prompt, mask=mask, gate=cast("Gate", args.gate))
        comparisons["masked vs instructed"] = (masked, instructed)
        comparisons["masked vs masked+instructed"] = (
            masked,
            Setting(instructed_text, mask=mask, gate=cast("Gate", args.gate)),
        )
    tables = {name: layer_similarity(model, a, b) for name, (a, b) in comparisons.items()}
    import pandas as pd

    _write_csv(stage.path / "similarity.csv", pd.concat([t.assign(comparison=name) for name, t in tables.items()]))
    files = ["similarity.csv"]
    _figures(stage.path, {"similarity": similarity_figure(tables)}, args.png, files)
    stage.commit()
    for name, table in tables.items():
        print(f"{name}: block output at the last layer {table.block_out.iloc[-1]:.3f}")
    _report(out, files)
    return 0


@dataclass
class PathwaysCommand(FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup pathways`."""

    out: str
    """Output folder: heads.csv, summary.json, jaccard.csv, jaccard_matrix.csv and figures."""
    mask: list[str] = simple_parsing.field(action=Collect, nargs="+")
    """Mask files, or folders of masks (a `headsup train` output, or its masks/); repeat --mask or give several."""
    task: str | None = None
    """With a task and a model: ablate heads used by all / by none vs random groups (Table 6)."""
    model: str | None = field(default=None, kw_only=True)
    """Model for the ablation (with --task): `organism`, `smollm2`, a `.gguf` file, a hub name or a local directory."""
    n_random: int = 5
    """Random groups of the same size per ablated group."""
    trajectory: str | None = None
    """Training output folder whose logit checkpoints to plot (Fig. 3)."""


def _mask_files(paths: list[str]) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in (Path(p).expanduser() for p in paths):
        if path.is_dir():
            found = (
                [path / "mask.safetensors"]
                if (path / "mask.safetensors").is_file()
                else (sorted(path.glob("*.safetensors")) or sorted((path / "masks").glob("*.safetensors")))
            )
        else:
            found = [path]
        if not found or not all(f.is_file() for f in found):
            raise ValueError(f"--mask {path}: no mask files there")
        for f in found:
            name = f.stem if f.stem not in files else str(f)
            files[name] = f
    return files


@command(
    "pathways", PathwaysCommand, help="Heads shared across masks, Jaccard similarity, group ablation (Tables 5, 6)."
)
def run_pathways(args: PathwaysCommand, given: Given) -> int:
    from ..analysis import jaccard_matrix, jaccard_table, pathway_heads, weight_trajectories
    from ..masks import HeadMask
    from ..plots import jaccard_figure, mask_heatmap, trajectory_figure, usage_heatmap

    masks = {name: HeadMask.load(path) for name, path in _mask_files(args.mask).items()}
    if args.task is not None and args.model is None:
        raise ValueError("the ablation needs --model as well as --task")
    out = check_out_dir(args.out)
    pathways = pathway_heads(masks)
    tables = ["heads.csv", "jaccard.csv", "jaccard_matrix.csv", "summary.json"]
    tables += ["ablation.csv"] if args.task is not None else []
    stage = OutputSet(out, "pathways", option="--out", files=tables)
    _write_csv(stage.path / "heads.csv", pathways.table())
    table = jaccard_table(masks)
    _write_csv(stage.path / "jaccard.csv", table)
    matrix = jaccard_matrix(masks)
    _write_csv(stage.path / "jaccard_matrix.csv", matrix, index=True)
    summary = {
        **pathways.summary(),
        "names": pathways.names,
        "used_by_all": pathways.used_by_all(),
        "used_by_none": pathways.used_by_none(),
    }
    figures = {
        "masks": mask_heatmap(masks),
        "usage": usage_heatmap(pathways),
        "jaccard": jaccard_figure(matrix, table=table),
    }
    if args.trajectory is not None:
        steps, weights = weight_trajectories(args.trajectory)
        figures["trajectory"] = trajectory_figure(steps, weights)
    if args.task is not None:
        if args.model is None:
            raise ValueError("the ablation needs --model as well as --task")
        from ..analysis import group_ablation
        from ..data import load_task

        task = load_task(args.task, args.data_dir)
        model = _load(args)
        for mask in masks.values():
            mask.check_model(model)
        groups = {"used by all": pathways.used_by_all(), "used by none": pathways.used_by_none()}
        ablation = group_ablation(model, task, groups, n_random=args.n_random)
        _write_csv(stage.path / "ablation.csv", ablation)
        summary["ablation"] = ablation.to_dict(orient="records")
    summary["figures"] = _names(_figures(stage.path, figures, args.png))
    from .._io import atomic_write_json

    atomic_write_json(stage.path / "summary.json", summary)
    stage.commit()
    print(
        f"{len(masks)} masks: {len(pathways.used_by_all())} heads used by all, {len(pathways.used_by_none())} by none"
    )
    _report(out, sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    return 0
