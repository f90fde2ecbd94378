"""Greedy decoding at fixed shapes (`gates._static`: a static KV cache, explicit slot masks, one
captured CUDA graph per token on a GPU) against the bridge's hook points, on every architecture
family: same continuations, first logits and answer losses, in fp32. On the CPU the fixed-shape
step runs eagerly (`native_options(static_cache=True)`); on a GPU (when the machine has one) the
same checks run with the step captured and replayed."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens.data import collate
from headsup_lens.gates import direct_path, gate_hooks, native_options
from headsup_lens.gates._native import native_forward
from headsup_lens.gates._static import fits, slot_mask, static_step
from headsup_lens.models import left_pad, stop_token_ids
from headsup_lens.objective import answer_nll, greedy_generate

from ..conftest import FAMILIES, WIDE_GEMMA, random_mask, random_tokens
from .test_native import BUILT_IN, host_reads

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.fixture(params=[*BUILT_IN, *(f for f in FAMILIES if f != "gemma3"), "gemma3_wide"])
def model(request, family_model):
    """Llama, Qwen2, GPT-2, Mistral, Qwen3, Phi-3 and a Gemma-3 whose windows cover the rows."""
    if request.param in BUILT_IN:
        return request.getfixturevalue(request.param)
    if request.param == "gemma3_wide":  # the tiny Gemma-3's window (4) is declined: see test_short_windows...
        return request.getfixturevalue("wide_gemma")
    return family_model(request.param)


def decode_and_score(model, **options):
    """Left-padded prompts, per-row masks, stop tokens that end some rows early, answers of 1 to 4
    tokens: the greedy output (tokens, first logits, answer losses) under `native_options(**options)`."""
    device = model.cfg.device
    prompts = [random_tokens(model, 1, n, seed=n)[0].tolist() for n in (6, 3, 8, 5)]
    answers = [random_tokens(model, 1, n, seed=10 + n)[0].tolist() for n in (2, 1, 4, 3)]
    ids, attention = left_pad(prompts, pad_id=0, device=device)
    masks = random_mask(model, seed=7, p_keep=0.8, rows=4).to(device)
    stops = stop_token_ids(model) | set(random_tokens(model, 1, 3, seed=9)[0].tolist())
    with native_options(prefix_sharing=False, **options):
        return greedy_generate(model, ids, attention, max_new_tokens=7, stops=stops, mask=masks, answers=answers)


def assert_same(fast, reference):
    assert fast.tokens == reference.tokens
    assert torch.allclose(fast.first_logits, reference.first_logits, atol=1e-4, rtol=1e-4)
    assert fast.answer_nll is not None and reference.answer_nll is not None
    assert torch.allclose(fast.answer_nll, reference.answer_nll, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("check_every", [1, 3])
def test_fixed_shape_decoding_equals_the_bridge(model, check_every):
    fixed = decode_and_score(model, static_cache=True, check_every=check_every)
    with direct_path(False):
        reference = decode_and_score(model)
    assert_same(fixed, reference)


def test_answer_losses_equal_their_own_loss_pass(llama):
    """Scored from a copy of the static cache after the prompt pass: `answer_nll` of the rows."""
    prompts = [random_tokens(llama, 1, n, seed=n)[0].tolist() for n in (6, 3, 8, 5)]
    answers = [random_tokens(llama, 1, n, seed=10 + n)[0].tolist() for n in (2, 1, 4, 3)]
    ids, attention = left_pad(prompts, pad_id=0)
    masks = random_mask(llama, seed=11, p_keep=0.8, rows=4)
    with native_options(prefix_sharing=False, static_cache=True):
        out = greedy_generate(llama, ids, attention, max_new_tokens=2, stops=set(), mask=masks, answers=answers)
    with direct_path(False), torch.no_grad():
        nll, rows = answer_nll(llama, collate(list(zip(prompts, answers)), pad_id=0), gate_hooks(llama, masks))
    expected = torch.zeros(4, 4)
    expected[rows, torch.cat([torch.arange(len(a)) for a in answers])] = nll
    assert out.answer_nll is not None
    assert torch.allclose(out.answer_nll, expected, atol=1e-4, rtol=1e-4)


def test_short_windows_decode_on_the_dynamic_cache(family_model):
    """The tiny Gemma-3's window (4) is shorter than its rows: fixed shapes are declined, and the
    output still equals the bridge's."""
    gemma = family_model("gemma3")
    configs = [gemma.original_model.config]
    assert not fits(configs, 8) and fits(configs, 4)
    fixed = decode_and_score(gemma, static_cache=True)
    with direct_path(False):
        reference = decode_and_score(gemma)
    assert_same(fixed, reference)


