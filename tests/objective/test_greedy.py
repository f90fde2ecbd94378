"""The KV-cached greedy loop equals `model.generate` while unembedding only the last position."""

from __future__ import annotations

import pytest
import torch

from headsup_lens.gates import gated, native_options
from headsup_lens.models import cut_at_stop, left_pad, pad_token_id
from headsup_lens.objective import greedy_generate
from headsup_lens.objective._greedy import keeps_last_logits_only

from ..conftest import random_mask

LENGTHS = (3, 7, 5, 9, 4)
MAX_NEW = 8


def padded_batch(model, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, model.cfg.d_vocab, (n,), generator=generator).tolist() for n in LENGTHS]
    return left_pad(rows, pad_id=pad_token_id(model))


def plain_generate(model, ids, attention, masks, stops, gate="value"):
    """The reference: the bridge's own `generate`, greedy, stopping at `stops`, cut like the loop."""
    with torch.no_grad(), gated(model, masks, gate=gate):
        out = model.generate(
            ids,
            attention_mask=attention,
            max_new_tokens=MAX_NEW,
            do_sample=False,
            verbose=False,
            return_type="tokens",
            output_logits=True,
            eos_token_id=sorted(stops),
        )
    return cut_at_stop(out.sequences[:, ids.shape[1] :].tolist(), stops), out.logits[0]


@pytest.mark.parametrize("check_every", [1, 3])
@pytest.mark.parametrize("gate", ["value", "query"])
def test_equals_generate_on_left_padded_rows_that_stop_early(any_model, gate, check_every):
    """Rows that stopped leave the batch when the flags are read back (every `check_every` tokens);
    the tokens they emit until then are cut at their stop token, so every row equals `generate`."""
    ids, attention = padded_batch(any_model)
    masks = random_mask(any_model, seed=4, rows=len(LENGTHS))
    full, _ = plain_generate(any_model, ids, attention, masks, stops={-1}, gate=gate)
    # Stop tokens taken from the rows' own continuations: rows stop at different steps, some at once.
    stop_sets = [{full[0][1], full[2][0]}, {full[1][3]}, {row[0] for row in full}]
    row_lengths = set()
    for stops in stop_sets:
        expected, logits = plain_generate(any_model, ids, attention, masks, stops, gate=gate)
        with native_options(check_every=check_every):
            out = greedy_generate(any_model, ids, attention, max_new_tokens=MAX_NEW, stops=stops, mask=masks, gate=gate)
        assert out.tokens == expected
        assert torch.allclose(out.first_logits, logits.float(), atol=1e-5)
        row_lengths.add(tuple(len(row) for row in out.tokens))
    assert any(0 in lengths and MAX_NEW in lengths for lengths in row_lengths)  # rows left the batch early


def test_cached_decoding_equals_full_forward_passes(any_model):
    """Reference without any KV cache: re-run the whole sequence and take the argmax each step.
    `model.generate` is no reference for the cache, since it shares it (transformers 5.24 renamed the
    attention layers' cache argument, the bridge stopped seeing it, and both ignored the prompt)."""
    ids, _ = padded_batch(any_model, seed=2)
    row = ids[:1, -LENGTHS[0] :]
    masks = random_mask(any_model, seed=6)
    expected = row
    with torch.no_grad(), gated(any_model, masks):
        for _ in range(MAX_NEW):
            logits = any_model(expected, return_type="logits")
            expected = torch.cat([expected, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    out = greedy_generate(any_model, row, None, max_new_tokens=MAX_NEW, stops={-1}, mask=masks)
    assert out.tokens[0] == expected[0, row.shape[1] :].tolist()


def test_each_row_equals_its_unpadded_generation(llama):
    ids, attention = padded_batch(llama, seed=1)
    masks = random_mask(llama, seed=5, rows=len(LENGTHS))
    out = greedy_generate(llama, ids, attention, max_new_tokens=MAX_NEW, stops={5, 9}, mask=masks, alpha=0.3)
    for i, n in enumerate(LENGTHS):
        alone = greedy_generate(
            llama, ids[i : i + 1, -n:], None, max_new_tokens=MAX_NEW, stops={5, 9}, mask=masks[i], alpha=0.3
        )
        assert out.tokens[i] == alone.tokens[0]
        assert torch.allclose(out.first_logits[i], alone.first_logits[0], atol=1e-5)


def test_prompt_pass_unembeds_the_last_position_only(any_model):
    assert keeps_last_logits_only(any_model)
    ids, attention = padded_batch(any_model)
    seen = []
    with any_model.hooks(fwd_hooks=[("unembed.hook_in", lambda x, hook: seen.append(tuple(x.shape)))]):
        greedy_generate(any_model, ids, attention, max_new_tokens=3, stops=set())
    assert seen == [(len(LENGTHS), 1, any_model.cfg.d_model)] * 3


def test_prompt_hooks_see_the_prompt_pass_only_and_zero_new_tokens(llama):
    ids, attention = padded_batch(llama)
    shapes = []
    out = greedy_generate(
        llama,
        ids,
        attention,
        max_new_tokens=0,
        stops=set(),
        prompt_hooks=[("blocks.0.hook_resid_post", lambda x, hook: shapes.append(x.shape[1]))],
    )
    with torch.no_grad():
        reference = llama(ids, attention_mask=attention)[:, -1]
    assert out.tokens == [[]] * len(LENGTHS) and shapes == [ids.shape[1]]
    assert torch.allclose(out.first_logits, reference, atol=1e-5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(llama, ids, attention, max_new_tokens=-1, stops=set())
