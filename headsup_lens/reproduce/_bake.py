"""A mask outside the toolkit (`experiments/bake_smollm2.py`): a stored mask baked into a Hugging Face
checkpoint and into the model's GGUF file (`bake`, alpha 0), and the greedy outputs of each on a task's
held-out inputs side by side.

`bake_comparison` writes, under `bake/` of the run's output folder, `bakes.csv` (size and time of
each bake, the type the GGUF file's attention outputs keep), `outputs_<task>.csv` (every output:
the value-gated model, the baked folder in plain transformers and loaded back into the toolkit, the
baked GGUF dequantised by plain transformers and run in llama.cpp, and as a control the original GGUF
in llama.cpp against the ungated model), `summary_<task>.csv` (`agreement`) and `logits_<task>.csv`
(`logit_gap`: the largest difference between the gated model's logits and each baked model's in plain
transformers over every prompt position, with the ungated model as the control that the gate moves
them). llama.cpp multiplies quantised weights with quantised activations, so its outputs are
compared, not assumed equal; its columns are left out (with a note) when llama-cpp-python is not
installed, as are the GGUF bake and its columns when the model was not converted from a GGUF file.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM

from ..data import Task, encode_prompt, task_prompts
from ..evaluation import generations
from ..gates import bake, value_gate
from ..masks import HeadMask
from ..models import gguf_file, gguf_source_of, load_model, stop_token_ids
from ..models._gguf import gguf_reader
from ..training import safe_name
from ._experiment import Experiment

FOLDER = "bake"


def plain_model(folder: str | Path, gguf_name: str | None = None) -> nn.Module:
    """A Hugging Face folder (or the GGUF file `gguf_name` in it, dequantised by transformers) in plain
    transformers: its defaults, no hooks."""
    options: dict[str, Any] = {} if gguf_name is None else {"gguf_file": gguf_name, "local_files_only": True}
    return AutoModelForCausalLM.from_pretrained(folder, **options).eval()


def plain_greedy(
    model: str | Path | nn.Module,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    stops: set[int],
    decode: Callable,
) -> list[str]:
    """Greedy outputs of a plain transformers model (or of a Hugging Face folder loaded by `plain_model`),
    one prompt at a time, cut at the first stop token and decoded by `decode(ids)`."""
    model = model if isinstance(model, nn.Module) else plain_model(model)
    outputs = []
    for prompt in prompts:
        with torch.no_grad():
            generated = model.generate(  # pyright: ignore[reportAttributeAccessIssue, reportCallIssue] (nn.Module's stub)
                torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(stops)
            )
        ids = generated[0, len(prompt) :].tolist()
        cut = next((i for i, token in enumerate(ids) if token in stops), len(ids))
        outputs.append(decode(ids[:cut]))
    return outputs


def llama_cpp_greedy(
    path: str | Path, prompts: Sequence[list[int]], max_new_tokens: int, stops: set[int], decode: Callable, threads: int
) -> list[str]:
    """Greedy outputs of a GGUF file in llama.cpp (llama-cpp-python), fed the same prompt ids (no BOS added)."""
    from llama_cpp import Llama  # pyright: ignore[reportMissingImports]  (optional: headsup_lens[gguf])

    llm = Llama(model_path=str(path), n_ctx=512, n_threads=threads, n_batch=512, logits_all=True, verbose=False)
    outputs = []
    for prompt in prompts:
        llm.reset()
        llm.eval(prompt)
        new = []
        for _ in range(max_new_tokens):
            token = int(llm.scores[llm.n_tokens - 1].argmax())
            if token in stops:
                break
            new.append(token)
            llm.eval([token])
        outputs.append(decode(new))
    return outputs


def logit_gap(
    reference: Callable[[Tensor], Tensor], other: Callable[[Tensor], Tensor], prompts: Sequence[list[int]]
) -> dict[str, Any]:
    """How far `other(ids)`'s logits `[1, pos, vocab]` lie from `reference(ids)`'s over every position of
    every prompt, one prompt at a time: the largest absolute difference, and how many positions have
    the same top token."""
    gap, same, positions = torch.zeros(()), torch.zeros((), dtype=torch.long), 0
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            expected, got = reference(ids)[0].float(), other(ids)[0].float()
            gap = torch.maximum(gap, (expected - got).abs().max())
            same += (expected.argmax(-1) == got.argmax(-1)).sum()
            positions += len(prompt)
    return {"prompts": len(prompts), "positions": positions, "max_abs_diff": float(gap), "same_top1": int(same)}


def timed_bake(
    model: TransformerBridge, mask: HeadMask, folder: str | Path, **options: Any
) -> tuple[Path, float, float]:
    """(path, seconds, MiB) of one `bake` into `folder`, emptied first."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    path = bake(model, mask, folder, **options)
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    return path, seconds, size


def agreement(table: pd.DataFrame, pairs: Sequence[tuple[str, str]], columns: Sequence[str]) -> pd.DataFrame:
    """How often two output columns of `table` are equal (`pairs`), then each column's accuracy (the
    mean of its `correct: <column>` column)."""
    n, rows = len(table), []
    for left, right in pairs:
        same = sum(a == b for a, b in zip(table[left], table[right]))
        rows.append({"comparison": f"{left} vs {right}", "n": n, "equal outputs": same, "rate": round(same / n, 3)})
    for column in columns:
        rows.append({"comparison": f"accuracy: {column}", "n": n, "rate": round(table[f"correct: {column}"].mean(), 3)})
    return pd.DataFrame(rows).astype({"equal outputs": "Int64"})  # empty on the accuracy rows