def test_the_fixed_shape_step_reads_nothing_back(model, monkeypatch):
    """What a CUDA graph captures must never wait for the device: a decoding step of the model's
    own forward pass (gates, static cache, slot mask) calls no host read."""
    from headsup_lens.gates._paths import Decoding, GateSpec
    from headsup_lens.gates._static import StaticDecoding

    native = native_forward(model)
    assert native is not None
    ids, attention = left_pad([random_tokens(model, 1, n, seed=n)[0].tolist() for n in (5, 3)], pad_id=0)
    job = Decoding(ids, attention, GateSpec(heads=random_mask(model, rows=2)), 4, torch.tensor([0]))
    decoding = StaticDecoding(native.hf, job, graph=False, step_fn=None)
    decoding.load(job)
    with torch.no_grad(), direct_path(True), native.running(decoding.spec) as hf:
        decoding.prompt(ids, torch.zeros_like(ids))
        position, slot = torch.full((2, 1), 5), torch.tensor([5])
        with host_reads(monkeypatch) as reads:
            static_step(hf, decoding.cache, decoding.valid, hf.dtype, ids[:, -1:], position, slot)
            decoding.load(job)  # what the next decoding copies in reads nothing back either
    assert reads == []


@given(
    valid=st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=3),
    slots=st.lists(st.integers(0, 5), min_size=1, max_size=4),
)
def test_a_query_sees_valid_keys_up_to_its_slot_and_itself(valid, slots):
    valid_t, slots_t = torch.tensor(valid), torch.tensor(slots)
    mask = slot_mask(valid_t, slots_t, torch.float32)
    assert mask.shape == (len(valid), 1, len(slots), 6)
    for b, row in enumerate(valid):
        for q, s in enumerate(slots):
            seen = [(row[k] and k <= s) or k == s for k in range(6)]
            assert (mask[b, 0, q] == 0).tolist() == seen
            assert bool((mask[b, 0, q][[not x for x in seen]] == torch.finfo(torch.float32).min).all())


