"""Supervised fine-tuning: the objective, resume, adapters, patterns at checkpoints."""

import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from headsup_lens import activation_pattern
from headsup_lens.data import Task, collate, encode_pairs
from headsup_lens.models import load_model, pad_token_id
from headsup_lens.sft import FinetuneConfig, finetune_
from headsup_lens.sft import _finetune as finetune_module

WORDS = ["cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird", "star", "rain", "leaf", "wind"]


def tasks():
    reverse = Task.from_pairs("reverse", [(w, w[::-1]) for w in WORDS], instruction="Reverse: {input}", n_eval=4)
    upper = Task.from_pairs("upper", [(w, w.upper()) for w in WORDS], instruction="Upper: {input}", n_eval=4)
    return [reverse, upper]


def fresh(llama_dir):
    return load_model(str(llama_dir), dtype="float32")


def config(**overrides):
    return FinetuneConfig(
        **{
            "steps": 6,
            "batch_size": 4,
            "lr": 1e-3,
            "progress": False,
            "accuracy": False,
            "pattern_examples": 2,
            **overrides,
        }
    )


def test_loss_is_the_cross_entropy_of_the_model_logits_on_answer_tokens(llama_dir, monkeypatch):
    model = fresh(llama_dir)
    seen = []
    real = finetune_module.answer_nll

    def spy(model, batch, hooks=None):
        seen.append(batch)
        return real(model, batch, hooks)

    monkeypatch.setattr(finetune_module, "answer_nll", spy)
    reference = fresh(llama_dir)
    result = finetune_(model, tasks(), config(steps=1, lr=1e-9))
    # The first step's loss, from the full logits of the (then untouched) model at the answer positions.
    total, count = 0.0, 0
    for batch in seen:
        logits = reference(batch.input_ids, attention_mask=batch.attention_mask)
        labels = batch.labels
        total += F.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100, reduction="sum"
        ).item()
        count += int((labels != -100).sum())
    assert count == sum(len(a) for b in seen for a in [b.labels[b.labels != -100]])
    assert result.history.loss[0] == pytest.approx(total / count, rel=1e-5)
    # The batch is instructed, in the model's prompt format: the rows are those of encode_pairs.
    rows = encode_pairs(model, tasks()[0].train_pairs, instruction="Reverse: {input}")
    assert any(
        torch.equal(b.input_ids[i, : len(p) + len(a)], torch.tensor(p + a))
        for b in seen
        for i in range(len(b))
        for p, a in rows
    )


def test_training_lowers_the_loss(llama_dir):
    result = finetune_(fresh(llama_dir), tasks(), config(steps=30, lr=3e-3, batch_size=8))
    assert result.history.loss.iloc[-5:].mean() < 0.7 * result.history.loss.iloc[:3].mean()


@pytest.mark.parametrize("method", ["full", "lora"])
def test_resume_gives_the_weights_of_an_uninterrupted_run(llama_dir, tmp_path, monkeypatch, method):
    settings = config(method=method, checkpoint_every=3, pattern_steps=(0, 2, 4))
    reference_model = fresh(llama_dir)
    reference = finetune_(reference_model, tasks(), settings, out_dir=tmp_path / "reference")

    real_save = finetune_module._Finetuning.checkpoint

    def crash_after_first(self, out, step):
        real_save(self, out, step)
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune_module._Finetuning, "checkpoint", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        finetune_(fresh(llama_dir), tasks(), settings, out_dir=tmp_path / "run")
    monkeypatch.setattr(finetune_module._Finetuning, "checkpoint", real_save)
    resumed_model = fresh(llama_dir)
    resumed = finetune_(resumed_model, tasks(), settings, out_dir=tmp_path / "run")
    assert resumed.history.step.tolist() == list(range(1, 7))
    assert resumed.history.loss.tolist() == pytest.approx(reference.history.loss.tolist(), rel=1e-6)
    expected = dict(reference_model.named_parameters())
    for name, parameter in resumed_model.named_parameters():
        assert torch.equal(parameter, expected[name]), name
    assert sorted(resumed.patterns) == [0, 2, 4, 6]
    for step in resumed.patterns:
        for task in resumed.patterns[step]:
            assert torch.allclose(resumed.patterns[step][task], reference.patterns[step][task])


