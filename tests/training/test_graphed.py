"""Mask training's fixed-shape step (`TrainConfig(cuda_graph=True)`, the default on a GPU where it
serves): on the CPU it runs eagerly and must train the mask of the default length-grouped step, on
every family, read nothing back after its first call (what a CUDA graph captures), and refuse what it
does not serve. On a GPU the captured step must equal the same step run eagerly."""

from __future__ import annotations

import warnings

import pytest
import torch

from headsup_lens import load_model
from headsup_lens.data import Task
from headsup_lens.gates import direct_path, native_options
from headsup_lens.gates._paths import raw_module
from headsup_lens.training import TrainConfig, train_mask, train_masks

from ..conftest import FAMILIES, build_family_dir
from ..gates.test_native import BUILT_IN, host_reads

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
# Every logit starts at 0.5 (init_std 0): a trained mask differs from that; the noise varies the masks.
QUICK = dict(steps=5, lr=0.1, min_lr=1e-3, init_mean=0.5, init_std=0.0, checkpoint_every=0, progress=False)
WORDS = [
    "cold",
    "up the hill and far away",
    "good",
    "a girl in a red coat",
    "yes",
    "hot soup",
    "no one came back from the mill",
]


def mixed_task(name: str = "mixed") -> Task:
    """Rows of very different lengths and answers of several tokens: real padding and fillers."""
    return Task.from_pairs(name, [(w, w.split()[-1]) for w in WORDS] * 3, n_eval=0)


@pytest.fixture(params=[*BUILT_IN, *FAMILIES])
def model(request, family_model):
    """Llama, Qwen2, GPT-2, then each of `conftest.FAMILIES` (Mistral, Qwen3, Gemma-3, Phi-3)."""
    if request.param in BUILT_IN:
        return request.getfixturevalue(request.param)
    return family_model(request.param)


def assert_same_training(a, b) -> None:
    torch.testing.assert_close(a.mask.logits, b.mask.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        torch.tensor(a.history.loss.values), torch.tensor(b.history.loss.values), atol=1e-5, rtol=1e-5
    )


def test_the_fixed_shape_step_trains_the_mask_of_the_grouped_passes(model):
    """Every row padded to the run's longest and the answers to a fixed count (fillers weigh 0): the
    same logits and losses as the default step, whose passes group rows by length."""
    config = TrainConfig(**QUICK, batch_size=8)
    grouped = train_mask(model, mixed_task(), config)
    fixed = train_mask(model, mixed_task(), config.replace(cuda_graph=True))
    assert_same_training(fixed, grouped)
    assert not torch.equal(fixed.mask.logits, torch.full_like(fixed.mask.logits, 0.5))  # it trained


def test_the_fixed_shape_step_serves_several_tasks_mlp_gates_and_the_size_penalty(qwen2):
    config = TrainConfig(**QUICK, batch_size=4, mlp=True, size_penalty=0.01)
    tasks = [mixed_task("a"), Task.from_pairs("b", [(w, w[::-1]) for w in WORDS] * 2, n_eval=0)]
    grouped = train_masks(qwen2, tasks, config)
    fixed = train_masks(qwen2, tasks, config.replace(cuda_graph=True))
    for name in ("a", "b"):
        assert_same_training(fixed[name], grouped[name])
        assert fixed[name].mask.metadata["mlp_logits"] == pytest.approx(grouped[name].mask.metadata["mlp_logits"])


