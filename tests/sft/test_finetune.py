"""Supervised fine-tuning: the objective, resume, adapters, patterns at checkpoints."""

import pytest
import torch
import torch.nn.functional as F

from headsup_lens import activation_pattern
from headsup_lens.data import Task, collate, encode_pairs
from headsup_lens.models import load_model, pad_token_id
from headsup_lens.sft import FinetuneConfig, finetune
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
    result = finetune(model, tasks(), config(steps=1, lr=1e-9))
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
    result = finetune(fresh(llama_dir), tasks(), config(steps=30, lr=3e-3, batch_size=8))
    assert result.history.loss.iloc[-5:].mean() < 0.7 * result.history.loss.iloc[:3].mean()


@pytest.mark.parametrize("method", ["full", "lora"])
def test_resume_gives_the_weights_of_an_uninterrupted_run(llama_dir, tmp_path, monkeypatch, method):
    settings = config(method=method, checkpoint_every=3, pattern_steps=(0, 2, 4))
    reference_model = fresh(llama_dir)
    reference = finetune(reference_model, tasks(), settings, out_dir=tmp_path / "reference")

    real_save = finetune_module._save

    def crash_after_first(out, step, *args):
        real_save(out, step, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune_module, "_save", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        finetune(fresh(llama_dir), tasks(), settings, out_dir=tmp_path / "run")
    monkeypatch.setattr(finetune_module, "_save", real_save)
    resumed_model = fresh(llama_dir)
    resumed = finetune(resumed_model, tasks(), settings, out_dir=tmp_path / "run")
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
    finetune(fresh(llama_dir), tasks(), config(steps=2), out_dir=tmp_path)
    with pytest.raises(ValueError, match="recipe.lr"):
        finetune(fresh(llama_dir), tasks(), config(steps=2, lr=1e-2), out_dir=tmp_path)


def test_adapters_leave_the_base_weights_untouched(llama_dir):
    model = fresh(llama_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = finetune(model, tasks(), config(method="lora", steps=5, lr=1e-2))
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
    result = finetune(
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
        finetune(fresh(llama_dir), tasks(), config(pattern_steps=(99,)))
    bare = Task.from_pairs("bare", [(w, w) for w in WORDS], n_eval=4)
    with pytest.raises(ValueError, match="no instruction"):
        finetune(fresh(llama_dir), [bare], config())
    with pytest.raises(ValueError, match="lora_targets"):
        finetune(fresh(llama_dir), tasks(), config(method="lora", lora_targets=("nothing",)))


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