def bake_comparison(
    xp: Experiment,
    mask: HeadMask,
    task: Task,
    *,
    work: str | Path,
    gguf_source: str | None = None,
    limit: int | None = None,
    threads: int = 1,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Bake `mask` (alpha 0) into `<work>/hf` and, for a model converted from a GGUF file, into
    `<work>/gguf`; compare the greedy outputs on the first `limit` held-out inputs of `task` (all by
    default). Writes `bakes.csv`, `outputs_<task>.csv` and `summary_<task>.csv` under `bake/`;
    returns (bakes, summary)."""
    model, work, started = xp.model, Path(work), time.perf_counter()
    source = gguf_source or (found[0] if (found := gguf_source_of(model.cfg.model_name)) else None)
    hf_dir, hf_seconds, hf_mib = timed_bake(model, mask, work / "hf")
    bakes: list[dict[str, Any]] = [
        {"output": "hf", "seconds": round(hf_seconds, 1), "MiB": round(hf_mib, 1), "path": "hf/"}
    ]
    baked_gguf = None
    if source is not None:
        baked_gguf, seconds, mib = timed_bake(model, mask, work / "gguf", format="gguf", gguf_source=source)
        reader = gguf_reader(baked_gguf)
        kept = sorted({t.tensor_type.name for t in reader.tensors if t.name.endswith("attn_output.weight")})
        row = {"output": "gguf", "seconds": round(seconds, 1), "MiB": round(mib, 1), "path": f"gguf/{baked_gguf.name}"}
        bakes.append(row | {"attn_output types": " ".join(kept)})
    else:
        print("the model was not converted from a GGUF file (pass gguf_source): the GGUF bake is left out")

    inputs, shots, answers = task_prompts(task, "eval")  # bare inputs: the prompts of the masked setting
    n = len(inputs) if limit is None else min(limit, len(inputs))
    prompts = [encode_prompt(model, x, s) for x, s in zip(inputs[:n], shots[:n])]
    stops, budget = set(stop_token_ids(model)), task.max_new_tokens

    def decode(ids: list[int]) -> str:
        return model.tokenizer.decode(ids, skip_special_tokens=True)

    def gated(ids: Tensor) -> Tensor:
        with value_gate(model, mask):
            return model(ids)

    def plain(module: nn.Module) -> Callable[[Tensor], Tensor]:
        return lambda ids: module(ids).logits

    baked_hf = plain_model(hf_dir)
    gaps = {"ungated (toolkit)": logit_gap(gated, model, prompts)}  # the control: the gate moves the logits
    gaps["baked hf (transformers)"] = logit_gap(gated, plain(baked_hf), prompts)
    columns = {
        "gated (toolkit)": generations(model, task, mask=mask)[:n],
        "baked hf (transformers)": plain_greedy(baked_hf, prompts, budget, stops, decode),
        "baked hf (toolkit)": generations(load_model(hf_dir, device="cpu", dtype="float32"), task)[:n],
        "ungated (toolkit)": generations(model, task)[:n],
    }
    del baked_hf
    pairs = [("baked hf (transformers)", "gated (toolkit)"), ("baked hf (toolkit)", "gated (toolkit)")]
    if baked_gguf is not None:  # the baked file's weights as transformers dequantises them (no llama.cpp needed)
        baked_gguf_hf = plain_model(baked_gguf.parent, baked_gguf.name)
        gaps["baked gguf (transformers)"] = logit_gap(gated, plain(baked_gguf_hf), prompts)
        columns["baked gguf (transformers)"] = plain_greedy(baked_gguf_hf, prompts, budget, stops, decode)
        pairs.append(("baked gguf (transformers)", "gated (toolkit)"))
        del baked_gguf_hf
    try:
        import llama_cpp  # noqa: F401  # pyright: ignore[reportMissingImports]  (optional: headsup_lens[gguf])
    except ImportError:
        print("llama_cpp is not installed (pip install 'headsup_lens[gguf]'): the llama.cpp columns are left out")
    else:
        if baked_gguf is not None and source is not None:
            unbaked = work / "source.gguf"  # the unbaked file, for the control
            with gguf_file(source) as path:
                shutil.copyfile(path, unbaked)
            columns["baked gguf (llama.cpp)"] = llama_cpp_greedy(baked_gguf, prompts, budget, stops, decode, threads)
            columns["source gguf (llama.cpp)"] = llama_cpp_greedy(unbaked, prompts, budget, stops, decode, threads)
            pairs += [
                ("baked gguf (llama.cpp)", "gated (toolkit)"),
                ("source gguf (llama.cpp)", "ungated (toolkit)"),
                ("baked gguf (llama.cpp)", "source gguf (llama.cpp)"),
            ]

    table = pd.DataFrame({"example": range(n), "input": inputs[:n], "answer": answers[:n], **columns})
    for column in columns:
        table[f"correct: {column}"] = [task.is_correct(t, a) for t, a in zip(table[column], table.answer)]
    summary = agreement(table, pairs, list(columns))
    xp.table(table, f"{FOLDER}/outputs_{safe_name(task.name)}", float_format=None)
    xp.table(summary, f"{FOLDER}/summary_{safe_name(task.name)}", float_format=None)
    xp.record_time(f"{task.name}: bake and compare ({n} inputs)", time.perf_counter() - started)
    logits = pd.DataFrame([{"comparison": f"{name} vs gated (toolkit)", **gap} for name, gap in gaps.items()])
    xp.table(logits, f"{FOLDER}/logits_{safe_name(task.name)}", float_format=None)
    xp.table(pd.DataFrame(bakes), f"{FOLDER}/bakes", float_format=None)
    return pd.DataFrame(bakes), summary