@pytest.mark.parametrize("pack", [None, True], ids=["padded", "packed"])
def test_the_fixed_shape_step_reads_nothing_back_after_its_first_call(qwen2, monkeypatch, pack):
    """What a CUDA graph captures never waits for the device: after the first call (which checks the
    model's read-out once), the step's forward and backward read nothing back, and every step has the
    same shapes: its rows right-padded to the longest (the default, also where loss passes pack theirs,
    as on the CPU), or on request (`native_options(pack_rows=True)`) packed to the run's token budget,
    filler tokens included (`packed_budget`)."""
    from headsup_lens.data import encode_pairs
    from headsup_lens.training import _graphed

    reads_per_call: list[list[str]] = []
    original = _graphed.FixedStep._compute

    def compute(self):
        if not reads_per_call:
            reads_per_call.append([])
            original(self)
            return
        with pytest.MonkeyPatch.context() as patch, host_reads(patch) as reads:
            original(self)
        reads_per_call.append(list(reads))

    monkeypatch.setattr(_graphed.FixedStep, "_compute", compute)
    shapes: list[tuple[int, ...]] = []
    projection = raw_module(qwen2.blocks[0].attn.o)
    handle = projection.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape[:-1])))
    config = TrainConfig(**{**QUICK, "steps": 3, "batch_size": 8}, cuda_graph=True)
    try:
        with direct_path(True), native_options(pack_rows=True if pack else None):
            train_mask(qwen2, mixed_task(), config)
    finally:
        handle.remove()
    assert reads_per_call == [[], [], []]
    steps = shapes[-3:]  # (the first call's read-out check runs a one-row pass before them)
    assert len(set(steps)) == 1
    rows = encode_pairs(qwen2, list(mixed_task().pairs))
    if pack:  # one sequence of the budget: the 8 rows that need the most tokens
        needs = sorted((len(p) + len(a) - 1 for p, a in rows), reverse=True)
        assert steps[0] == (1, sum(needs[:8])) == (1, _graphed.packed_budget([rows], torch.zeros(8, dtype=torch.long)))
    else:  # 8 rows padded to the longest
        assert steps[0] == (8, max(len(p) + len(a) for p, a in rows))


def test_the_packed_fixed_step_trains_the_mask_of_the_grouped_passes(model):
    """Packed to the run's token budget, filler tokens in rows of their own: the same logits and
    losses as the default step (rows of other lengths in every batch, answers of several tokens)."""
    config = TrainConfig(**QUICK, batch_size=8)
    grouped = train_mask(model, mixed_task(), config)
    with native_options(pack_rows=True):
        packed = train_mask(model, mixed_task(), config.replace(cuda_graph=True))
    assert_same_training(packed, grouped)


def test_a_step_is_staged_through_one_persistent_buffer(qwen2):
    """A step's inputs reach the device through one host buffer per dtype, kept for the run (pinned on
    a GPU), in two halves used in turn; the tensors the step reads keep their addresses."""
    from headsup_lens.data import encode_pairs
    from headsup_lens.models import pad_token_id
    from headsup_lens.training._graphed import FixedStep
    from headsup_lens.training._gumbel import left_tail_gumbel

    rows = encode_pairs(qwen2, list(mixed_task().pairs))
    logits = torch.zeros(1, qwen2.cfg.n_layers, qwen2.cfg.n_heads, requires_grad=True)
    step = FixedStep(qwen2, torch.zeros(4, dtype=torch.long), [rows], [logits], pad_token_id(qwen2), graph=False)
    staging = step.staging
    read = [t.data_ptr() for t in (step.batch.input_ids, *step.batch.answers(), step.noise[0], step.tau)]
    halves = [staging.host(), None]
    generator = torch.Generator().manual_seed(0)
    sent = []
    for k in range(3):
        noise = left_tail_gumbel((4, qwen2.cfg.n_layers, qwen2.cfg.n_heads), generator)
        step(rows[k : k + 4], [noise], 2.0, torch.tensor([float(sum(len(a) for _, a in rows[k : k + 4]))]))
        sent.append(staging.host()["noise0"])
        assert torch.equal(step.noise[0], noise)
        assert [t.data_ptr() for t in (step.batch.input_ids, *step.batch.answers(), step.noise[0], step.tau)] == read
    assert len(staging._device_flat) == 2  # int64 and float32: one copy each per step
    assert sent[0] is sent[2] and sent[0] is not sent[1] and halves[0]["noise0"] is sent[1]


def test_padding_far_beyond_the_rows_warns_before_training(qwen2):
    """One pair much longer than the rest: padding every row to it would compute several times the
    rows' tokens, which the default step's length groups avoid; said before the first step."""
    long = " ".join(["the old mill by the river"] * 8)
    task = Task.from_pairs("skewed", [(w, w.split()[-1]) for w in ["cold", "good", "yes", "hot", long] * 4], n_eval=0)
    with pytest.warns(UserWarning, match=r"cuda_graph pads every row to the longest training row \((\d+) tokens"):
        train_mask(qwen2, task, TrainConfig(**{**QUICK, "steps": 1}, cuda_graph=True))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="cuda_graph pads")
        train_mask(qwen2, mixed_task(), TrainConfig(**{**QUICK, "steps": 1}, cuda_graph=True))


