"""CPU proxies of GPU speed: host synchronisations and profiled operations per decoding pass and per
mask-training step, the library against plain `transformers` doing the same work.

On a GPU every host synchronisation stalls the stream and every operation is a kernel launch; on a
CPU the matrix products hide both, so wall time on a CPU says little about them. This counts them:
- host synchronisations: calls that would make the host wait for the device on a GPU, counted by
  wrapping `Tensor.item`, `.tolist`, `.cpu`, `.numpy`, `bool(t)`, `int(t)`, `float(t)`,
  `.nonzero`, `torch.nonzero`, `torch.unique` (an upper bound on a CPU: a call on a tensor that
  would stay on the host on a GPU is counted too);
- operations: `aten::` events recorded by `torch.profiler` (each a kernel launch or more on a GPU);
- on a CPU, the profiled CPU time, split into matrix products (`aten::mm`, `addmm`, `bmm`,
  `baddbmm`) and everything else the profiler records (other operations, autograd's nodes; its own
  cost per operation included): where a step's time goes, and so how much fewer tokens can gain;
- passes: calls of the model's token embedding (one per forward pass) outside a CUDA graph's
  capture, plus replays of captured graphs (each replay is one decoding pass on the GPU).
Sections:
- sweep: `removal_sweep` (`--sweep-steps` rows x `--new-tokens` greedy tokens) vs batched greedy
  decoding of the same rows in plain transformers (`_plain.PlainModel.greedy`); per decoding pass.
- train: `train_mask` steps (the count of 2 + N steps minus that of 2 steps, over N) vs the same
  rows' forward and backward in plain transformers (`PlainModel.train_step`); per step. Also
  `train_mask` with its step captured as a CUDA graph (`TrainConfig(cuda_graph=True)`; the default
  on a GPU, where a GPU run also counts the step with the capture off): what the host launches per
  step around the replayed graph, the graph counted as one operation; and
  `train_mask` with packed loss passes (`native_options(pack_rows=True)`, the CPU's default).

    python experiments/bench/proxies.py --models smollm2
    python experiments/bench/proxies.py --models smollm2 --out figures/bench/proxies_smollm2
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch
from _plain import PlainModel, label, load, word_task

from headsup_lens import removal_sweep
from headsup_lens.analysis import random_order, sweep_masks
from headsup_lens.data import Task, encode_pairs, load_task
from headsup_lens.gates import native_options
from headsup_lens.models import encode, pad_token_id, prompt_format, stop_token_ids
from headsup_lens.objective import length_batches
from headsup_lens.options import parse
from headsup_lens.training import TrainConfig, left_tail_gumbel, train_mask
from headsup_lens.training._graphed import STEP

SECTIONS = ("sweep", "train")
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
WHERE_SEEN: dict[str, int] = {}  # call site of a synchronisation -> times seen

# (owner, attribute): every call of these counts as one host synchronisation.
_SYNC_POINTS = [
    (torch.Tensor, name)
    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")
] + [(torch, "nonzero"), (torch, "unique")]


@dataclass
class Options:
    """Options of the proxy benchmark."""

    models: list[str] = field(default_factory=lambda: ["smollm2"])
    """Models: `smollm2`, `organism`, a Hugging Face directory, or a shape with random weights (`qwen0.5b`, ...)."""
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    """What to count: sweep, train."""
    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
    sweep_steps: int = 64
    """Sweep rows: steps 0..N-1 of a random removal order."""
    new_tokens: int = 20
    """Greedy tokens per sweep step."""
    prompt: str = "the garden"
    """The sweep's user text (wrapped in the model's prompt format)."""
    task: str = "antonym"
    """Task of the training section (`reverse`: a made-up word task, also used when the data is missing)."""
    train_steps: int = 4
    """N: per-step counts are (counts of 2 + N steps - counts of 2 steps) / N."""
    where: bool = False
    """On a GPU: print where each synchronisation CUDA reports comes from (the innermost frames of the
    library and of transformers)."""
    gpu_path: bool = False
    """Count the path a GPU takes (no prefix sharing across rows, no packed loss passes:
    `native_options(prefix_sharing=False, pack_rows=False)`)."""
    out: str | None = None
    """Folder for proxies.csv; nothing is written without it."""


@dataclass
class Counts:
    syncs: int = 0
    ops: int = 0
    passes: int = 0
    device_syncs: int | None = None  # on a GPU: what CUDA's sync debug mode reports (blocking copies included)
    matmul_ms: float | None = None  # on a CPU: profiled self CPU time of the matrix products
    other_ms: float | None = None  # ... and of everything else the profiler records


@contextlib.contextmanager
def counting(
    embedding: torch.nn.Module, profile: bool = True, where: bool = False, captured: str | None = None
) -> Iterator[Counts]:
    """Count host synchronisations, `aten::` operations and forward passes inside the block; on a
    GPU also the synchronisations CUDA itself reports (`torch.cuda.set_sync_debug_mode`), which
    include blocking host-to-device copies that the wrapped calls do not see (`where`: and keep
    their call sites in `WHERE_SEEN`). `captured`: the profiler range of a step replayed as a CUDA
    graph (`gates._graph.Replay`), counted as one operation however it ran (on a CPU it runs
    eagerly; on a GPU a replay is one launch). Warnings raised inside the block are recorded, not shown."""
    counts = Counts()
    on_gpu = next(embedding.parameters()).device.type == "cuda"
    originals = [(owner, name, getattr(owner, name)) for owner, name in _SYNC_POINTS]

    def wrap(fn):
        def counted(*args, **kwargs):
            counts.syncs += 1
            return fn(*args, **kwargs)

        return counted

    with warnings.catch_warnings(record=True) as seen:  # restores showwarning and the filters on exit
        warnings.simplefilter("always")
        if on_gpu and where:

            def located(message, category, filename, lineno, file=None, line=None):
                if "synchroniz" in str(message):  # the innermost frames of ours and of transformers
                    frames = [
                        f"{Path(f.filename).name}:{f.lineno} {f.name}"
                        for f in traceback.extract_stack()[:-1]
                        if "headsup_lens" in f.filename or "transformers" in f.filename
                    ]
                    site = " <- ".join(reversed(frames[-4:]))
                    WHERE_SEEN[site] = WHERE_SEEN.get(site, 0) + 1
                seen.append(warnings.WarningMessage(message, category, filename, lineno))

            warnings.showwarning = located
        if on_gpu:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
        for owner, name, fn in originals:
            setattr(owner, name, wrap(fn))

        def passed(*_):
            if not (on_gpu and torch.cuda.is_current_stream_capturing()):  # a capture records, runs nothing
                counts.passes += 1

        handle = embedding.register_forward_pre_hook(passed)
        replay = torch.cuda.CUDAGraph.replay

        def replayed(graph):
            counts.passes += 1
            return replay(graph)

        torch.cuda.CUDAGraph.replay = replayed
        profiler = (
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            if profile
            else contextlib.nullcontext()
        )
        try:
            with profiler as prof:
                yield counts
        finally:
            for owner, name, fn in originals:
                setattr(owner, name, fn)
            torch.cuda.CUDAGraph.replay = replay
            handle.remove()
            if on_gpu:
                torch.cuda.set_sync_debug_mode("default")
    if on_gpu:
        counts.device_syncs = sum("synchroniz" in str(w.message) for w in seen)
    if prof is not None:
        counted = [event for event in prof.events() if event.name.startswith("aten::") and not within(event, captured)]
        counts.ops = len(counted) + sum(1 for event in prof.events() if captured is not None and event.name == captured)
        if not on_gpu:  # on a GPU an operation's CPU time is its launch, not its work
            # every event's own time, a captured step's included (on a CPU it runs eagerly)
            matmul_us = sum(event.self_cpu_time_total for event in prof.events() if event.name in MATMULS)
            counts.matmul_ms = matmul_us / 1e3
            counts.other_ms = (sum(event.self_cpu_time_total for event in prof.events()) - matmul_us) / 1e3


def within(event, name: str | None) -> bool:
    """Whether a profiled event runs inside a range called `name`."""
    parent = event.cpu_parent
    while name is not None and parent is not None:
        if parent.name == name:
            return True
        parent = parent.cpu_parent
    return False


def raw_embedding(model) -> torch.nn.Module:
    module = model.embed
    while getattr(module, "original_component", None) is not None:
        module = module.original_component
    return module


def task_for(name: str, n_train: int = 16) -> Task:
    task = word_task()
    if name != "reverse":
        try:
            task = load_task(name)
        except ValueError as error:
            print(f"  ... {error}; using a made-up word task instead", file=sys.stderr)
    pairs = [task.pairs[i] for i in task.split_indices("train")][:n_train]
    return Task.from_pairs(task.name, pairs, n_eval=0)


def sweep_section(model, plain: PlainModel, options: Options) -> list[dict]:
    device = torch.device(model.cfg.device)
    order = random_order(model, seed=0)[: options.sweep_steps - 1]
    rows = len(order) + 1
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(options.prompt), add_bos=template.add_bos)], device=device)
    masks = sweep_masks(order, list(range(rows)), (model.cfg.n_layers, model.cfg.n_heads))
    stops = stop_token_ids(model)
    removal_sweep(model, options.prompt, order[:2], max_new_tokens=2)  # warm-up
    plain.greedy(ids, None, masks[:1], 2, stops)
    out = []
    with counting(raw_embedding(model), where=options.where) as ours:
        removal_sweep(model, options.prompt, order, max_new_tokens=options.new_tokens, batch_size=rows)
    with counting(plain.hf.model.embed_tokens, where=options.where) as theirs:
        plain.greedy(ids.expand(rows, -1).contiguous(), None, masks, options.new_tokens, stops)
    for who, c in (("library", ours), ("plain", theirs)):
        out.append(
            {
                "section": "sweep",
                "who": who,
                "work": f"{rows} rows x {options.new_tokens} tokens",
                "passes": c.passes,
                "syncs": c.syncs,
                "ops": c.ops,
                "syncs_per_unit": c.syncs / max(1, c.passes),
                "ops_per_unit": c.ops / max(1, c.passes),
                **{
                    f"{name}_per_unit": None if getattr(c, name) is None else getattr(c, name) / max(1, c.passes)
                    for name in ("device_syncs", "matmul_ms", "other_ms")
                },
                "unit": "decoding pass",
            }
        )
    return out


def train_section(model, plain: PlainModel, options: Options) -> list[dict]:
    device = torch.device(model.cfg.device)
    task = task_for(options.task)
    pad = pad_token_id(model)
    rows = encode_pairs(model, list(task.pairs))
    groups = length_batches(model, rows)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads

    def steps(n: int, cuda_graph: bool | None = None) -> Counts:
        config = TrainConfig(steps=n, checkpoint_every=0, progress=False, cuda_graph=cuda_graph)
        # A captured step's range counts as one operation; a step without one has no such range.
        with counting(raw_embedding(model), where=options.where, captured=STEP) as counts:  # silences warnings too
            train_mask(model, task, config)
        return counts

    steps(1)  # warm-up
    short, long = steps(2), steps(2 + options.train_steps)
    n = options.train_steps
    # The captured step: a CUDA graph captured at the second step in both runs, so the difference is
    # N replays and what runs around them (on a CPU the step runs eagerly: its range counts as one).
    short_graphed, long_graphed = steps(2, cuda_graph=True), steps(2 + n, cuda_graph=True)
    # The layout is built on the host: no synchronisation on a GPU. The captured step never packs.
    with native_options(pack_rows=True):
        short_packed, long_packed = steps(2, cuda_graph=False), steps(2 + n, cuda_graph=False)
    # On a GPU the default step is the captured one where it serves: count the eager step too.
    eager = (steps(2, cuda_graph=False), steps(2 + n, cuda_graph=False)) if device.type == "cuda" else None
    logits = torch.full((len(rows), n_layers, n_heads), 4.0, device=device, requires_grad=True)
    noise = left_tail_gumbel((len(rows), n_layers, n_heads), torch.Generator().manual_seed(0)).to(device)
    plain.train_step(rows, groups, logits, noise, 4.0, pad)  # warm-up
    with counting(plain.hf.model.embed_tokens, where=options.where) as theirs:
        plain.train_step(rows, groups, logits, noise, 4.0, pad)
    work = f"batch {len(rows)}, {len(groups)} pass(es) per step"

    def difference(long: Counts, short: Counts, name: str) -> float | None:
        """What N more steps add to a count, per step (None where it was not counted)."""
        more, fewer = getattr(long, name), getattr(short, name)
        return None if more is None or fewer is None else (more - fewer) / n

    def per_step(who: str, short: Counts, long: Counts, unit: str) -> dict:
        return {
            "section": "train",
            "who": who,
            "work": work,
            "passes": (long.passes - short.passes) / n,
            "syncs": long.syncs - short.syncs,
            "ops": long.ops - short.ops,
            "syncs_per_unit": (long.syncs - short.syncs) / n,
            "ops_per_unit": (long.ops - short.ops) / n,
            **{f"{name}_per_unit": difference(long, short, name) for name in ("device_syncs", "matmul_ms", "other_ms")},
            "unit": unit,
        }

    return [
        per_step("library", short, long, "training step"),
        per_step(
            "library, step captured as a CUDA graph",
            short_graphed,
            long_graphed,
            "training step (the captured forward and backward counted as one operation)",
        ),
        per_step("library, packed loss passes", short_packed, long_packed, "training step"),
        *([per_step("library, step run eagerly (no CUDA graph)", *eager, "training step")] if eager else []),
        {
            "section": "train",
            "who": "plain",
            "work": work,
            "passes": theirs.passes,
            "syncs": theirs.syncs,
            "ops": theirs.ops,
            "syncs_per_unit": theirs.syncs,
            "ops_per_unit": theirs.ops,
            "device_syncs_per_unit": theirs.device_syncs,
            "matmul_ms_per_unit": theirs.matmul_ms,
            "other_ms_per_unit": theirs.other_ms,
            "unit": "training step (forward and backward only)",
        },
    ]


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="proxies.py", description=__doc__)
    unknown = set(options.sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    torch.set_num_threads(1)
    os.environ["HEADSUP_PROGRESS"] = "0"
    rows = []
    cpu_only = False if options.gpu_path else None  # the CPU's levers: prefix sharing, packed rows
    with tempfile.TemporaryDirectory() as scratch, native_options(prefix_sharing=cpu_only, pack_rows=cpu_only):
        for name in options.models:
            model, directory = load(name, Path(scratch), options.device, options.dtype)
            plain = PlainModel(directory, torch.device(model.cfg.device), model.cfg.dtype)
            for section in options.sections:
                found = (
                    sweep_section(model, plain, options) if section == "sweep" else train_section(model, plain, options)
                )
                if WHERE_SEEN:
                    print(f"[{label(name)}] {section}: where CUDA synchronised (times seen, innermost frame first)")
                    for site, times in sorted(WHERE_SEEN.items(), key=lambda item: -item[1]):
                        print(f"    {times:5d}  {site}")
                    WHERE_SEEN.clear()
                rows += [{"model": label(name), **row} for row in found]
            del model, plain
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    if options.out is not None:
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "proxies.csv", index=False)
        (out / "options.txt").write_text(repr(asdict(options)) + "\n")
        print(f"wrote {out / 'proxies.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
