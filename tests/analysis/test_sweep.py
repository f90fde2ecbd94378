import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens import HeadMask, removal_sweep, value_gate
from headsup_lens.analysis import auto_batch_size, influence_order, random_order, sweep_masks, weight_order
from headsup_lens.models import encode, prompt_format

PROMPT = "cat dog"
MAX_NEW = 4


def sequential_sweep(model, prompt, order, targets, top_k=5, max_new=MAX_NEW, gate=value_gate):
    """The reference: for each step one forward pass and one greedy generation, one row at a time
    (`gate(model, mask)`: the context manager of the gate the sweep uses)."""
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(prompt), add_bos=template.add_bos)])
    eos = model.tokenizer.eos_token_id
    ranks, generations, top = [], [], None
    for step in range(len(order) + 1):
        mask = HeadMask.from_heads(order[:step], model)
        with torch.no_grad(), gate(model, mask):
            logits = model(ids)[0, -1]
            out = model.generate(ids, max_new_tokens=max_new, do_sample=False, verbose=False, return_type="tokens")
        if top is None:
            top = logits.topk(top_k).indices.tolist()
        ranks.append([int((logits > logits[t]).sum()) + 1 for t in top + targets])
        new = out[0, ids.shape[1] :].tolist()
        generations.append(new[: new.index(eos)] if eos in new else new)
    return ranks, generations


def check_against_sequential(model, order, targets, batch_sizes=(None,)):
    """The batched sweep equals the sequential loop for each batch size (None: memory budget)."""
    ranks, generations = sequential_sweep(model, PROMPT, order, targets)
    hits = [i for i, r in enumerate(ranks) if 1 in r[5:]]
    changed = [i for i, g in enumerate(generations) if g != generations[0]]
    for batch_size in batch_sizes:
        result = removal_sweep(
            model, PROMPT, order, target_tokens=targets, max_new_tokens=MAX_NEW, batch_size=batch_size
        )
        assert result.ranks[result.tokens.label].to_numpy().tolist() == ranks
        assert result.generation_ids == generations
        assert result.generations == [model.tokenizer.decode(g) for g in generations]
        assert result.switch_step == (hits[0] if hits else None)
        assert result.change_step == (changed[0] if changed else None)
    return result


def final_top1(model, order):
    """A target that certainly becomes top-1 during the sweep: the top token with every head removed."""
    template = prompt_format(model)
    ids = torch.tensor([encode(model, template.format(PROMPT), add_bos=template.add_bos)])
    with torch.no_grad(), value_gate(model, HeadMask.from_heads(order, model)):
        return int(model(ids)[0, -1].argmax())


def test_weight_order_sweep_equals_sequential_loop(any_model):
    logits = torch.randn(any_model.cfg.n_layers, any_model.cfg.n_heads, generator=torch.Generator().manual_seed(0))
    order = weight_order(HeadMask.from_logits(logits))
    targets = [final_top1(any_model, order), 7]
    result = check_against_sequential(any_model, order, targets, batch_sizes=(None, 3))
    assert result.switch_step is not None and len(result.ranks) == len(order) + 1


def test_memory_budget_chunks_the_sweep(llama):
    order = random_order(llama, seed=2)
    whole = removal_sweep(llama, PROMPT, order, max_new_tokens=3)
    n_tokens = len(encode(llama, prompt_format(llama).format(PROMPT), add_bos=False)) + 3
    memory_gb = 5 / auto_batch_size(llama, n_tokens, memory_gb=1.0)  # about 5 rows per chunk
    budget = auto_batch_size(llama, n_tokens, memory_gb=memory_gb)
    chunked = removal_sweep(llama, PROMPT, order, max_new_tokens=3, memory_gb=memory_gb)
    assert 1 < budget < 10
    assert chunked.metadata["batch_size"] == budget < len(order) + 1 <= whole.metadata["batch_size"]
    assert chunked.ranks.equals(whole.ranks) and chunked.generation_ids == whole.generation_ids


def test_random_and_partial_orders_equal_sequential_loop(llama):
    order = random_order(llama, seed=3)[:10]
    check_against_sequential(llama, order, [final_top1(llama, order)], batch_sizes=(4,))
    check_against_sequential(llama, [(1, 2), (0, 5), (1, 7)], [9], batch_sizes=(2,))