def test_cuda_graph_is_refused_where_it_does_not_serve():
    """When the config is built, before any work: the query gate and activation checkpointing."""
    for bad in (dict(gate="query"), dict(activation_checkpointing=True)):
        with pytest.raises(ValueError, match="cuda_graph needs the value gate and no activation checkpointing"):
            TrainConfig(**QUICK, cuda_graph=True, **bad)
    assert "cuda_graph" not in TrainConfig(cuda_graph=True).recipe()  # how it runs, not what it computes


def test_by_default_the_step_is_captured_on_a_gpu_where_a_capture_serves(qwen2):
    """`cuda_graph=None`: on for a GPU with the value gate, no activation checkpointing, no hook on the
    model and padding that at most doubles the tokens; off on the CPU and wherever one fails; an
    explicit True or False wins. (A device is only a name here: nothing runs on it.)"""
    from headsup_lens.data import encode_pairs
    from headsup_lens.training._graphed import captures_step

    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    rows = [encode_pairs(qwen2, list(mixed_task().pairs))]
    long = " ".join(["the old mill by the river"] * 8)
    skewed = [encode_pairs(qwen2, [(w, w.split()[-1]) for w in ["cold", "good", "yes", "hot", long] * 4])]
    default = TrainConfig(**QUICK)
    assert default.cuda_graph is None
    assert captures_step(qwen2, default, gpu, rows)
    assert not captures_step(qwen2, default, cpu, rows)
    assert not captures_step(qwen2, default.replace(gate="query"), gpu, rows)
    assert not captures_step(qwen2, default.replace(activation_checkpointing=True), gpu, rows)
    assert not captures_step(qwen2, default, gpu, skewed)
    assert captures_step(qwen2, default.replace(cuda_graph=True), gpu, skewed)  # asked for: it warns instead
    assert captures_step(qwen2, default.replace(cuda_graph=True), cpu, rows)  # the fixed-shape step, run eagerly
    assert not captures_step(qwen2, default.replace(cuda_graph=False), gpu, rows)
    with qwen2.hooks(fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: z)]):
        assert not captures_step(qwen2, default, gpu, rows)
    assert captures_step(qwen2, default, gpu, rows)  # the hook is gone again
    # A plain PyTorch hook on a wrapped Hugging Face module (or on every module) would run at the
    # capture only as well.
    handle = raw_module(qwen2.blocks[1].mlp).register_forward_pre_hook(lambda module, args: None)
    try:
        assert not captures_step(qwen2, default, gpu, rows)
    finally:
        handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: None)
    try:
        assert not captures_step(qwen2, default, gpu, rows)
    finally:
        handle.remove()
    assert captures_step(qwen2, default, gpu, rows)


