"""Figure of merit: one mask-training step / one unmasked forward+backward of the same batch.

On an organism-sized Llama (8 layers x 16 heads, d_model 128, character tokenizer, random weights),
the training step (Gumbel noise, straight-through mask, value gate, answer-only unembedding, loss,
backward, AdamW) is timed per step as the difference between runs of two lengths, so setup costs
cancel. The baseline is a plain forward pass (full logits) + answer cross-entropy + backward to the
residual stream, on the same batches. Goal: ratio <= 1.10.

    python experiments/bench_training_step.py [--threads 1] [--steps 60]
"""

from __future__ import annotations

import argparse
import random
import string
import tempfile
import time

import torch
import torch.nn.functional as F

from headsup_lens import load_model
from headsup_lens.data import IGNORE_INDEX, Task, collate, encode_pairs
from headsup_lens.models import char_tokenizer, pad_token_id
from headsup_lens.training import BatchSampler, TrainConfig, train_mask


def build_model(directory: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return load_model(directory, device="cpu", dtype="float32")


def make_task(n: int = 400) -> Task:
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(n)]
    return Task.from_pairs("reverse", [(w, w[::-1]) for w in words], n_eval=20)


def time_training(model, task: Task, steps: int) -> float:
    config = TrainConfig(steps=steps, checkpoint_every=0, progress=False)
    start = time.perf_counter()
    train_mask(model, task, config)
    return time.perf_counter() - start


def time_baseline(model, task: Task, steps: int, batch_size: int = 16) -> float:
    rows = encode_pairs(model, task.train_pairs)
    sampler = BatchSampler(len(rows), batch_size, 0, task.name)
    batches = [collate([rows[i] for i in sampler.batch(s)], pad_id=pad_token_id(model)) for s in range(steps)]
    start = time.perf_counter()
    for batch in batches:
        leaf = torch.ones((), requires_grad=True)
        # Gradients must reach the bottom of the network, as they do for the mask of layer 0.
        with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x * leaf)]):
            logits = model(batch.input_ids, attention_mask=batch.attention_mask)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch.labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX)
        loss.backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        model = build_model(directory)
    task = make_task()
    short, long = args.steps // 3, args.steps
    time_training(model, task, 5)  # warm-up
    time_baseline(model, task, 5)
    step, base = [], []
    for _ in range(args.repeats):  # interleaved, best of: robust to a busy machine
        step.append((time_training(model, task, long) - time_training(model, task, short)) / (long - short))
        base.append(time_baseline(model, task, long) / long)
    n_params = sum(p.numel() for p in model.original_model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters, {model.cfg.n_layers} x {model.cfg.n_heads} heads, batch 16")
    print(f"training step:                  {min(step) * 1e3:7.2f} ms")
    print(f"unmasked forward+backward:      {min(base) * 1e3:7.2f} ms")
    print(f"ratio (goal <= 1.10):           {min(step) / min(base):7.3f}")


if __name__ == "__main__":
    main()
