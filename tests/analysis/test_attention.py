import pytest
import torch

from headsup_lens import Task, attention_on_target, value_gate
from headsup_lens.analysis import candidate_spans, choice_instruction
from headsup_lens.models import encode, prompt_format

from ..conftest import random_mask

PAIRS = [
    ("cat, apple, dog", "apple"),
    ("pear, horse, fig", "horse"),
    ("ant, kiwi, lime", "ant"),
    ("bee, plum, owl", "owl"),
]
INSTRUCTION = "Pick the fruit: {input}"


def direct_words(model, user, x, answer, mask=None):
    """From one unpadded cached run: the last token's attention to each candidate word's tokens,
    `[n_layers, n_heads, 3]`, and the target's index. A word's tokens are found by encoding the
    prompt text up to its start and up to its end (no offsets involved)."""
    template = prompt_format(model)
    text = template.format(user)
    ids = encode(model, text, add_bos=template.add_bos)

    def n_tokens(prefix: str) -> int:
        """Tokens of `prefix` as they stand in the full prompt: a trailing space that the tokenizer
        joins to the next word ("▁apple", "Ġapple") is left to that word."""
        for candidate in (prefix, prefix.rstrip(" ")):
            head = (
                encode(model, candidate, add_bos=template.add_bos) if candidate else [tokenizer_bos] * template.add_bos
            )
            if ids[: len(head)] == head:
                return len(head)
        raise AssertionError(f"no token boundary at {prefix!r}")

    tokenizer_bos = model.tokenizer.bos_token_id
    words = [w.strip() for w in x.split(",")]
    positions, cursor = [], text.index(x)
    for word in words:
        start = text.index(word, cursor)
        cursor = start + len(word)
        positions.append(list(range(n_tokens(text[:start]), n_tokens(text[:cursor]))))
    with (
        torch.no_grad(),
        value_gate(model, mask if mask is not None else torch.ones(model.cfg.n_layers, model.cfg.n_heads)),
    ):
        _, cache = model.run_with_cache(torch.tensor([ids]))
    out = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, 3)
    for layer in range(model.cfg.n_layers):
        last = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, -1]
        out[layer] = torch.stack([last[:, p].sum(-1) for p in positions], -1)
    return out, words.index(answer)


def test_attention_on_target_matches_direct_computation(any_model):
    mask = random_mask(any_model, seed=4)
    result = attention_on_target(
        any_model,
        PAIRS,
        mask,
        instruction=INSTRUCTION,
        batch_size=3,  # left padding: the prompts differ in length
        settings=("original", "instructed", "masked", "masked+instructed"),
    )
    inside = mask > 0
    for setting in result.per_head:
        instructed = "instructed" in setting
        setting_mask = mask if setting.startswith("masked") else None
        runs = [
            direct_words(any_model, INSTRUCTION.replace("{input}", x) if instructed else x, x, y, setting_mask)
            for x, y in PAIRS
        ]
        per_head = torch.stack([words[..., t] / words.sum(-1) for words, t in runs]).mean(0)
        assert torch.allclose(result.per_head[setting], per_head, atol=1e-5), setting

        def group(heads):  # the paper's Table 7: sum over the group's heads, then normalise, then average
            return sum(float(words[heads].sum(0)[t] / words[heads].sum()) for words, t in runs) / len(runs)

        row = result.table.set_index("setting").loc[setting]
        assert row.inside == pytest.approx(group(inside), abs=1e-5)
        assert row.outside == pytest.approx(group(~inside), abs=1e-5)
        assert row["all"] == pytest.approx(group(torch.ones_like(inside)), abs=1e-5)
        assert row.inside != pytest.approx(per_head[inside].mean().item(), abs=1e-6)  # not a mean of ratios
    assert not torch.allclose(result.per_head["original"], result.per_head["masked"])


def test_attention_on_target_takes_a_task_and_its_held_out_pairs(llama):
    task = Task.from_pairs("pick", PAIRS, instruction=INSTRUCTION, n_eval=2)
    mask = random_mask(llama, seed=5)
    from_task = attention_on_target(llama, task, mask)  # the held-out pairs only, as the paper's Table 7
    assert from_task.n_examples == 2
    assert from_task.table.equals(attention_on_target(llama, PAIRS[2:], mask, instruction=INSTRUCTION).table)
    assert not from_task.table.equals(attention_on_target(llama, PAIRS, mask, instruction=INSTRUCTION).table)
    every = attention_on_target(llama, task, mask, split="all")
    assert every.table.equals(attention_on_target(llama, PAIRS, mask, instruction=INSTRUCTION).table)
    assert list(from_task.table.setting) == ["original", "instructed", "masked"]


def test_pick_one_of_three_tasks_use_the_papers_table_7_prompt(llama):
    assert choice_instruction("fruit_v_animal_3") == "{input}\n\nChoose the fruit out of animals:"
    assert choice_instruction("antonym") is None
    task = Task.from_pairs("fruit_v_animal_3", PAIRS, instruction="Table 10 wording: {input}", n_eval=1)
    table = attention_on_target(llama, task, random_mask(llama), settings=("instructed",), split="all").table
    expected = attention_on_target(
        llama, PAIRS, random_mask(llama), settings=("instructed",), instruction=choice_instruction("fruit_v_animal_3")
    ).table
    assert table.equals(expected)


def test_candidate_spans_and_bad_examples(llama):
    spans, target = candidate_spans("cat, apple,dog", "Apple")
    assert spans == [(0, 3), (5, 10), (11, 14)] and target == 1
    with pytest.raises(ValueError, match="3 comma-separated"):
        candidate_spans("cat, dog", "cat")
    with pytest.raises(ValueError, match="not exactly one"):
        candidate_spans("cat, dog, cow", "pig")
    with pytest.raises(ValueError, match="instruction"):
        attention_on_target(llama, PAIRS, random_mask(llama), settings=("instructed",))
    with pytest.raises(ValueError, match="settings"):
        attention_on_target(llama, PAIRS, random_mask(llama), settings=("sideways",))


@pytest.mark.parametrize("gate", ["value", "query"])
def test_last_position_attention_equals_the_cached_pattern(llama, gate):
    """Every head's last-row pattern, read from a plain `run_with_cache` under the same gate."""
    from headsup_lens import query_gate
    from headsup_lens.analysis import last_position_attention

    mask = random_mask(llama, seed=5)
    template = prompt_format(llama)
    ids = encode(llama, template.format("cat dog"), add_bos=template.add_bos)
    gate_cm = value_gate(llama, mask) if gate == "value" else query_gate(llama, mask)
    with torch.no_grad(), gate_cm:
        _, cache = llama.run_with_cache(torch.tensor([ids]))
    expected = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][0, :, -1] for l in range(llama.cfg.n_layers)])
    got = last_position_attention(llama, "cat dog", mask, gate=gate)
    assert got.shape == (llama.cfg.n_layers, llama.cfg.n_heads, len(ids))
    torch.testing.assert_close(got, expected.float())
    torch.testing.assert_close(got.sum(-1), torch.ones(llama.cfg.n_layers, llama.cfg.n_heads))
    if gate == "query":  # a removed head attends uniformly over the whole prompt
        layer, head = (mask == 0).nonzero()[0].tolist()
        torch.testing.assert_close(got[layer, head], torch.full((len(ids),), 1 / len(ids)))
    with pytest.raises(ValueError, match="without a mask"):
        last_position_attention(llama, "cat dog", gate="query")