def test_a_failed_capture_runs_every_step_eagerly_with_a_warning(monkeypatch):
    """`Replay` runs the first step eagerly (a warm-up on a side stream), then tries the capture; a
    capture that fails (here: the capture itself) warns once, and that step and every later one still
    run, eagerly. (On a GPU the capture itself is checked by the test below.)"""
    import contextlib

    import headsup_lens.gates._graph as static

    class Broken:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            raise RuntimeError("operation not permitted when stream is capturing")

        def __exit__(self, *args):
            return False

    class Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(static.torch.cuda, "graph", Broken)
    monkeypatch.setattr(static.torch.cuda, "CUDAGraph", Broken)
    monkeypatch.setattr(static.torch.cuda, "Stream", Stream)
    monkeypatch.setattr(static.torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(static.torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(static.torch.cuda, "synchronize", lambda: None)
    steps = []
    replay = static.Replay(lambda: steps.append(len(steps)), enabled=True, what="decoding step")
    replay()  # the warm-up
    with pytest.warns(RuntimeWarning, match="could not be captured"):
        replay()
    replay()
    assert steps == [0, 1, 2]
    assert replay.graph is None and not replay.enabled


@CUDA
@pytest.mark.parametrize("family", [*BUILT_IN, *FAMILIES])
def test_captured_decoding_on_a_gpu_equals_the_bridge(family, tmp_path):
    """On a GPU (fp32): the step captured once and replayed per token gives the bridge's output,
    and the capture does not fall back."""
    import warnings

    from headsup_lens import load_model

    from ..conftest import build_family_dir, build_gpt2_dir, build_llama_dir, build_qwen2_dir

    builders = {"llama": build_llama_dir, "qwen2": build_qwen2_dir, "gpt2": build_gpt2_dir}
    if family in builders:
        folder = builders[family](tmp_path)
    else:
        folder = build_family_dir(tmp_path, family) if family != "gemma3" else None
    if folder is None:
        from headsup_lens.models import random_llama_dir

        folder = random_llama_dir(tmp_path, 0, architecture="gemma3", **WIDE_GEMMA)
    model = load_model(folder, device="cuda", dtype="float32")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*could not be captured.*")
        captured = decode_and_score(model, cuda_graph=True)
    with direct_path(False):
        reference = decode_and_score(model)
    assert_same(captured, reference)


def decoded(model, prompts, masks, max_new_tokens=4):
    """The fixed-shape greedy output of left-padded `prompts` under per-row `masks`, and the bridge's."""
    ids, attention = left_pad(prompts, pad_id=0)
    stops = stop_token_ids(model)

    def run():
        return greedy_generate(model, ids, attention, max_new_tokens=max_new_tokens, stops=stops, mask=masks)

    with native_options(prefix_sharing=False, static_cache=True):
        fast = run()
    with direct_path(False):
        reference = run()
    assert fast.tokens == reference.tokens
    assert torch.allclose(fast.first_logits, reference.first_logits, atol=1e-4, rtol=1e-4)
    return fast


def test_decodings_of_one_bucket_share_their_buffers_and_their_step(qwen2):
    """The chunks of an evaluation (prompts of other lengths and masks, the same rows and budget) reuse
    one set of buffers and one step, captured once on a GPU: each still decodes its own prompts under
    its own gate (the gate and the prompt mask are copied in)."""
    native = native_forward(qwen2)
    assert native is not None
    native.decodings.clear()
    first = [random_tokens(qwen2, 1, n, seed=n)[0].tolist() for n in (6, 3, 8)]
    second = [random_tokens(qwen2, 1, n, seed=20 + n)[0].tolist() for n in (9, 9, 4)]
    decoded(qwen2, first, random_mask(qwen2, seed=1, p_keep=0.7, rows=3))
    assert len(native.decodings.kept) == 1
    (kept,) = native.decodings.kept.values()
    replay = kept.replay
    decoded(qwen2, second, random_mask(qwen2, seed=2, p_keep=0.5, rows=3))
    assert list(native.decodings.kept.values()) == [kept] and kept.replay is replay
    assert kept.decodings == 2 and replay.calls == 2 * 3  # 3 steps after the prompt pass, each decoding


def test_a_new_gate_layout_or_budget_gets_its_own_buffers_and_few_are_kept(qwen2):
    from headsup_lens.gates._static import KEPT

    native = native_forward(qwen2)
    assert native is not None
    native.decodings.clear()
    prompts = [random_tokens(qwen2, 1, n, seed=n)[0].tolist() for n in (5, 7)]
    decoded(qwen2, prompts, random_mask(qwen2, seed=3, rows=2))  # per-row masks
    decoded(qwen2, prompts, random_mask(qwen2, seed=3))  # one mask for every row
    decoded(qwen2, prompts, None)  # no gate
    decoded(qwen2, prompts, None, max_new_tokens=6)  # another budget
    assert len(native.decodings.kept) == 4
    layouts = [key[3] for key in native.decodings.kept]
    assert layouts[2] == (None, None, None) and layouts[0] != layouts[1]
    for n in range(KEPT + 2):
        decoded(qwen2, [p[: 3 + n] for p in prompts] * 2, None, max_new_tokens=1 + n)
    assert len(native.decodings.kept) == KEPT  # the least recently used went


def test_the_kept_decodings_are_dropped_when_the_weights_move(llama):
    """A captured step reads the weights where they were: when a weight moves (another dtype or device
    reallocates them all; here one tensor is replaced by a copy), every kept decoding is dropped and
    the next one is built anew, with the same result."""
    native = native_forward(llama)
    assert native is not None
    native.decodings.clear()
    prompts = [random_tokens(llama, 1, n, seed=n)[0].tolist() for n in (5, 7)]
    masks = random_mask(llama, seed=4, rows=2)
    decoded(llama, prompts, masks)
    (before,) = native.decodings.kept.values()
    weight = llama.original_model.lm_head.weight if hasattr(llama.original_model, "lm_head") else None
    assert weight is not None
    weight.data = weight.data.clone()
    decoded(llama, prompts, masks)
    assert before not in native.decodings.kept.values() and len(native.decodings.kept) == 1


def test_a_plain_hook_on_a_wrapped_module_decodes_with_eager_steps_and_says_so(qwen2, monkeypatch):
    """A forward hook on a Hugging Face module under the bridge: a captured step would run it at the
    capture only. Where decoding would capture (a GPU; here the decision is forced), it warns and
    runs every step eagerly, so the hook runs on every pass."""
    from headsup_lens.gates import _native
    from headsup_lens.gates._paths import raw_module

    monkeypatch.setattr(_native, "captures_decoding", lambda device: True)
    native = native_forward(qwen2)
    assert native is not None
    native.decodings.clear()
    calls = []
    handle = raw_module(qwen2.blocks[0].attn.o).register_forward_hook(lambda module, args, out: calls.append(1))
    try:
        assert native_forward(qwen2) is native  # the native pass runs the hook: it calls that module
        prompts = [random_tokens(qwen2, 1, n, seed=n)[0].tolist() for n in (5, 7)]
        with pytest.warns(RuntimeWarning, match=r"plain PyTorch hooks on .*o_proj.*eager steps"):
            decoded(qwen2, prompts, None)
    finally:
        handle.remove()
    (kept,) = native.decodings.kept.values()
    assert not kept.graph and not kept.replay.enabled
    assert len(calls) >= 4  # the prompt pass and 3 steps (the bridge's reference run adds its own)


def test_no_host_read_comes_before_the_first_decoding_step(llama, monkeypatch):
    """The prompt pass's logits are read back after decoding, with the tokens: the host queues the
    decoding steps first instead of waiting for the prompt pass."""
    from headsup_lens.gates._static import StaticDecoding

    ids, attention = left_pad([random_tokens(llama, 1, n, seed=n)[0].tolist() for n in (5, 7)], pad_id=0)
    step = StaticDecoding._step
    with native_options(prefix_sharing=False, static_cache=True, check_every=100), host_reads(monkeypatch) as reads:
        monkeypatch.setattr(StaticDecoding, "_step", lambda self: (reads.append("step"), step(self)))
        greedy_generate(llama, ids, attention, max_new_tokens=4, stops=set())
    # Before the steps: only the host's look at its own padding mask (is the chunk padded at all?).
    assert reads[:4] == ["__bool__", "step", "step", "step"] and "cpu" in reads[4:]


@CUDA
def test_on_a_gpu_decodings_of_one_bucket_replay_one_capture_with_their_own_inputs(tmp_path):
    """On a GPU (fp32): chunks of other prompts and masks in one bucket replay the step captured at
    the first, each giving the bridge's output: the gate, the prompt mask and the stop tokens reach
    the graph through the buffers it reads."""
    import warnings

    from headsup_lens import load_model

    from ..conftest import build_qwen2_dir

    model = load_model(build_qwen2_dir(tmp_path), device="cuda", dtype="float32")
    native = native_forward(model)
    assert native is not None
    chunks = [
        ([random_tokens(model, 1, n, seed=n)[0].tolist() for n in (6, 3, 8)], random_mask(model, seed=1, rows=3)),
        ([random_tokens(model, 1, n, seed=9 + n)[0].tolist() for n in (9, 9, 4)], random_mask(model, seed=2, rows=3)),
        ([random_tokens(model, 1, n, seed=20 + n)[0].tolist() for n in (2, 7, 5)], random_mask(model, seed=3, rows=3)),
    ]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*could not be captured.*")
        for prompts, masks in chunks:
            ids, attention = left_pad(prompts, pad_id=0)
            stops = stop_token_ids(model)

            def run(ids=ids, attention=attention, masks=masks, stops=stops):
                return greedy_generate(model, ids, attention, max_new_tokens=6, stops=stops, mask=masks.cuda())

            with native_options(prefix_sharing=False):
                fast = run()
            with direct_path(False):
                reference = run()
            assert fast.tokens == reference.tokens
            assert torch.allclose(fast.first_logits, reference.first_logits, atol=1e-4, rtol=1e-4)
    (kept,) = native.decodings.kept.values()
    assert kept.decodings == 3 and kept.replay.graph is not None
