"""`headsup pathways`: heads shared across masks, Jaccard similarity, group ablation (Tables 5, 6).

Heavy modules are imported inside the command, so `--help` answers at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .._io import OutputSet, atomic_write_json
from ..analysis._config import PathwayConfig
from ..options import DataOptions, FigureOptions, Given, ModelOptions, option
from ._outputs import file_names, load, refuse_unused, report, save_figures, write_csv
from ._registry import check_out_dir, command


@dataclass(frozen=True)
class PathwaysCommand(FigureOptions, DataOptions, ModelOptions):
    """Options of `headsup pathways`."""

    out: str
    """Output folder: heads.csv, summary.json, jaccard.csv, jaccard_matrix.csv and figures."""
    mask: list[str]
    """Mask files, or folders of masks (a `headsup train` output, or its masks/); repeat --mask or give several."""
    task: str | None = None
    """With a task and a model: ablate heads used by all / by none vs random groups (Table 6)."""
    model: str | None = field(default=None, kw_only=True)
    """Model for the ablation (with --task): `organism`, `smollm2`, a `.gguf` file, a hub name or a local directory."""
    trajectory: str | None = None
    """Training output folder whose logit checkpoints to plot (Fig. 3)."""
    ablation: PathwayConfig = option(default_factory=PathwayConfig, group="Ablation (with --task)")
    """How the groups and their random controls are removed (`group_ablation`'s config)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task is not None and self.model is None:
            raise ValueError("the ablation needs --model as well as --task")


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


def check_pathways(args: PathwaysCommand, given: Given) -> None:
    _mask_files(args.mask)
    if args.task is None:
        ablation = tuple(f"ablation.{name}" for name in given.within("ablation"))
        refuse_unused(args, given, ablation, "they configure the ablation, which runs only with --task")
    if args.trajectory is not None and not Path(args.trajectory).expanduser().is_dir():
        raise ValueError(f"--trajectory {args.trajectory}: no such folder (a `headsup train` output)")


@command("pathways", PathwaysCommand, check=check_pathways)
def run_pathways(args: PathwaysCommand, given: Given) -> int:
    # deferred: keeps --help free of torch, pandas and plotly
    from ..analysis import group_ablation, jaccard_matrix, jaccard_table, pathway_heads, weight_trajectories
    from ..masks import HeadMask
    from ..plots import jaccard_figure, mask_heatmap, trajectory_figure, usage_heatmap

    masks = {name: HeadMask.load(path) for name, path in _mask_files(args.mask).items()}
    out = check_out_dir(args.out)
    pathways = pathway_heads(masks)
    tables = ["heads.csv", "jaccard.csv", "jaccard_matrix.csv", "summary.json"]
    tables += ["ablation.csv"] if args.task is not None else []
    stage = OutputSet(out, "pathways", option="--out", files=tables)
    write_csv(stage.path / "heads.csv", pathways.table())
    table = jaccard_table(masks)
    write_csv(stage.path / "jaccard.csv", table)
    matrix = jaccard_matrix(masks)
    write_csv(stage.path / "jaccard_matrix.csv", matrix, index=True)
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
    if args.task is not None:  # with --model (checked with the options)
        from ..data import load_task  # deferred: the task registry is not needed for --help

        task = load_task(args.task, args.data_dir)
        model = load(args)
        for mask in masks.values():
            mask.check_model(model)
        groups = {"used by all": pathways.used_by_all(), "used by none": pathways.used_by_none()}
        ablation = group_ablation(model, task, groups, args.ablation)
        write_csv(stage.path / "ablation.csv", ablation)
        summary["ablation"] = ablation.to_dict(orient="records")
    summary["figures"] = file_names(save_figures(stage.path, figures, args.png))

    atomic_write_json(stage.path / "summary.json", summary)
    stage.commit()
    print(
        f"{len(masks)} masks: {len(pathways.used_by_all())} heads used by all, {len(pathways.used_by_none())} by none"
    )
    report(out, sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    return 0
