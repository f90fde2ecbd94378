"""Both gates' results on the organism, pinned before the gates were reorganised (tests/pinned/gates/):
the evaluation table and the removal sweep of the pinned 300-step reverse mask through the value and
the query gate, and the baked checkpoint's logits. Forward passes of fixed masks: counts, ranks and
texts exactly, floats to tests/pinned's tolerance (`HEADSUP_UPDATE_PINNED=1` stores new pins).

Why that tolerance holds on any CPU: one forward pass of a fixed mask moves by its last bits between
kernel sets (the demo's pinned sweep logits, stored on an AVX-512 CPU, read 18.898907 against 18.898905
on AVX2: 1e-7 relative, a hundredth of rtol 1e-5); these pins pass under ATEN_CPU_CAPABILITY=default too."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from headsup_lens.models import builtin_model_dir

from ..pinned import PINNED, assert_pinned_frame

needs_weights = pytest.mark.skipif(
    not (builtin_model_dir("organism") / "config.json").is_file(), reason="organism weights not trained"
)
TASK = "organism/reverse"


@pytest.fixture(scope="module")
def organism():
    from headsup_lens.models import load_model

    return load_model("organism")


@pytest.fixture(scope="module")
def mask(organism):
    from safetensors.torch import load_file

    from headsup_lens.masks import HeadMask
    from headsup_lens.models import fingerprint
    from headsup_lens.training import safe_name

    logits = load_file(PINNED / "demo" / "mask_logits.safetensors")[safe_name(TASK)]
    return HeadMask.from_logits(logits, model=fingerprint(organism))


@needs_weights
@pytest.mark.parametrize("gate", ["value", "query"])
def test_evaluation_under_each_gate_equals_the_pinned_one(organism, mask, gate):
    from headsup_lens.data import load_task
    from headsup_lens.evaluation import EvalConfig, evaluate

    task = load_task(TASK)
    settings = ("masked", "random mask") + (("instructed + scaled mask",) if gate == "value" else ())
    config = EvalConfig(gate=gate, settings=settings, progress=False)
    result = evaluate(organism, task, mask, config)
    assert_pinned_frame(f"gates/evaluation_{gate}", result.table)
    assert_pinned_frame(f"gates/generations_{gate}", result.generations)


@needs_weights
@pytest.mark.parametrize("gate", ["value", "query"])
def test_removal_sweep_under_each_gate_equals_the_pinned_ranks(organism, mask, gate):
    from headsup_lens.analysis import removal_sweep, weight_order
    from headsup_lens.data import load_task

    word, answer = load_task(TASK).pairs[-1]
    sweep = removal_sweep(
        organism, word, weight_order(mask)[:24], target_tokens=[answer[0]], max_new_tokens=6, gate=gate, progress=False
    )
    assert_pinned_frame(f"gates/sweep_{gate}", sweep.long())  # every step's ranks and logits
    steps = pd.DataFrame({"generation": sweep.generations})  # the greedy continuation at every step
    assert_pinned_frame(f"gates/sweep_generations_{gate}", steps)


@needs_weights
def test_baked_checkpoint_gives_the_pinned_logits(organism, mask, tmp_path):
    """The value-gate mask baked into the organism's weights: the baked model's logits on a fixed
    prompt, to tests/pinned's tolerance (one forward pass), and its top tokens exactly."""
    from headsup_lens import bake
    from headsup_lens.models import load_model

    bake(organism, mask, tmp_path / "baked")
    baked = load_model(tmp_path / "baked")
    tokens = organism.to_tokens("garden", prepend_bos=False)
    with torch.no_grad():
        logits = baked(tokens)[0].float()
    frame = pd.DataFrame(
        {"position": range(logits.shape[0]), "top": logits.argmax(-1).tolist(), "max": logits.amax(-1).tolist()}
    )
    assert_pinned_frame("gates/baked_logits", frame)