@CUDA
@pytest.mark.parametrize("family", ["llama", *FAMILIES])
def test_the_captured_training_step_on_a_gpu_equals_the_eager_one(family, tmp_path):
    """On a GPU (fp32): the step captured once and replayed gives the mask and losses of the same
    fixed-shape step run eagerly and of the default step, and the capture does not fall back."""
    from headsup_lens.training import _graphed

    from ..conftest import build_llama_dir

    folder = build_llama_dir(tmp_path) if family == "llama" else build_family_dir(tmp_path, family)
    model = load_model(folder, device="cuda", dtype="float32")
    config = TrainConfig(**QUICK, batch_size=8, cuda_graph=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*could not be captured.*")
        captured = train_mask(model, mixed_task(), config)
    original = _graphed.Replay.__init__

    def eager(self, step, enabled, what):
        original(self, step, False, what)

    _graphed.Replay.__init__ = eager  # type: ignore[method-assign]
    try:
        uncaptured = train_mask(model, mixed_task(), config)
    finally:
        _graphed.Replay.__init__ = original  # type: ignore[method-assign]
    assert_same_training(captured, uncaptured)
    assert_same_training(captured, train_mask(model, mixed_task(), config.replace(cuda_graph=False)))


@CUDA
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_on_a_gpu_the_packed_captured_step_equals_the_default_one(family, tmp_path):
    """On a GPU (fp32): the step packed to the run's token budget, captured and replayed, trains the
    mask of the default step."""
    from ..conftest import build_llama_dir

    folder = build_llama_dir(tmp_path) if family == "llama" else build_family_dir(tmp_path, family)
    model = load_model(folder, device="cuda", dtype="float32")
    config = TrainConfig(**QUICK, batch_size=8)
    with warnings.catch_warnings(), native_options(pack_rows=True):
        warnings.filterwarnings("error", message=".*could not be captured.*")
        packed = train_mask(model, mixed_task(), config.replace(cuda_graph=True))
    assert_same_training(packed, train_mask(model, mixed_task(), config.replace(cuda_graph=False)))


class _Stop(Exception):
    pass


def test_a_run_with_the_fixed_shape_step_resumes_as_if_never_stopped(qwen2, tmp_path):
    """Stopped after step 4 (its last checkpoint: step 3) and run again: the fixed-shape step, built
    anew with the optimiser state read back, ends where an uninterrupted run ends."""
    config = TrainConfig(**{**QUICK, "steps": 6, "checkpoint_every": 3}, batch_size=8, cuda_graph=True)
    reference = train_mask(qwen2, mixed_task(), config)

    def stop(end):
        if end.step == 4:
            raise _Stop

    with pytest.raises(_Stop):
        train_mask(qwen2, mixed_task(), config, out_dir=tmp_path, callbacks=[stop])
    resumed = train_mask(qwen2, mixed_task(), config, out_dir=tmp_path)
    assert resumed.history.step.tolist() == list(range(1, 7))
    assert_same_training(resumed, reference)


def test_asked_for_with_a_plain_hook_the_fixed_step_runs_eagerly_and_says_so(qwen2):
    """`cuda_graph=True` with a plain hook on a wrapped module: the step is not captured (the hook's
    Python would run at the capture only); it warns and runs the same fixed-shape step eagerly, the
    hook running every step. (Built with `graph=True` as on a GPU; nothing is captured here.)"""
    from headsup_lens.data import encode_pairs
    from headsup_lens.models import pad_token_id
    from headsup_lens.training._graphed import FixedStep

    rows = [encode_pairs(qwen2, list(mixed_task().pairs))]
    logits = torch.zeros(1, qwen2.cfg.n_layers, qwen2.cfg.n_heads, requires_grad=True)
    handle = raw_module(qwen2.blocks[0].attn.o).register_forward_hook(lambda module, args, out: None)
    try:
        with pytest.warns(RuntimeWarning, match=r"plain PyTorch hooks on .*o_proj.* mask-training step .*eagerly"):
            step = FixedStep(qwen2, torch.zeros(4, dtype=torch.long), rows, [logits], pad_token_id(qwen2), graph=True)
    finally:
        handle.remove()
    assert not step._replay.enabled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = FixedStep(qwen2, torch.zeros(4, dtype=torch.long), rows, [logits], pad_token_id(qwen2), graph=False)
    assert not step._replay.enabled


# ------------------------------------------------------------------ bf16 gradients against fp32
def plain_mask_gradient(folder, device: str, dtype: torch.dtype, rows, logits, noise, tau: float) -> torch.Tensor:
    """The mask gradient of the answer loss in plain transformers: the model's own class, every row
    right-padded with its attention mask, straight-through masks from `logits` `[1, n_layers,
    n_heads]` (one task) and per-row `noise` multiplied into each `o_proj` input by forward pre-hooks."""
    from transformers import AutoModelForCausalLM

    from headsup_lens.data import collate

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval().requires_grad_(False)
    n_heads = hf.config.num_attention_heads
    logits = logits.detach().to(device).requires_grad_(True)
    soft = torch.sigmoid((logits + noise.to(device)) / tau)
    masks = (soft >= 0.5).float() - soft.detach() + soft  # [rows, n_layers, n_heads]

    def gate(layer: int):
        def pre(module, args):
            x = args[0]
            shaped = x.unflatten(-1, (n_heads, -1)) * masks[:, layer, None, :, None].to(x.dtype)
            return (shaped.flatten(-2),)

        return pre

    handles = [block.self_attn.o_proj.register_forward_pre_hook(gate(i)) for i, block in enumerate(hf.model.layers)]
    try:
        batch = collate(rows, pad_id=hf.config.pad_token_id, device=device)
        out = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        r, positions, targets = batch.answers()
        nll = torch.nn.functional.cross_entropy(out[r, positions].float(), targets, reduction="none")
        (nll.sum() / nll.numel()).backward()
    finally:
        for handle in handles:
            handle.remove()
    assert logits.grad is not None
    return logits.grad.float().cpu()


def library_mask_gradient(
    folder, device: str, dtype: str, rows, logits, noise, tau: float, graph: bool
) -> torch.Tensor:
    """The same gradient through the library's fixed-shape step (`FixedStep`), captured as a CUDA graph
    when `graph` (called twice: the warm-up, then the capture and its replay)."""
    from headsup_lens.models import pad_token_id
    from headsup_lens.training._graphed import FixedStep

    model = load_model(folder, device=device, dtype=dtype)
    parameter = logits.detach().to(device).requires_grad_(True)
    step = FixedStep(
        model, torch.zeros(len(rows), dtype=torch.long), [rows], [parameter], pad_token_id(model), graph=graph
    )
    counts = torch.tensor([float(sum(len(answer) for _, answer in rows))], device=device)
    for _ in range(2 if graph else 1):
        step(rows, [noise], tau, counts)
    assert parameter.grad is not None
    return parameter.grad.float().cpu()


def gradient_errors(folder, device: str, graph: bool, seeds: int = 3) -> tuple[float, float]:
    """How far the bf16 mask gradient of the library's fixed-shape step and plain transformers' bf16
    gradient are from plain transformers' fp32 gradient: each one's error over every entry, summed over
    `seeds` draws of the logits and noise, relative to the reference's norm (library, plain)."""
    from headsup_lens.data import encode_pairs
    from headsup_lens.training._gumbel import left_tail_gumbel

    model = load_model(folder, device="cpu", dtype="float32")
    rows = encode_pairs(model, list(mixed_task().pairs)[:8])
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    ours = theirs = scale = 0.0
    for seed in range(seeds):
        generator = torch.Generator().manual_seed(seed)
        logits = 1.0 + 0.5 * torch.randn(1, *shape, generator=generator)  # some heads near their switch
        noise = left_tail_gumbel((len(rows), *shape), generator)
        reference = plain_mask_gradient(folder, device, torch.float32, rows, logits, noise, 1.0)
        plain = plain_mask_gradient(folder, device, torch.bfloat16, rows, logits, noise, 1.0)
        library = library_mask_gradient(folder, device, "bf16", rows, logits, noise, 1.0, graph)
        ours += float((library - reference).square().sum())
        theirs += float((plain - reference).square().sum())
        scale += float(reference.square().sum())
    return (ours / scale) ** 0.5, (theirs / scale) ** 0.5


# bf16 rounds each computation's sums in its own order; of two orders equally exact, which lands
# nearer the fp32 gradient is chance: "no worse" allows a tenth of plain's own error.
NO_WORSE = 1.1


def test_the_fixed_steps_bf16_gradient_is_no_further_from_fp32_than_plains(tmp_path):
    """On the CPU (the step run eagerly): the library's bf16 mask gradient is within plain
    transformers' own bf16 distance of the fp32 gradient; and the comparison can tell (both are off,
    a step in fp32 is not)."""
    from ..conftest import build_llama_dir

    folder = build_llama_dir(tmp_path, num_hidden_layers=3, hidden_size=128, intermediate_size=256)
    ours, theirs = gradient_errors(folder, "cpu", graph=False)
    assert theirs > 0 and ours <= NO_WORSE * theirs, (ours, theirs)


@CUDA
def test_on_a_gpu_the_captured_steps_bf16_gradient_is_no_further_from_fp32_than_plains(tmp_path):
    """On a GPU: the step captured as a CUDA graph and replayed, in bf16, against plain transformers'
    bf16 gradient, both against plain transformers' fp32 gradient, at a wider shape."""
    from ..conftest import build_llama_dir

    folder = build_llama_dir(
        tmp_path, num_hidden_layers=4, hidden_size=512, intermediate_size=1024, num_attention_heads=8
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*could not be captured.*")
        ours, theirs = gradient_errors(folder, "cuda", graph=True)
    print(f"bf16 mask gradient, relative error against fp32: library {ours:.4g}, plain transformers {theirs:.4g}")
    assert theirs > 0 and ours <= NO_WORSE * theirs, (ours, theirs)
