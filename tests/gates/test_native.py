"""The native forward pass (each Hugging Face model's own code, the gate at its output projection's
input) against the bridge's hook points (the gate at hook_z), on every architecture family:
same logits, mask gradients and greedy continuations, in fp32."""

import contextlib

import pytest
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

from headsup_lens import load_model
from headsup_lens.data import collate
from headsup_lens.gates import direct_path, gate_hooks, native_options, value_gate
from headsup_lens.gates._native import native_forward
from headsup_lens.gates._paths import GateSpec
from headsup_lens.models import left_pad, random_llama_dir, stop_token_ids
from headsup_lens.objective import answer_logits, answer_nll, greedy_generate

from ..conftest import FAMILIES, FAMILY_SETTINGS, random_mask, random_tokens

BUILT_IN = ("llama", "qwen2", "gpt2")


@pytest.fixture(params=[*BUILT_IN, *FAMILIES])
def model(request, family_model):
    """Llama, Qwen2, GPT-2, then each of `conftest.FAMILIES` (Mistral, Qwen3, Gemma-3, Phi-3)."""
    if request.param in BUILT_IN:
        return request.getfixturevalue(request.param)
    return family_model(request.param)


def both(fn):
    """`fn()` through the native forward pass (no prefix sharing), then through the bridge's hooks."""
    with direct_path(True), native_options(prefix_sharing=False):
        fast = fn()
    with direct_path(False):
        reference = fn()
    return fast, reference