@pytest.mark.parametrize("gate, alpha", [("value", 0.5), ("query", 0.0)])
def test_a_sweep_under_another_gate_equals_the_sequential_loop_under_that_gate(llama, gate, alpha):
    """`gate="query"` sweeps under the query gate, `alpha` keeps that fraction of a removed head (value gate)."""
    import functools

    from headsup_lens import query_gate

    order = random_order(llama, seed=4)[:8]
    cm = query_gate if gate == "query" else functools.partial(value_gate, alpha=alpha)
    ranks, generations = sequential_sweep(llama, PROMPT, order, [], gate=cm)
    result = removal_sweep(llama, PROMPT, order, max_new_tokens=MAX_NEW, batch_size=3, gate=gate, alpha=alpha)
    assert result.ranks[result.tokens.label].to_numpy().tolist() == ranks
    assert result.generation_ids == generations
    assert (result.metadata["gate"], result.metadata["alpha"]) == (gate, alpha)
    plain = removal_sweep(llama, PROMPT, order, max_new_tokens=MAX_NEW, batch_size=3)
    assert plain.ranks.iloc[1:].to_numpy().tolist() != result.ranks.iloc[1:].to_numpy().tolist()  # the gate acts


def test_the_query_gate_sweep_takes_no_alpha(llama):
    with pytest.raises(ValueError, match="value gate only"):
        removal_sweep(llama, PROMPT, random_order(llama)[:2], gate="query", alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        removal_sweep(llama, PROMPT, random_order(llama)[:2], alpha=1.5)


def test_influence_order_equals_sequential_loop_and_reorders_by_rank_rise(llama):
    order = random_order(llama, seed=5)
    target = final_top1(llama, order)
    sweep = removal_sweep(llama, PROMPT, order, target_tokens=[target], max_new_tokens=MAX_NEW)
    k = 10
    influence = influence_order(sweep, k=k)
    ranks = sweep.ranks[sweep.target_labels[0]].tolist()
    rises = {order[i]: ranks[i] - ranks[i + 1] for i in range(k)}
    assert sorted(influence[:k]) == sorted(order[:k]) and influence[k:] == order[k:]
    assert [rises[h] for h in influence[:k]] == sorted(rises.values(), reverse=True)
    check_against_sequential(llama, influence, [target], batch_sizes=(5,))


def test_masks_layer_outputs_and_steps(llama):
    order = [(0, 1), (1, 3), (0, 0)]
    masks = sweep_masks(order, [0, 2, 3], (2, 8))
    assert masks.shape == (3, 2, 8) and masks[0].sum() == 16
    assert masks[1, 0, 1] == 0 and masks[1, 1, 3] == 0 and masks[1, 0, 0] == 1 and masks[2].sum() == 13
    full = removal_sweep(llama, PROMPT, order, max_new_tokens=2, record_layers=True)
    some = removal_sweep(llama, PROMPT, order, max_new_tokens=2, record_layers=True, steps=[1, 3], batch_size=1)
    assert some.ranks.step.tolist() == [1, 3]
    assert torch.allclose(some.block_out, full.block_out[[1, 3]], atol=1e-5)
    # Recorded layer outputs are those of a plain cached run of the step's mask.
    template = prompt_format(llama)
    ids = torch.tensor([encode(llama, template.format(PROMPT), add_bos=template.add_bos)])
    with value_gate(llama, masks[1]):
        _, cache = llama.run_with_cache(ids)
    assert torch.allclose(full.block_out[2, 1], cache["blocks.1.hook_resid_post"][0, -1], atol=1e-5)
    assert torch.allclose(full.attn_out[2, 0], cache["blocks.0.hook_attn_out"][0, -1], atol=1e-5)


def test_a_sweeps_step_mask_and_its_tracked_labels(llama):
    """`mask_at` is the mask the sweep ran at that step; the target and top-k labels split the tracked tokens."""
    order = [(0, 1), (1, 3), (0, 0)]
    sweep = removal_sweep(llama, PROMPT, order, target_tokens="x", top_k=2, max_new_tokens=1)
    for step in sweep.steps:
        mask = sweep.mask_at(step, (2, 8))
        assert mask.sum() == 16 - step and all(mask[layer, head] == 0 for layer, head in order[:step])
    assert sweep.target_labels and len(sweep.top_labels) == 2
    assert sorted(sweep.target_labels + sweep.top_labels) == sorted(sweep.tokens.label)
    top = sweep.tokens.set_index("label").loc[sweep.top_labels]
    assert (top.kind == "top").all()


def test_formatted_prompt_and_text_targets(llama):
    template = prompt_format(llama)
    plain = removal_sweep(llama, PROMPT, [(0, 1)], target_tokens="x", max_new_tokens=3)
    formatted = removal_sweep(
        llama, template.format(PROMPT), [(0, 1)], target_tokens="x", max_new_tokens=3, formatted=True
    )
    assert plain.ranks.equals(formatted.ranks) and plain.generations == formatted.generations
    assert plain.tokens.token_id.tolist()[-1] == llama.tokenizer.convert_tokens_to_ids("x")
    long = plain.long()
    assert len(long) == 2 * len(plain.tokens) and set(long.columns) >= {"step", "rank", "logit", "kind"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(order=[(2, 0)]), "outside"),
        (dict(order=[(0, 1), (0, 1)]), "twice"),
        (dict(order=[(0, 1)], batch_size=0), "batch_size"),
        (dict(order=[(0, 1)], steps=[2]), "steps"),
        (dict(order=[(0, 1)], target_tokens=[10_000]), "vocabulary"),
    ],
)
def test_bad_arguments(llama, kwargs, message):
    with pytest.raises(ValueError, match=message):
        removal_sweep(llama, PROMPT, **kwargs)