def test_resume_refuses_another_recipe(llama_dir, tmp_path):
    finetune_(fresh(llama_dir), tasks(), config(steps=2), out_dir=tmp_path)
    with pytest.raises(ValueError, match="recipe.lr"):
        finetune_(fresh(llama_dir), tasks(), config(steps=2, lr=1e-2), out_dir=tmp_path)


def test_adapters_leave_the_base_weights_untouched(llama_dir):
    model = fresh(llama_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = finetune_(model, tasks(), config(method="lora", steps=5, lr=1e-2))
    # peft moves each adapted nn.Linear to `<name>.base_layer`
    after = {n.replace(".base_layer", ""): p for n, p in model.named_parameters()}
    adapters = [n for n in after if "lora_" in n]
    assert adapters and all(not after[n].requires_grad for n in before)
    for name, value in before.items():
        assert torch.equal(after[name], value), name
    assert any(not torch.equal(after[n], torch.zeros_like(after[n])) for n in adapters if "lora_B" in n)
    # The adapters act through the bridge: the fine-tuned model's output differs from the base's.
    batch = collate(encode_pairs(model, [("cat", "tac")]), pad_id=pad_token_id(model))
    assert not torch.allclose(model(batch.input_ids), fresh(llama_dir)(batch.input_ids))
    assert result.history.loss.iloc[-1] < result.history.loss.iloc[0]


def test_patterns_are_recorded_at_the_chosen_steps(llama_dir, tmp_path):
    model = fresh(llama_dir)
    base = activation_pattern(fresh(llama_dir), [("moon", "noom")], instructed=False)
    task_list = tasks()
    result = finetune_(
        model, task_list, config(pattern_steps=(0, 3), accuracy=True, pattern_examples=3), out_dir=tmp_path
    )
    assert sorted(result.patterns) == [0, 3, 6]
    assert set(result.patterns[0]) == {"reverse", "upper"}
    # Step 0 is the untouched model on the first held-out pairs, instructed.
    expected = activation_pattern(fresh(llama_dir), task_list[0].eval_pairs[:3], instructed=False)
    from headsup_lens.data import tokenize_pairs

    instructed = tokenize_pairs(fresh(llama_dir), task_list[0].eval_pairs[:3], instruction="Reverse: {input}")
    assert torch.allclose(result.patterns[0]["reverse"], activation_pattern(fresh(llama_dir), instructed), rtol=1e-4)
    assert not torch.allclose(result.patterns[0]["reverse"], expected)
    assert not torch.allclose(result.patterns[6]["reverse"], result.patterns[0]["reverse"])
    assert base.shape == result.patterns[6]["upper"].shape
    assert sorted((tmp_path / "patterns").iterdir())[0].name == "step0000000.safetensors"
    assert result.accuracy.step.tolist() == [0, 0, 3, 3, 6, 6]
    assert (tmp_path / "accuracy.csv").is_file() and (tmp_path / "history.csv").is_file()


def test_bad_arguments(llama_dir):
    with pytest.raises(ValueError, match="pattern_steps"):
        finetune_(fresh(llama_dir), tasks(), config(pattern_steps=(99,)))
    bare = Task.from_pairs("bare", [(w, w) for w in WORDS], n_eval=4)
    with pytest.raises(ValueError, match="no instruction"):
        finetune_(fresh(llama_dir), [bare], config())
    with pytest.raises(ValueError, match="lora_targets"):
        finetune_(fresh(llama_dir), tasks(), config(method="lora", lora_targets=("nothing",)))


def test_pattern_subset_cuts_both_splits_and_keeps_demonstrations_aligned():
    from headsup_lens.sft import pattern_subset

    pairs = [(w, w.upper()) for w in WORDS]
    shots = [((f"s{i}", f"S{i}"),) for i in range(len(WORDS))]
    task = Task("upper", tuple(pairs), "Upper: {input}", n_eval=4, shots=tuple(shots))  # 8 train, 4 eval
    cut = pattern_subset(task, 2, n_train=3)
    assert cut.train_pairs == tuple(pairs[:3]) and cut.eval_pairs == tuple(pairs[8:10])
    assert cut.shots == tuple(shots[:3] + shots[8:10])
    assert pattern_subset(task, 2).train_pairs == task.train_pairs  # n_train=None keeps the training split
    assert pattern_subset(task, 10, n_train=20) == task


# ------------------------------------------------------------------ safety: checks first, restore on failure


def weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_untouched(model, before: dict[str, torch.Tensor]) -> None:
    """The caller's model as it was: the same parameter names (no adapters), values and frozen flags."""
    after = dict(model.named_parameters())
    assert sorted(after) == sorted(before)
    for name, value in before.items():
        assert torch.equal(after[name], value), name
        assert not after[name].requires_grad, name
    assert not finetune_module._lora_layers(model)


@pytest.mark.parametrize(
    "field, value",
    [
        ("lr", float("inf")),
        ("lr", float("nan")),
        ("lr", -1e-3),
        ("min_lr_ratio", float("nan")),
        ("warmup_frac", float("nan")),
        ("weight_decay", -0.1),
        ("weight_decay", float("inf")),
        ("max_grad_norm", float("nan")),
        ("lora_alpha", float("nan")),
        ("lora_alpha", -16.0),
    ],
)
def test_non_finite_or_negative_numbers_are_refused_before_any_work(llama_dir, tmp_path, field, value):
    """`lr=inf` used to return normally with every parameter NaN."""
    model = fresh(llama_dir)
    before = weights(model)
    with pytest.raises(ValueError, match=field):
        finetune_(model, tasks(), config(**{field: value}), out_dir=tmp_path / "run")
    assert_untouched(model, before)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_task_too_small_for_its_splits_is_refused_before_the_model_is_touched(llama_dir, method):
    """A task with one pair has no held-out pair for the patterns taken at the last step: it used to
    fail only after the run, with the model already trained (and adapted)."""
    model = fresh(llama_dir)
    before = weights(model)
    one = Task.from_pairs("one", [("cat", "tac")], instruction="Reverse: {input}")
    with pytest.raises(ValueError, match="no held-out pairs"):
        finetune_(model, [one], config(method=method))
    held = Task.from_pairs("held", [(w, w[::-1]) for w in WORDS[:3]], instruction="Reverse: {input}", n_eval=3)
    with pytest.raises(ValueError, match="no training pairs"):
        finetune_(model, [tasks()[0], held], config(method=method))
    empty = Task.from_pairs("empty", [(w, "") for w in WORDS], instruction="Reverse: {input}", n_eval=4)
    with pytest.raises(ValueError, match="empty after tokenisation"):
        finetune_(model, [empty], config(method=method))
    assert_untouched(model, before)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_failure_midway_gives_the_model_its_weights_back(llama_dir, monkeypatch, method):
    """An error at the third step (here: raised by the objective) leaves the caller's model as it was:
    the trained weights are put back, the adapters taken out."""
    model = fresh(llama_dir)
    before = weights(model)
    real, calls = finetune_module.answer_nll, []

    def failing(model, batch, hooks=None):
        calls.append(1)
        if len(calls) > 4:
            raise RuntimeError("out of memory (simulated)")
        return real(model, batch, hooks)

    monkeypatch.setattr(finetune_module, "answer_nll", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        finetune_(model, tasks(), config(method=method, lr=1e-2))
    assert_untouched(model, before)
    monkeypatch.setattr(finetune_module, "answer_nll", real)
    # The same model fine-tunes normally afterwards (and then does change).
    finetune_(model, tasks(), config(method=method, steps=2, lr=1e-2))
    assert any(not torch.equal(p, before.get(n, p + 1)) for n, p in model.named_parameters())


def test_a_diverging_run_is_stopped_and_the_weights_restored(llama_dir):
    """lr=1e30 is finite, but its first step throws the weights far out and the next loss is not
    finite: the run stops there, and the model does not keep the thrown-out weights."""
    model = fresh(llama_dir)
    before = weights(model)
    with pytest.raises(ValueError, match="loss became|non-finite weights"):
        finetune_(model, tasks(), config(lr=1e30, steps=3))
    assert_untouched(model, before)


def test_a_step_that_would_leave_nan_weights_is_refused(llama_dir):
    """A NaN gradient (here planted by a gradient hook) used to be clipped into every weight: the run
    returned normally with every parameter NaN."""
    model = fresh(llama_dir)
    before = weights(model)
    embedding = model.embed.W_E if hasattr(model.embed, "W_E") else next(model.parameters())
    embedding.requires_grad_(True)
    handle = embedding.register_hook(lambda grad: grad * float("nan"))
    try:
        with pytest.raises(ValueError, match="gradient became nan at step 0"):
            finetune_(model, tasks(), config(steps=2))
    finally:
        handle.remove()
    embedding.requires_grad_(False)
    assert_untouched(model, before)
    # A finite gradient and learning rate whose weight decay overflows the weights: refused too.
    with pytest.raises(ValueError, match="step 0 .* would leave non-finite weights"):
        finetune_(model, tasks(), config(steps=2, lr=1e37, weight_decay=30.0))
    assert_untouched(model, before)


_HOLD = """
import sys, time
from headsup_lens._io import locked_folder
with locked_folder(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_run_folder_has_one_writer(llama_dir, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from headsup_lens import FolderInUse

    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "run")], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        model = fresh(llama_dir)
        before = weights(model)
        with pytest.raises(FolderInUse, match=f"pid {holder.pid}"):
            finetune_(model, tasks(), config(method="lora"), out_dir=tmp_path / "run")
        assert_untouched(model, before)
    finally:
        holder.kill()
        holder.wait()


def test_a_run_folder_is_written_all_or_nothing(llama_dir, tmp_path, monkeypatch):
    """A run killed midway over a finished one leaves the finished one's files exactly; the next
    finished run replaces them as a set (no pattern file of the older run is left beside it)."""
    out = tmp_path / "run"
    finetune_(fresh(llama_dir), tasks(), config(pattern_steps=(0, 2, 4)), out_dir=out)
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "state.pt"}
    assert {str(p) for p in files} >= {
        "history.csv",
        "run.json",
        *(f"patterns/step000000{s}.safetensors" for s in (0, 2, 4, 6)),
    }

    def crash(self, out, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune_module._Finetuning, "checkpoint", crash)
    other = config(pattern_steps=(1,), steps=4, checkpoint_every=2)
    with pytest.raises(KeyboardInterrupt):
        finetune_(fresh(llama_dir), tasks(), other, out_dir=out, resume=False)
    now = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "state.pt"}
    assert now == files
    monkeypatch.undo()
    finetune_(fresh(llama_dir), tasks(), other, out_dir=out, resume=False)
    patterns = sorted(p.name for p in (out / "patterns").iterdir())
    assert patterns == ["step0000001.safetensors", "step0000004.safetensors"]
    assert len(pd.read_csv(out / "history.csv")) == 4


def test_a_run_folder_records_the_model_and_refuses_another(llama_dir, tmp_path):
    from headsup_lens import fingerprint
    from headsup_lens.models import random_llama_dir

    out = tmp_path / "run"
    base = fresh(llama_dir)
    print_ = fingerprint(base)
    finetune_(base, tasks(), config(method="lora", steps=2), out_dir=out)
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["model"] == print_.to_dict()
    other = load_model(str(random_llama_dir(tmp_path / "other", seed=1)), dtype="float32")
    before = weights(other)
    with pytest.raises(ValueError, match=r"holds a fine-tuning run that differs from this one in model"):
        finetune_(other, tasks(), config(method="lora", steps=2), out_dir=out)
    assert_untouched(other, before)
    (out / "state.pt").unlink()  # the record alone still names the model
    with pytest.raises(ValueError, match="in model"):
        finetune_(other, tasks(), config(method="lora", steps=2), out_dir=out)
    assert_untouched(other, before)


def test_adapters_come_out_again(llama_dir):
    from headsup_lens.sft import add_lora_, remove_lora_

    model = fresh(llama_dir)
    before = weights(model)
    batch = collate(encode_pairs(model, [("cat", "tac")]), pad_id=pad_token_id(model))
    reference = model(batch.input_ids)
    parameters = add_lora_(model, FinetuneConfig.lora())
    with torch.no_grad():
        for p in parameters:
            p.add_(0.5)
    assert not torch.allclose(model(batch.input_ids), reference)
    with pytest.raises(ValueError, match="already carries LoRA adapters"):
        add_lora_(model, FinetuneConfig.lora())
    assert remove_lora_(model) == 8  # q, k, v, o of 2 layers
    assert_untouched(model, before)
    assert torch.equal(model(batch.input_ids), reference)
    assert remove_lora_(model) == 0


def test_adapters_added_after_a_native_pass_are_in_the_next_one(llama_dir):
    """The answer loss runs the model's native forward pass, which keeps the layers it calls: adapters
    injected after it (or taken out) are in the next pass, as in the bridge's."""
    from headsup_lens.objective import answer_nll
    from headsup_lens.sft import add_lora_, remove_lora_

    model = fresh(llama_dir)
    batch = collate(encode_pairs(model, [("cat", "tac"), ("dog", "god")]), pad_id=pad_token_id(model))
    plain = answer_nll(model, batch)[0]  # builds the native pass on the plain layers
    parameters = add_lora_(model, FinetuneConfig.lora())
    with torch.no_grad():
        for p in parameters:
            p.add_(0.5)
    adapted = answer_nll(model, batch)[0]
    through_bridge = answer_nll(model, batch, hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x)])[0]
    assert not torch.allclose(adapted, plain) and torch.allclose(adapted, through_bridge, atol=1e-5)
    remove_lora_(model)
    assert torch.allclose(answer_nll(model, batch)[0], plain, atol=1e-6)
    # so that a pattern taken before a LoRA run (the SFT statistics) leaves the run able to train
    activation_pattern(model, [("cat", "tac")])
    result = finetune_(model, tasks(), config(method="lora", steps=2, lr=1e-2))
    assert result.history.loss.notna().all()


