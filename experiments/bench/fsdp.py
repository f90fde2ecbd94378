"""Mask training, evaluation and a removal sweep with the model sharded by FSDP2 over ranks
(`load_model(shard="fsdp")`, started by torchrun) against one process holding the whole model: time
and memory of each rank, and whether the results agree.

Each setup runs in fresh processes on the same model folder: one plain process with the library's
default paths, one plain process on the paths a sharded model takes (no prefix-sharing direct pass on
the CPU, no captured decoding or training step on a GPU: what FSDP itself costs is the difference to
this one), then FSDP over each of `--ranks` (gloo on the CPU, NCCL on GPUs). Every rank records its load time, the weights it
holds (bytes of its DTensor shards), its memory (peak and final resident set of the process, which
also counts the libraries and the checkpoint pages it read; peak allocated on a GPU) and its wall and CPU time for: `--train-steps` mask-training steps of batch 16 after two warm-up
steps (median step), the evaluation of 32 held-out examples (the masked setting: loss and greedy
answers), and a removal sweep of 16 steps. A job's throughput is its global work over its slowest
rank's wall time, its cost the CPU seconds of all its ranks per unit of work (steadier than wall
time on a shared machine). The trained mask's heads and the evaluation's accuracy are written beside the times.

    python experiments/bench/fsdp.py                                   # SmolLM2 on the CPU: one process, 2 gloo ranks
    python experiments/bench/fsdp.py --out figures/bench/fsdp_cpu      # also fsdp.csv
    python experiments/bench/fsdp.py --model llama8b --device cuda --ranks 1 --out fsdp_gpu   # the wrapping's cost at 8B

On a GPU machine, `--model llama8b` draws random bf16 weights at the Llama-3.1-8B shape (16 GB
written to a scratch folder) and `--ranks 1` runs FSDP with one rank beside the plain process.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from _plain import label, model_dir, word_task

import headsup_lens as hl
from headsup_lens.data import Task
from headsup_lens.options import parse
from headsup_lens.training import StepTimer, TrainingAdvice

MIB = 2**20
BATCH, EXAMPLES, SWEEP_STEPS = 16, 32, 16


@dataclass
class Options:
    """Options of the FSDP benchmark."""

    model: str = "smollm2"
    """Model: `smollm2`, a shape with random weights (`llama8b`, `tiny`, ...) or a Hugging Face folder."""
    device: str = "cpu"
    """cpu (gloo ranks) or cuda (NCCL ranks, one GPU each)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""
    ranks: list[int] = field(default_factory=lambda: [2])
    """FSDP jobs to run, by number of ranks (after the plain process)."""
    train_steps: int = 6
    """Timed mask-training steps (after 2 warm-up steps)."""
    threads: int = 1
    """torch CPU threads per process."""
    out: str | None = None
    """Folder for fsdp.csv."""
    worker: str | None = None
    """(internal) run one setup on this model folder and write the rank's record next to --result."""
    result: str | None = None
    """(internal) where a worker writes its record (`.rankN.json` is added)."""
    sharded_paths: bool = False
    """(internal) run a plain process on the paths a sharded model takes."""


def rss_mib() -> float:
    """The peak resident set of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def rss_now_mib() -> float:
    """The resident set of this process now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / MIB


class CpuTimer:
    """A per-step callback that keeps each step's CPU time of this process (steadier than wall time
    on a shared machine): the time between two callbacks."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._last = time.process_time()

    def __call__(self, end) -> None:
        now = time.process_time()
        self.seconds.append(now - self._last)
        self._last = now


def clocked(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def work(options: Options) -> None:
    """One setup's rank: load, train, evaluate, sweep; its record as JSON."""
    import torch.distributed as dist

    from headsup_lens._distributed import join_torchrun
    from headsup_lens.analysis import random_order, removal_sweep
    from headsup_lens.evaluation import EvalConfig, evaluate
    from headsup_lens.gates import native_options
    from headsup_lens.models import local_share
    from headsup_lens.training import TrainConfig, train_mask

    torch.set_num_threads(options.threads)
    rank, device = join_torchrun(options.device, always=True)
    sharded = rank is not None
    record: dict = {"rss_start_mib": rss_mib(), "rank": rank or 0, "ranks": dist.get_world_size() if sharded else 1}
    model, record["load_s"], _ = clocked(
        lambda: hl.load_model(options.worker, device=device, dtype=options.dtype, shard="fsdp" if sharded else None)
    )
    held, total = local_share(model) if sharded else (sum(p.numel() for p in model.original_model.parameters()),) * 2
    element = next(model.original_model.parameters()).element_size()
    record.update(weights_held_mib=held * element / MIB, weights_mib=total * element / MIB)
    pairs = word_task().pairs
    task = Task.from_pairs("reverse", pairs[: 200 + EXAMPLES], n_eval=EXAMPLES)
    timer, cpu = StepTimer(), CpuTimer()
    config = TrainConfig.fast(steps=2 + options.train_steps, batch_size=BATCH, checkpoint_every=0, progress=False)
    if options.sharded_paths:
        config = config.replace(cuda_graph=False)

    def paths():
        return (
            native_options(prefix_sharing=False, cuda_graph=False)
            if options.sharded_paths
            else contextlib.nullcontext()
        )

    with paths(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingAdvice)  # a few steps learn nothing by design
        mask = train_mask(model, task, config, callbacks=[timer, cpu]).mask
    record.update(train_step_s=statistics.median(timer.seconds[2:]), heads_kept=mask.n_kept)
    record["train_step_cpu_s"] = statistics.median(cpu.seconds[2:])
    settings = EvalConfig(settings=("masked",), progress=False, batch_size=BATCH, max_new_tokens=6)
    order = random_order(model, seed=0)[: SWEEP_STEPS - 1]
    with paths():
        evaluation, record["eval_s"], record["eval_cpu_s"] = clocked(lambda: evaluate(model, task, mask, settings))
        sweep, record["sweep_s"], record["sweep_cpu_s"] = clocked(
            lambda: removal_sweep(model, "farm", order, max_new_tokens=5, batch_size=8, progress=False)
        )
    record["eval_accuracy"] = float(evaluation.table.accuracy.iloc[0])
    record["sweep_top1"] = sweep.ranks.top1_id.tolist()
    record["rss_peak_mib"], record["rss_end_mib"] = rss_mib(), rss_now_mib()
    record["gpu_peak_mib"] = torch.cuda.max_memory_allocated() / MIB if torch.cuda.is_available() else float("nan")
    Path(f"{options.result}.rank{record['rank']}.json").write_text(json.dumps(record))
    if sharded:
        dist.destroy_process_group()


