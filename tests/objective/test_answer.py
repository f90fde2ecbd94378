"""The answer loss against plain Hugging Face code on the same token ids, on models whose final norm
gains, biases and untied embeddings look like real ones; training-step loss = evaluation loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from headsup_lens import HeadMask, load_model
from headsup_lens.data import IGNORE_INDEX, Task, encode_pairs, tokenize_pairs
from headsup_lens.evaluation import answer_loss
from headsup_lens.gates import gate_hooks
from headsup_lens.models import prompt_format
from headsup_lens.objective import answer_nll
from headsup_lens.training._train import task_loss_sums

from ..conftest import random_mask

PAIRS = [("cold", "hot"), ("up the hill", "down"), ("good day", "bad night"), ("a girl", "a boy"), ("yes", "no")]


@pytest.fixture(params=["llama_dir", "qwen2_dir", "spm_dir", "gpt2_dir"])
def twins(request):
    """A model through the bridge and the same directory through plain transformers."""
    path = request.getfixturevalue(request.param)
    return load_model(path, device="cpu", dtype="float32"), AutoModelForCausalLM.from_pretrained(path).eval()


def o_proj_gate(hf, mask: torch.Tensor):
    """Plain reference gate: zero removed heads at the input of each layer's output projection."""
    handles = []
    n_heads = hf.config.num_attention_heads
    for layer, block in enumerate(hf.model.layers):

        def pre(module, args, layer=layer):
            x = args[0]
            shaped = x.view(*x.shape[:-1], n_heads, -1) * mask[layer].view(n_heads, 1)
            return (shaped.view(x.shape),)

        handles.append(block.self_attn.o_proj.register_forward_pre_hook(pre))
    return handles


def test_models_under_test_have_real_looking_read_outs(twins):
    _, hf = twins
    gains = [p for n, p in hf.named_parameters() if ("norm" in n or "ln_" in n) and n.endswith("weight")]
    assert gains and all((p - 1).abs().max() > 0.1 for p in gains)  # a read-out that skips a gain would show


def test_answer_nll_equals_cross_entropy_of_the_hf_logits(twins):
    model, hf = twins
    batch = tokenize_pairs(model, PAIRS)
    nll, rows = answer_nll(model, batch)
    with torch.no_grad():
        logits = hf(batch.input_ids, attention_mask=batch.attention_mask).logits
    labels = batch.labels[:, 1:]
    keep = labels != IGNORE_INDEX
    expected = F.cross_entropy(logits[:, :-1][keep], labels[keep], reduction="none")
    assert torch.allclose(nll, expected, atol=1e-4)
    assert rows.tolist() == keep.nonzero()[:, 0].tolist()


def test_the_paper_ppl_is_the_mean_of_per_example_means(twins):
    model, hf = twins
    task = Task.from_pairs("t", PAIRS, n_eval=5)
    per_example = []
    for prompt, answer in encode_pairs(model, list(task.eval_pairs)):
        ids = torch.tensor([prompt + answer])
        labels = ids.clone()
        labels[0, : len(prompt)] = IGNORE_INDEX
        with torch.no_grad():
            per_example.append(hf(ids, labels=labels).loss.item())  # the reference's per-example loss
    assert answer_loss(model, task, batch_size=2) == pytest.approx(sum(per_example) / len(per_example), abs=1e-4)


def test_unembedding_before_the_norm_weight_would_be_caught(llama):
    """The check above can fail: reading out `hook_normalized` (before the gain) gives other logits."""
    batch = tokenize_pairs(llama, PAIRS[:2])
    seen = {}
    with torch.no_grad(), llama.hooks(fwd_hooks=[("ln_final.hook_normalized", lambda x, hook: seen.update(x=x))]):
        logits = llama(batch.input_ids)
    assert (llama.unembed(seen["x"]) - logits).abs().max() > 0.1


def test_masked_loss_matches_o_proj_gating_of_the_hf_model(llama_dir):
    model = load_model(llama_dir, device="cpu", dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(llama_dir).eval()
    mask = random_mask(model, seed=5)
    batch = tokenize_pairs(model, PAIRS)
    nll, _ = answer_nll(model, batch, gate_hooks(model, mask))
    handles = o_proj_gate(hf, mask)
    try:
        with torch.no_grad():
            logits = hf(batch.input_ids, attention_mask=batch.attention_mask).logits
    finally:
        for handle in handles:
            handle.remove()
    labels = batch.labels[:, 1:]
    keep = labels != IGNORE_INDEX
    assert torch.allclose(nll, F.cross_entropy(logits[:, :-1][keep], labels[keep], reduction="none"), atol=1e-4)


def test_training_step_loss_equals_the_evaluation_loss_at_the_same_mask(qwen2):
    task = Task.from_pairs("t", PAIRS, n_eval=0)
    mask = random_mask(qwen2, seed=2)
    batch = tokenize_pairs(qwen2, list(task.pairs))
    rows = torch.zeros(len(task.pairs), dtype=torch.long)
    with torch.no_grad():
        sums, counts = task_loss_sums(qwen2, batch, gate_hooks(qwen2, mask.expand(len(task.pairs), -1, -1)), rows, 1)
        step = sums / counts
    expected = answer_loss(qwen2, task, mask=HeadMask(mask), split="train", reduction="token")
    assert float(step[0]) == pytest.approx(expected, rel=1e-5)


def test_joint_tokenisation_differs_from_separate_on_a_sentencepiece_tokenizer(spm):
    """Prompt + answer are tokenised as one string, as the paper's code does: after the assistant's
    newline a word has no "▁" word-start piece, while tokenised alone it has one."""
    fmt = prompt_format(spm)
    tokenizer = spm.tokenizer
    prompt, answer = encode_pairs(spm, [("a girl", "girl")])[0]
    alone = tokenizer("girl", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(alone)[0].startswith("▁")
    assert answer[: len(answer) - 1] != alone
    assert not tokenizer.convert_ids_to_tokens(answer)[0].startswith("▁")
    assert (
        prompt + answer == tokenizer(fmt.format("a girl") + fmt.answer("girl"), add_special_tokens=False)["input_ids"]
    )