def test_influence_order_needs_targets(llama):
    sweep = removal_sweep(llama, PROMPT, [(0, 1)], max_new_tokens=1)
    with pytest.raises(ValueError, match="target"):
        influence_order(sweep)


def test_target_text_is_the_token_the_model_would_write_after_the_prompt(spm):
    """On a SentencePiece-like tokenizer a word alone starts with "▁", but after the prompt's final
    newline it does not: the target is taken from the joint tokenisation."""
    from headsup_lens.analysis._common import prompt_text, token_id

    after = prompt_text(spm, "a girl")
    chosen = token_id(spm, "girl", after=after)
    alone = spm.tokenizer("girl", add_special_tokens=False)["input_ids"][0]
    joint = spm.tokenizer(after + "girl", add_special_tokens=False)["input_ids"]
    assert chosen == joint[len(spm.tokenizer(after, add_special_tokens=False)["input_ids"])] and chosen != alone
    sweep = removal_sweep(spm, "a girl", [(0, 0)], target_tokens=["girl"], max_new_tokens=0, batch_size=1)
    assert sweep.tokens.token_id.tolist()[-1] == chosen


@pytest.mark.parametrize(
    "target, message",
    [
        ("zq", "carries no visible character"),  # tokenised alone: a lone "▁" piece, then "z"
        ("é", "cannot encode"),
        ("  ", "empty or whitespace"),
    ],
)
def test_targets_that_map_to_no_meaningful_token_are_refused(spm, target, message):
    from headsup_lens.analysis._common import token_id

    with pytest.raises(ValueError, match=message):
        token_id(spm, target)


def test_prompts_with_unencodable_characters_or_beyond_the_context_are_refused(llama):
    with pytest.raises(ValueError, match="cannot encode: 'é'"):
        removal_sweep(llama, "héllo", [(0, 0)], max_new_tokens=0)
    with pytest.raises(ValueError, match="more than the model's context of 256"):
        removal_sweep(llama, "a" * 300, [(0, 0)], max_new_tokens=0)


def test_progress_false_hides_the_sweeps_bar(llama, monkeypatch, capsys):
    import headsup_lens._progress as progress_module

    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    order = random_order(llama)[:3]
    removal_sweep(llama, PROMPT, order, max_new_tokens=2)
    assert "removal sweep" in capsys.readouterr().err
    removal_sweep(llama, PROMPT, order, max_new_tokens=2, progress=False)
    assert capsys.readouterr().err == ""


@given(
    st.integers(1, 5),
    st.integers(1, 40),
    st.lists(st.integers(0, 39), max_size=6),
    st.integers(0, 2**31 - 1),
)
def test_token_ranks_count_the_strictly_larger_logits(rows, vocab, picks, seed):
    """Rank = 1 + the number of strictly larger logits in the row, ties sharing the better rank
    (logits drawn from a few values, so ties are common), against a plain loop."""
    from headsup_lens.analysis._common import token_ranks

    generator = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 3, (rows, vocab), generator=generator).float()
    tokens = torch.tensor([p % vocab for p in picks], dtype=torch.long)
    expected = [[1 + sum(float(x) > float(row[t]) for x in row) for t in tokens.tolist()] for row in logits]
    ranks = token_ranks(logits, tokens)
    assert ranks.dtype == torch.long and ranks.shape == (rows, len(tokens))
    assert ranks.tolist() == expected
