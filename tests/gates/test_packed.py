"""Loss passes over right-padded rows as one packed sequence (`gates._packed`): the same final-norm
outputs and mask gradients as the padded pass and the `hook_z` gate, on every architecture family
(Gemma-3 with sliding windows shorter than its rows too); the layout; the last layer's output
projection and MLP at the answer positions only."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens.data import collate
from headsup_lens.gates import direct_path, native_options
from headsup_lens.gates._native import native_forward
from headsup_lens.gates._packed import packing
from headsup_lens.gates._paths import GateSpec

from ..conftest import random_mask
from .test_native import mask_gradient
from .test_static import model  # noqa: F401  (every family, a Gemma-3 whose windows cover the rows)


def short_rows(tiny, seed: int = 0):
    """Six right-padded rows of 3 to 8 tokens (48 padded, 28 packed)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [(5, 2), (3, 3), (7, 1), (4, 2), (2, 1), (3, 1)]
    rows = [
        (torch.randint(4, tiny.cfg.d_vocab, (p,), generator=generator).tolist(), [int(t) for t in range(4, 4 + a)])
        for p, a in lengths
    ]
    return collate(rows, pad_id=0)


def gates(tiny, kind: str) -> GateSpec:
    n_layers, n_heads, d_head = tiny.cfg.n_layers, tiny.cfg.n_heads, tiny.cfg.d_head
    soft = torch.rand(6, n_layers, n_heads, generator=torch.Generator().manual_seed(3)).requires_grad_(True)
    return {
        "per_row": GateSpec(heads=soft),
        "mean": GateSpec(
            heads=soft, mean=torch.randn(n_layers, n_heads, d_head, generator=torch.Generator().manual_seed(6))
        ),
        "mlp": GateSpec(heads=soft, mlp=torch.rand(6, n_layers, generator=torch.Generator().manual_seed(4))),
        "shared": GateSpec(heads=random_mask(tiny, seed=5)[None]),
    }[kind]


def test_short_sliding_windows_band_within_each_row(family_model):
    """The tiny Gemma-3's windows (4) are shorter than its rows: attention is banded in the rows'
    padded layout, as in the padded pass."""
    test_a_packed_pass_equals_the_padded_one(family_model("gemma3"), "per_row")


@pytest.mark.parametrize("kind", ["per_row", "mean", "mlp", "shared"])
def test_a_packed_pass_equals_the_padded_one(model, kind):  # noqa: F811
    batch = short_rows(model, seed=2)
    native = native_forward(model)
    assert native is not None
    outputs, grads = [], []
    for pack in (True, False):
        spec = gates(model, kind)
        with direct_path(True), native_options(pack_rows=pack):
            out = native.final_normed(batch, spec)
        outputs.append(out.detach())
        if spec.heads is not None and spec.heads.requires_grad:
            (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            grads.append(spec.heads.grad)
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5, rtol=1e-4)
    if grads:
        assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pack", [True, False])
def test_the_last_layer_projects_and_runs_its_mlp_at_the_answers_only(model, pack):  # noqa: F811
    """Both ways of a loss pass: the first layer's output projection and MLP see every computed
    token, the last layer's only the answer positions (the tests above and `test_native` compare
    the outputs and gradients with the padded pass and the bridge)."""
    batch = short_rows(model, seed=2)
    native = native_forward(model)
    assert native is not None
    seen: dict[str, int] = {}

    def count(name):
        def hook(module, args, output):
            seen[name] = args[0].shape[:-1].numel()

        return hook

    modules = {
        "first projection": native.projections[0],
        "first mlp": native.mlps[0],
        "last projection": native.projections[-1],
        "last mlp": native.mlps[-1],
    }
    handles = [module.register_forward_hook(count(name)) for name, module in modules.items()]
    try:
        with direct_path(True), native_options(pack_rows=pack):
            out = native.final_normed(batch, gates(model, "per_row"))
    finally:
        for handle in handles:
            handle.remove()
    n_answers = len(batch.answers()[0])
    computed = 28 if pack else batch.input_ids.numel()  # packed: each row up to its last answer position
    assert seen == {
        "first projection": computed,
        "first mlp": computed,
        "last projection": n_answers,
        "last mlp": n_answers,
    }
    assert out.shape[0] == n_answers and torch.isfinite(out).all()


def test_the_packed_mask_gradient_equals_the_hook_z_gate(llama):
    """`answer_nll` (what `train_mask` differentiates) through a packed pass and through the bridge."""
    batch = short_rows(llama, seed=1)
    with native_options(pack_rows=True):
        packed = mask_gradient(llama, batch)
    with direct_path(False):
        reference = mask_gradient(llama, batch)
    assert torch.allclose(packed, reference, atol=1e-5, rtol=1e-4)


@given(
    rows=st.lists(
        st.tuples(st.integers(1, 9), st.integers(1, 4)),  # (prompt tokens, answer tokens)
        min_size=1,
        max_size=6,
    )
)
def test_the_layout_keeps_each_row_up_to_its_last_answer_position(rows):
    """Packed tokens are each row's tokens before its last answer token, in row order; positions
    count from 0 in every row; each token keeps its padded slot; each answer position maps to the
    same token as in the padded batch."""
    pairs = [(list(range(10, 10 + p)), list(range(50, 50 + a))) for p, a in rows]
    batch = collate(pairs, pad_id=0)
    layout = packing(batch)
    expected = [t for prompt, answer in pairs for t in (prompt + answer)[:-1]]
    assert layout.ids[0].tolist() == expected
    assert layout.positions[0].tolist() == [i for p, a in rows for i in range(p + a - 1)]
    assert layout.rows.tolist() == [r for r, (p, a) in enumerate(rows) for _ in range(p + a - 1)]
    assert batch.input_ids.flatten()[layout.slots].tolist() == expected
    batch_rows, positions, _ = batch.answers()
    assert layout.ids[0, layout.answers].tolist() == batch.input_ids[batch_rows, positions].tolist()


def test_the_layout_of_a_batch_on_a_device_is_built_on_the_host():
    """A batch copied to a device keeps the host batch it came from: its packed layout is built there
    and copied over, reading nothing back. The meta device holds no values (reading one raises), so
    it stands in for a GPU that the pass must not wait for."""
    batch = collate([([10, 11, 12], [50, 51]), ([13], [52]), ([14, 15], [53, 54, 55])], pad_id=0)
    on_device = batch.to("meta")
    assert on_device.on_host() is batch and batch.on_host() is batch
    expected, layout = packing(batch), packing(on_device)
    for name in ("ids", "positions", "rows", "slots", "answers"):
        packed = getattr(layout, name)
        assert packed.device.type == "meta" and packed.shape == getattr(expected, name).shape