def right_padded(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = [(5, 2), (3, 3), (7, 1), (4, 2)]
    rows = [
        (torch.randint(4, model.cfg.d_vocab, (p,), generator=generator).tolist(), [int(t) for t in range(4, 4 + a)])
        for p, a in lengths
    ]
    return collate(rows, pad_id=0)


def test_native_forward_serves_every_family_and_steps_aside(model):
    assert native_forward(model) is not None
    with direct_path(False):
        assert native_forward(model) is None
    with value_gate(model, random_mask(model)):  # any hook on the model: only the bridge runs it
        assert native_forward(model) is None


def test_the_bridge_is_restored_after_a_native_pass(model):
    """The native pass swaps the bridge's components out for the modules they wrap, and back."""
    before = dict(model.original_model.named_modules())
    with native_options(prefix_sharing=False):
        greedy_generate(model, random_tokens(model, 2, 5), max_new_tokens=2, stops=set(), mask=random_mask(model))
    after = dict(model.original_model.named_modules())
    assert before.keys() == after.keys() and all(before[k] is after[k] for k in before)
    assert model.original_model.config._attn_implementation == "eager"


@pytest.mark.parametrize("gate", ["none", "per_row", "alpha", "mean", "mlp"])
def test_answer_logits_equal_the_hook_z_gate(model, gate):
    batch = right_padded(model)
    n_layers, n_heads, d_head = model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head
    options = {
        "none": dict(mask=None),
        "per_row": dict(mask=random_mask(model, seed=2, rows=4)),
        "alpha": dict(mask=random_mask(model, seed=3, rows=4), alpha=0.25),
        "mean": dict(mask=random_mask(model, seed=4), mean=torch.randn(n_layers, n_heads, d_head)),
        "mlp": dict(mask=random_mask(model, seed=5), mlp=torch.tensor([1.0, 0.0] * (n_layers // 2))),
    }[gate]
    hooks = gate_hooks(model, options.pop("mask"), **options)

    def logits():
        with torch.no_grad():
            return answer_logits(model, batch, hooks)[0]

    fast, reference = both(logits)
    assert torch.allclose(fast, reference, atol=1e-4, rtol=1e-4)


def mask_gradient(model, batch):
    """The gradient of `answer_nll`'s sum (what `train_mask` differentiates) in per-row soft masks."""
    soft = torch.full((batch.input_ids.shape[0], model.cfg.n_layers, model.cfg.n_heads), 0.7, requires_grad=True)
    nll, _ = answer_nll(model, batch, gate_hooks(model, soft))
    nll.sum().backward()
    return soft.grad


def test_mask_gradient_equals_the_hook_z_gate(model):
    batch = right_padded(model, seed=1)
    fast, reference = both(lambda: mask_gradient(model, batch))
    assert torch.allclose(fast, reference, atol=1e-5, rtol=1e-4)


# Calls that read a tensor back to the host (on a GPU: wait for the device).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")


@contextlib.contextmanager
def host_reads(monkeypatch):
    """The names of the `HOST_READS` calls made inside the block, in order."""
    reads: list[str] = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            reads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    try:
        yield reads
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("pack", [False, True])
def test_a_right_padded_loss_pass_reads_nothing_back(model, monkeypatch, pack):
    """With the batch's answer positions and padding known, a gated loss pass (the pass of every
    mask-training step) calls nothing that waits for the device: no mask is prepared, so
    transformers' packed-sequence check does not run. Rows longer than the tiny Gemma-3's sliding
    windows take the banded mask; the logits test above compares them with the bridge. Packed, the
    pass reads nothing either (its layout is built on the host: `test_packed`)."""
    batch = right_padded(model)  # `collate` knows its answer positions and padding from its rows
    native = native_forward(model)
    assert native is not None
    soft = torch.full((4, model.cfg.n_layers, model.cfg.n_heads), 0.7, requires_grad=True)
    with (
        direct_path(True),
        native_options(prefix_sharing=False, pack_rows=pack),  # unpacked: the GPU's default path
        host_reads(monkeypatch) as reads,
    ):
        native.final_normed(batch, GateSpec(heads=soft)).sum().backward()
    assert reads == []
    assert soft.grad is not None and soft.grad.abs().sum() > 0


# ------------------------------------------------------------------ activation checkpointing
def checkpointed_gradients(model, batch, checkpoint: bool) -> tuple[Tensor, Tensor, list[int]]:
    """Gradients of per-row head and MLP gates of one loss pass, and how often the first and the last
    layer's output projections ran (twice where the backward pass ran the layers again)."""
    n_layers, n_heads, rows = model.cfg.n_layers, model.cfg.n_heads, batch.input_ids.shape[0]
    heads = torch.rand(rows, n_layers, n_heads, generator=torch.Generator().manual_seed(1)).requires_grad_()
    mlp = torch.rand(rows, n_layers, generator=torch.Generator().manual_seed(2)).requires_grad_()
    native = native_forward(model)
    assert native is not None
    runs = [0, 0]

    def count(i):
        return lambda module, args: runs.__setitem__(i, runs[i] + 1)

    handles = [native.projections[layer].register_forward_pre_hook(count(i)) for i, layer in enumerate((0, -1))]
    try:
        nll, _ = answer_nll(model, batch, gate_hooks(model, heads, mlp=mlp), checkpoint=checkpoint)
        nll.sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    assert heads.grad is not None and mlp.grad is not None
    return heads.grad, mlp.grad, runs


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "padded"])
def test_activation_checkpointing_gives_the_same_gradients(model, pack):
    """Every layer runs again in the backward pass, inside the same gates, attention function,
    packing and last layer's cut, and the bridge is back once it is done."""
    batch = right_padded(model, seed=1)
    before = dict(model.original_model.named_modules())
    with direct_path(True), native_options(pack_rows=pack):
        checkpointed_gradients(model, batch, checkpoint=False)  # the first pass checks the read-out once
        heads, mlp, runs = checkpointed_gradients(model, batch, checkpoint=False)
        heads_again, mlp_again, runs_again = checkpointed_gradients(model, batch, checkpoint=True)
    assert (runs, runs_again) == ([1, 1], [2, 2])
    assert heads.abs().sum() > 0 and mlp.abs().sum() > 0
    torch.testing.assert_close(heads_again, heads, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(mlp_again, mlp, atol=1e-6, rtol=1e-5)
    assert dict(model.original_model.named_modules()) == before


def test_activation_checkpointing_replays_dropout_in_training_mode(tmp_path):
    """A model put in training mode draws dropout masks: the backward pass runs each layer again with
    the generator's state of the pass, so the gradients are those of the pass without checkpointing."""
    model = load_model(random_llama_dir(tmp_path, 0, architecture="llama"), device="cpu", dtype="float32")
    for block in model.blocks:
        block.attn.original_component.attention_dropout = 0.5
    model.train()
    batch = right_padded(model, seed=1)
    with direct_path(True), native_options(pack_rows=False):
        checkpointed_gradients(model, batch, checkpoint=False)  # the first pass checks the read-out once
        torch.manual_seed(0)
        heads, mlp, _ = checkpointed_gradients(model, batch, checkpoint=False)
        torch.manual_seed(0)
        heads_again, mlp_again, _ = checkpointed_gradients(model, batch, checkpoint=True)
        torch.manual_seed(1)
        heads_other, _, _ = checkpointed_gradients(model, batch, checkpoint=False)
    assert not torch.allclose(heads_other, heads, atol=1e-4)  # the dropout draws matter
    torch.testing.assert_close(heads_again, heads, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(mlp_again, mlp, atol=1e-6, rtol=1e-5)


def test_a_layer_wrapped_by_another_library_keeps_its_wrapper(llama):
    """A `forward` another library set on a layer (accelerate's device hooks do) runs inside the
    checkpointed pass and is back on the layer afterwards."""
    native = native_forward(llama)
    assert native is not None
    layer = native.layers[0]
    calls = []
    original = layer.forward

    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    layer.forward = wrapper
    try:
        with direct_path(True):
            checkpointed_gradients(llama, right_padded(llama, seed=1), checkpoint=True)
        assert layer.__dict__["forward"] is wrapper
        assert len(calls) == 2  # the pass, and again in the backward pass
    finally:
        del layer.__dict__["forward"]


def forward_bytes(fn) -> int:
    """Bytes that `fn()` allocates and leaves alive (what a loss pass keeps for its backward pass,
    and its output), from the profiler's memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    alive = sum(e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    del out
    return alive


@pytest.mark.parametrize("family", ["gemma3", "phi3"])
def test_activation_checkpointing_keeps_less_for_the_backward_pass(family, tmp_path):
    """A deeper model of a family beyond Llama and Qwen2: with checkpointing, a loss pass keeps under
    a third of what it keeps without (each layer's input instead of its activations)."""
    folder = random_llama_dir(
        tmp_path, 0, architecture=family, **dict(FAMILY_SETTINGS[family], num_hidden_layers=8, layer_types=None)
    )
    model = load_model(folder, device="cpu", dtype="float32")
    batch = right_padded(model, seed=1)
    soft = torch.full((4, model.cfg.n_layers, model.cfg.n_heads), 0.7, requires_grad=True)
    kept = {}
    for checkpoint in (False, True):
        with direct_path(True), native_options(pack_rows=False):
            kept[checkpoint] = forward_bytes(
                lambda: answer_nll(model, batch, gate_hooks(model, soft), checkpoint=checkpoint)[0]
            )
    assert 0 < kept[True] < kept[False] / 3, kept


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("family", ["llama", "gemma3", "phi3"])
def test_activation_checkpointing_on_a_gpu_gives_the_same_gradients(family, tmp_path):
    """On a GPU (fp32, rows right-padded, not packed): the same gradients with checkpointing."""
    settings = {} if family == "llama" else FAMILY_SETTINGS[family]
    model = load_model(random_llama_dir(tmp_path, 0, architecture=family, **settings), device="cuda", dtype="float32")
    batch = right_padded(model, seed=1).to("cuda")
    with direct_path(True):
        heads, mlp, _ = checkpointed_gradients(model, batch, checkpoint=False)
        heads_again, mlp_again, runs = checkpointed_gradients(model, batch, checkpoint=True)
    assert runs == [2, 2]
    torch.testing.assert_close(heads_again, heads, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mlp_again, mlp, atol=1e-5, rtol=1e-4)


def test_a_checkpointed_backward_inside_another_gated_pass_is_refused(llama):
    """Run again there, a layer would take the other pass's gates: refused rather than wrong."""
    batch = right_padded(llama)
    native = native_forward(llama)
    assert native is not None
    soft = torch.full((4, llama.cfg.n_layers, llama.cfg.n_heads), 0.7, requires_grad=True)
    with direct_path(True):
        out = native.final_normed(batch, GateSpec(heads=soft), checkpoint=True)
        with native.running(GateSpec(heads=soft.detach() * 0)), pytest.raises(RuntimeError, match="another gated"):
            out.sum().backward()


def test_activation_checkpointing_needs_the_native_forward_pass(llama):
    batch = right_padded(llama)
    with pytest.raises(ValueError, match="native forward pass"):
        answer_nll(llama, batch, gate_hooks(llama, random_mask(llama), gate="query"), checkpoint=True)


@pytest.mark.parametrize("check_every", [1, 3])
def test_left_padded_prompts_and_per_row_masks_decode_as_the_bridge(model, check_every, monkeypatch):
    native = native_forward(model)
    assert native is not None
    recorded = []  # the native pass records the layers (no fallback to the bridge)
    greedy = type(native).greedy
    monkeypatch.setattr(type(native), "greedy", lambda self, job, **kw: recorded.append(kw) or greedy(self, job, **kw))
    prompts = [random_tokens(model, 1, n, seed=n)[0].tolist() for n in (6, 3, 8, 5)]
    ids, attention = left_pad(prompts, pad_id=0)
    masks = random_mask(model, seed=7, p_keep=0.8, rows=4)
    # The most frequent first tokens stop some rows early: rows leave the batch at a check.
    stops = stop_token_ids(model) | set(random_tokens(model, 1, 3, seed=9)[0].tolist())

    def decode():
        with native_options(check_every=check_every):
            return greedy_generate(model, ids, attention, max_new_tokens=7, stops=stops, mask=masks, record_layers=True)

    fast, reference = both(decode)
    assert recorded == [{"record_layers": True}]
    assert fast.tokens == reference.tokens
    assert torch.allclose(fast.first_logits, reference.first_logits, atol=1e-4, rtol=1e-4)
    # Every layer's attention and block output at the last prompt position (`hook_attn_out`, `hook_resid_post`).
    assert fast.layers is not None and reference.layers is not None
    assert sorted(fast.layers) == sorted(reference.layers) and len(fast.layers) == 2 * model.cfg.n_layers
    for name in fast.layers:
        torch.testing.assert_close(fast.layers[name], reference.layers[name], atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("path", ["native", "direct", "bridge"])
def test_answers_scored_from_the_prompt_pass_equal_their_own_loss_pass(model, path):
    """Answers scored with the decoding (from the prompt pass's keys and values on the native and
    direct passes, by a separate pass through the bridge) equal `answer_nll` of (unpadded prompt,
    answer) rows through the bridge's hooks, token by token, and leave the continuations as they
    were. Rows are longer than the tiny Gemma-3's sliding windows, answers of 1 to 4 tokens; the
    direct pass serves Llama and Qwen2 (the other families take the native pass there)."""
    prompts = [random_tokens(model, 1, n, seed=n)[0].tolist() for n in (6, 3, 8, 5)]
    answers = [random_tokens(model, 1, n, seed=10 + n)[0].tolist() for n in (2, 1, 4, 3)]
    ids, attention = left_pad(prompts, pad_id=0)
    masks = random_mask(model, seed=11, p_keep=0.8, rows=4)
    stops = stop_token_ids(model)

    def decode(scored):
        return greedy_generate(
            model, ids, attention, max_new_tokens=5, stops=stops, mask=masks, answers=answers if scored else None
        )

    with direct_path(path != "bridge"), native_options(prefix_sharing=path == "direct"):
        out, plain = decode(True), decode(False)
    with direct_path(False), torch.no_grad():
        nll, rows = answer_nll(model, collate(list(zip(prompts, answers)), pad_id=0), gate_hooks(model, masks))
    assert out.tokens == plain.tokens
    assert out.answer_nll is not None and out.answer_nll.shape == (4, 4)
    expected = torch.zeros(4, 4)
    expected[rows, torch.cat([torch.arange(len(a)) for a in answers])] = nll
    assert torch.allclose(out.answer_nll, expected, atol=1e-4, rtol=1e-4)


def test_answers_of_rows_sharing_a_prompt_are_scored_as_their_own_passes(llama):
    """On the direct pass rows with one prompt share layers until their gates differ: each row's
    answer is still scored after its own keys and values (the group of the row at every layer)."""
    prompt = random_tokens(llama, 1, 7, seed=4)[0].tolist()
    masks = random_mask(llama, seed=12, p_keep=0.7, rows=3)
    masks[1] = masks[0]  # two rows share every layer, the third splits off where its gates differ
    answers = [random_tokens(llama, 1, n, seed=20 + n)[0].tolist() for n in (3, 2, 4)]
    ids = torch.tensor([prompt] * 3)
    with native_options(prefix_sharing=True):
        out = greedy_generate(llama, ids, max_new_tokens=3, stops=set(), mask=masks, answers=answers)
    with direct_path(False), torch.no_grad():
        nll, rows = answer_nll(llama, collate([(prompt, a) for a in answers], pad_id=0), gate_hooks(llama, masks))
    assert out.answer_nll is not None
    expected = torch.zeros(3, 4)
    expected[rows, torch.cat([torch.arange(len(a)) for a in answers])] = nll
    assert torch.allclose(out.answer_nll, expected, atol=1e-4, rtol=1e-4)


def test_a_sweep_like_batch_decodes_each_row_as_its_own_pass(llama):
    """One prompt, per-row masks, rows stopping at different tokens: each row equals its own
    unbatched pass through the bridge (the sequential reference)."""
    prompt = random_tokens(llama, 1, 9, seed=3)
    masks = random_mask(llama, seed=8, p_keep=0.7, rows=6)
    stops = stop_token_ids(llama)
    with native_options(prefix_sharing=False, check_every=2):
        out = greedy_generate(llama, prompt.expand(6, -1), max_new_tokens=6, stops=stops, mask=masks)
    with direct_path(False):
        for row in range(6):
            alone = greedy_generate(llama, prompt, max_new_tokens=6, stops=stops, mask=masks[row])
            assert out.tokens[row] == alone.tokens[0]
            assert torch.allclose(out.first_logits[row], alone.first_logits[0], atol=1e-4, rtol=1e-4)


def test_static_cache_decodes_as_the_dynamic_one(llama):
    prompt = random_tokens(llama, 3, 6, seed=5)
    masks = random_mask(llama, seed=9, rows=3)
    with native_options(prefix_sharing=False):
        dynamic = greedy_generate(llama, prompt, max_new_tokens=5, stops=set(), mask=masks, record_layers=True)
        with native_options(static_cache=True):
            static = greedy_generate(llama, prompt, max_new_tokens=5, stops=set(), mask=masks, record_layers=True)
    assert static.tokens == dynamic.tokens
    assert static.layers is not None and dynamic.layers is not None and sorted(static.layers) == sorted(dynamic.layers)
    for name in static.layers:
        torch.testing.assert_close(static.layers[name], dynamic.layers[name], atol=1e-5, rtol=1e-5, msg=name)


def test_check_every_must_be_positive():
    with pytest.raises(ValueError, match="check_every"), native_options(check_every=0):
        pass


def test_a_failing_compiled_step_falls_back_to_eager_decoding(llama, monkeypatch):
    import headsup_lens.gates._native as native

    def broken(fn, **kwargs):
        def compiled(*args):
            raise RuntimeError("no compiler here")

        return compiled

    prompt = random_tokens(llama, 2, 6, seed=6)
    masks = random_mask(llama, seed=10, rows=2)
    with native_options(prefix_sharing=False):
        eager = greedy_generate(llama, prompt, max_new_tokens=4, stops=set(), mask=masks)
        monkeypatch.setattr(native.torch, "compile", broken)
        native_forward(llama)._compiled = None
        with native_options(compile=True), pytest.warns(RuntimeWarning, match="decoding eagerly"):
            fallen = greedy_generate(llama, prompt, max_new_tokens=4, stops=set(), mask=masks)
    assert fallen.tokens == eager.tokens
    assert native_forward(llama)._compiled is False
    native_forward(llama)._compiled = None  # later tests of this session's model compile afresh


# ------------------------------------------------------------------ what the stand-ins refuse
@pytest.mark.parametrize("kind", ["forward", "forward_pre", "backward"])
def test_a_plain_hook_on_a_bridge_component_leaves_the_work_to_the_bridge(tmp_path, kind):
    """The native and direct passes swap the bridge's components for the modules they wrap: a plain
    PyTorch hook on a component would never run there, so both step aside and the bridge runs it.
    A hook on a wrapped Hugging Face module runs on the native pass, which calls that module; the
    direct pass computes from the weights and calls none, so it steps aside. A global module hook
    likewise. Once the hook is removed both serve again."""
    from torch.nn.modules import module as torch_module

    from headsup_lens.gates._fast._direct import direct_forward
    from headsup_lens.gates._paths import module_hooks, raw_module

    model = load_model(random_llama_dir(tmp_path, 0, architecture="llama"), device="cpu", dtype="float32")
    assert native_forward(model) is not None and direct_forward(model) is not None
    register = {
        "forward": lambda m: m.register_forward_hook(lambda module, args, out: None),
        "forward_pre": lambda m: m.register_forward_pre_hook(lambda module, args: None),
        "backward": lambda m: m.register_full_backward_hook(lambda module, grad_in, grad_out: None),
    }[kind]
    handle = register(model.blocks[0].attn)
    try:
        assert module_hooks(model).components == ["model.layers.0._original_component.self_attn"]
        assert native_forward(model) is None and direct_forward(model) is None
    finally:
        handle.remove()
    handle = register(raw_module(model.blocks[1].mlp))
    try:
        assert module_hooks(model).elsewhere() == ["model.layers.1._original_component.mlp._original_component"]
        assert native_forward(model) is not None and direct_forward(model) is None
    finally:
        handle.remove()
    handle = torch_module.register_module_forward_hook(lambda module, args, out: None)
    try:
        assert module_hooks(model).elsewhere() == ["every module (forward_hooks)"]
        assert native_forward(model) is not None and direct_forward(model) is None
    finally:
        handle.remove()
    assert native_forward(model) is not None and direct_forward(model) is not None


def test_the_bookkeeping_hooks_of_transformers_and_the_bridge_are_not_counted(llama):
    """transformers installs output-capturing hooks on a model's layers at its first forward pass, and
    the bridge wires hooks of its own: neither is someone's hook that a capture would betray."""
    from headsup_lens.gates._paths import module_hooks

    greedy_generate(llama, random_tokens(llama, 2, 5), max_new_tokens=2, stops=set())
    with direct_path(False):
        greedy_generate(llama, random_tokens(llama, 2, 5), max_new_tokens=2, stops=set())
    from transformer_lens.hook_points import HookPoint

    installed = [m for m in llama.original_model.modules() if m._forward_hooks and not isinstance(m, HookPoint)]
    assert installed  # transformers' own, on the decoder layers
    hooked = module_hooks(llama)
    assert hooked.components == [] and hooked.elsewhere() == []


def test_chunked_attention_refuses_the_mask_free_pass_and_keeps_its_mask(tmp_path):
    """Loss passes over right-padded rows run causal attention built from the shapes alone; a model
    whose attention is chunked (`attention_chunk_size`, Llama-4) would lose its chunks there. The
    attention function refuses it with a clear error, and the native pass gives such a model its mask
    (transformers builds the chunked mask): the same logits as the bridge."""
    from transformers import AttentionInterface

    from headsup_lens.gates._attention import CAUSAL_ATTENTION, PACKED_ATTENTION
    from headsup_lens.gates._paths import raw_module

    model = load_model(random_llama_dir(tmp_path, 0, architecture="llama"), device="cpu", dtype="float32")
    model.original_model.config.attention_chunk_size = 4
    native = native_forward(model)
    assert native is not None and native.refusal == "its attention is chunked (attention_chunk_size=4)"
    attention = raw_module(model.blocks[0].attn)
    q = torch.zeros(1, model.cfg.n_heads, 3, model.cfg.d_head)
    for name in (CAUSAL_ATTENTION, PACKED_ATTENTION):
        with pytest.raises(
            ValueError, match=r"mask-free causal attention .* cannot serve LlamaAttention: its attention is chunked"
        ):
            AttentionInterface()[name](attention, q, q, q, None)
    batch = right_padded(model)
    with torch.no_grad():
        fast, reference = both(lambda: answer_logits(model, batch, gate_hooks(model, random_mask(model, rows=4)))[0])
    assert torch.allclose(fast, reference, atol=1e-4, rtol=1e-4)


def test_bidirectional_attention_refuses_the_mask_free_pass(tmp_path):
    """A model whose attention is not causal (EmbeddingGemma's `use_bidirectional_attention`, an
    attention module with `is_causal = False`): the mask-free attention refuses it, and greedy
    decoding does not take the fixed-shape path (its slot mask is causal)."""
    from transformers import AttentionInterface

    from headsup_lens.gates._attention import CAUSAL_ATTENTION
    from headsup_lens.gates._paths import raw_module

    model = load_model(random_llama_dir(tmp_path, 0, architecture="llama"), device="cpu", dtype="float32")
    for block in model.blocks:
        raw_module(block.attn).is_causal = False
    native = native_forward(model)
    assert native is not None and native.refusal == "its attention is bidirectional (not causal)"
    q = torch.zeros(1, model.cfg.n_heads, 3, model.cfg.d_head)
    with pytest.raises(ValueError, match="its attention is bidirectional"):
        AttentionInterface()[CAUSAL_ATTENTION](raw_module(model.blocks[0].attn), q, q, q, None)
    assert native.bidirectional