def test_a_batch_runs_in_passes_of_bounded_rows_with_the_same_update(llama_dir, monkeypatch):
    rows = []
    real = finetune_module.answer_nll

    def spy(model, batch, hooks=None):
        rows.append(len(batch))
        return real(model, batch, hooks)

    # float64: the two runs sum the same gradient in another order (one pass, or passes of 3 rows),
    # which changes only the last bits of each sum: a sum of n terms reordered differs by at most
    # n * 2**-53 of the sum of its terms' magnitudes (n: the longest reduction, the batch's tokens
    # here, < 10**3), i.e. < 1.2e-13 relative. AdamW divides each gradient element by its own
    # magnitude, so an element whose terms cancel to 10**-k of their size loses k of those digits.
    # Allowing 10**-6 of an update (at most lr per step) leaves 7 orders of magnitude for cancellation;
    # in float32 the same reasoning allows no bound below the update itself (5e-6 of 2e-3 was seen).
    monkeypatch.setattr(finetune_module, "answer_nll", spy)
    steps, lr = 2, 1e-3
    whole = finetune_(load_model(str(llama_dir), dtype="float64"), tasks(), config(steps=steps, batch_size=16, lr=lr))
    assert rows == [16, 16]
    monkeypatch.setattr(finetune_module, "ROWS_PER_PASS", 3)
    rows.clear()
    passes = finetune_(load_model(str(llama_dir), dtype="float64"), tasks(), config(steps=steps, batch_size=16, lr=lr))
    assert max(rows) == 3 and sum(rows) == 32
    # The history holds float32 losses: equal up to float32's rounding of the same float64 loss.
    torch.testing.assert_close(passes.history.loss.tolist(), whole.history.loss.tolist(), rtol=2**-22, atol=0)
    for a, b in zip(passes.model.parameters(), whole.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=steps * lr * 1e-6)