def launch(options: Options, folder: str, ranks: int | None, result: Path, sharded_paths: bool) -> None:
    script = [str(Path(__file__).resolve()), "--worker", folder, "--result", str(result)]
    script += ["--sharded-paths"] if sharded_paths else []
    script += ["--device", options.device, "--threads", str(options.threads), "--train-steps", str(options.train_steps)]
    script += ["--dtype", options.dtype] if options.dtype else []
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks else []
    env = {**os.environ, "OMP_NUM_THREADS": str(options.threads)}
    subprocess.run([sys.executable, *torchrun, *script], check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    options, _ = parse(Options, argv, prog="fsdp.py", description=__doc__)
    if options.worker is not None:
        work(options)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = model_dir(options.model, Path(scratch), options.device, options.dtype)
        if not Path(folder).is_dir():  # a built-in name: its converted folder
            folder = hl.load_model(folder, device="cpu").original_model.name_or_path
        setups = [("one process", None, False), ("one process, the sharded paths", None, True)]
        setups += [(f"FSDP, {ranks} rank{'s' * (ranks > 1)}", ranks, False) for ranks in options.ranks]
        for number, (setup, ranks, sharded_paths) in enumerate(setups):
            print(f"{setup} ...", flush=True)
            result = Path(scratch) / f"result-{number}"
            launch(options, folder, ranks, result, sharded_paths)
            records = [json.loads(p.read_text()) for p in sorted(Path(scratch).glob(f"{result.name}.rank*.json"))]
            slowest = {k: max(r[k] for r in records) for k in ("train_step_s", "eval_s", "sweep_s")}
            # CPU seconds of the whole job (every rank) per unit of work: what the ranks cost in all.
            spent = {k: sum(r[k] for r in records) for k in ("train_step_cpu_s", "eval_cpu_s", "sweep_cpu_s")}
            for record in records:
                rows.append(
                    {
                        "model": label(options.model),
                        "device": options.device,
                        "setup": setup,
                        **{k: v for k, v in record.items() if k != "sweep_top1"},
                        "train_rows_per_s": BATCH / slowest["train_step_s"],
                        "eval_examples_per_s": EXAMPLES / slowest["eval_s"],
                        "sweep_steps_per_s": SWEEP_STEPS / slowest["sweep_s"],
                        "train_cpu_s_per_row": spent["train_step_cpu_s"] / BATCH,
                        "eval_cpu_s_per_example": spent["eval_cpu_s"] / EXAMPLES,
                        "sweep_cpu_s_per_step": spent["sweep_cpu_s"] / SWEEP_STEPS,
                        "sweep_top1": " ".join(map(str, record["sweep_top1"])),
                    }
                )
    frame = pd.DataFrame(rows)
    first = frame[frame.setup == "one process"].iloc[0]
    same_paths = frame[frame.setup == "one process, the sharded paths"].iloc[0]
    for rate in ("train_rows_per_s", "eval_examples_per_s", "sweep_steps_per_s"):
        frame[f"{rate}_vs_sharded_paths"] = frame[rate] / same_paths[rate]
    for cost in ("train_cpu_s_per_row", "eval_cpu_s_per_example", "sweep_cpu_s_per_step"):
        frame[f"{cost}_vs_sharded_paths"] = frame[cost] / same_paths[cost]
    frame["same_results"] = (
        (frame.heads_kept == first.heads_kept)
        & (frame.eval_accuracy == first.eval_accuracy)
        & (frame.sweep_top1 == first.sweep_top1)
    )
    print(frame.drop(columns=["sweep_top1"]).to_string(index=False))
    if options.out is not None:
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "fsdp.csv", index=False)
        print(f"wrote {out / 'fsdp.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
