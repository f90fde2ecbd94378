"""The optimisation core: the one learning-rate schedule, the loop skeleton and its helpers."""

from __future__ import annotations

import math

import pytest
import torch

from headsup_lens.organism import OrganismConfig
from headsup_lens.sft import FinetuneConfig
from headsup_lens.training import (
    BatchSampler,
    StepEnd,
    StepTimer,
    TrainConfig,
    check_finite_loss,
    load_state,
    run_steps,
    save_state,
    warmup_cosine,
)


def reference_lr(step: int, steps: int, warmup: int, peak: float, floor: float) -> float:
    """Written out from the definition: warm-up k -> peak (k + 1) / warmup; then the cosine from peak
    (at step `warmup`) to floor (at step `steps - 1`), as a fraction of the decay steps done."""
    if step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = steps - 1 - warmup
    done = min(step - warmup, decay_steps) / decay_steps
    return floor + (peak - floor) * (1 + math.cos(math.pi * done)) / 2


@pytest.mark.parametrize("steps, warmup", [(100, 10), (300, 30), (200, 10), (40, 2), (25, 0)])
def test_the_schedule_is_a_linear_warmup_then_a_cosine_to_the_floor(steps, warmup):
    peak, floor = 0.1, 1e-3
    lr = [warmup_cosine(s, steps=steps, warmup=warmup, peak=peak, floor=floor) for s in range(steps + 3)]
    for s in range(steps + 3):
        assert lr[s] == pytest.approx(reference_lr(s, steps, warmup, peak, floor), rel=1e-12), s
    if warmup:
        assert lr[0] == pytest.approx(peak / warmup) and lr[warmup - 1] == pytest.approx(peak)
    assert lr[warmup] == pytest.approx(peak)  # the decay starts at the peak
    assert lr[steps - 1] == pytest.approx(floor) and lr[steps + 2] == pytest.approx(floor)  # the last step: the floor
    assert lr[(warmup + steps - 1) // 2] == pytest.approx((peak + floor) / 2, rel=0.05)  # halfway down
    assert all(a >= b for a, b in zip(lr[warmup:], lr[warmup + 1 :]))  # never rises after the warm-up


def test_every_trainer_uses_the_one_schedule():
    """Mask training (bit for bit as before: its masks are pinned), fine-tuning and the organism.

    The organism's own copy divided the decay by `steps - warmup_steps` (the floor one step after the
    last step); it now reaches `lr * min_lr_ratio` at the last step like the others. Retraining the
    organism therefore gives slightly different weights; the shipped weights were not retrained.
    """
    mask = TrainConfig(steps=300, lr=0.1, min_lr=1e-3, warmup_frac=0.1)
    for s in range(300):
        expected = warmup_cosine(s, steps=300, warmup=30, peak=0.1, floor=1e-3)
        assert mask.lr_at(s) == expected
        # The mask schedule's own earlier expression, verbatim: unchanged to the last bit.
        if s >= 30:
            old = 1e-3 + (0.1 - 1e-3) * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - 30) / (300 - 30 - 1))))
            assert mask.lr_at(s) == old
    sft = FinetuneConfig(steps=200, lr=1e-3, min_lr_ratio=0.1, warmup_frac=0.05)
    assert [sft.lr_at(s) for s in range(200)] == [
        warmup_cosine(s, steps=200, warmup=10, peak=1e-3, floor=1e-4) for s in range(200)
    ]
    organism = OrganismConfig(steps=2200, lr=3e-3, warmup_steps=100, min_lr_ratio=0.05)
    assert [organism.lr_at(s) for s in range(2200)] == [
        warmup_cosine(s, steps=2200, warmup=100, peak=3e-3, floor=3e-3 * 0.05) for s in range(2200)
    ]
    assert organism.lr_at(2199) == pytest.approx(3e-3 * 0.05)
    old_last = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * 2099 / 2100))  # the earlier organism copy
    assert 3e-3 * old_last > organism.lr_at(2199) * 1.000001


def test_recipes_with_non_finite_numbers_are_refused():
    for bad in (dict(lr=math.inf), dict(min_lr=math.nan), dict(tau_end=math.inf)):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be finite"):
            TrainConfig(**bad)
    with pytest.raises(ValueError, match="lr must be finite"):
        OrganismConfig(lr=math.inf)
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        OrganismConfig(warmup_steps=-1)


def test_the_loop_runs_the_steps_calls_back_and_checkpoints():
    ran, ends, saved = [], [], []

    def step(s):
        ran.append(s)
        return {"loss": f"{1 / (s + 1):.3f}"}

    timer = StepTimer()
    run_steps(
        step,
        steps=7,
        checkpoint_every=3,
        checkpoint=saved.append,
        callbacks=[ends.append, timer],
        progress=False,
    )
    assert ran == list(range(7)) and saved == [3, 6, 7]
    assert [e.step for e in ends] == list(range(1, 8)) and ends[1].logs == {"loss": "0.500"}
    assert len(timer.seconds) == 7 and all(t >= 0 for t in timer.seconds)
    # Resumed after step 4: steps 4..6 run, the checkpoints keep their places.
    ran.clear(), saved.clear()
    run_steps(step, steps=7, start=4, checkpoint_every=3, checkpoint=saved.append, progress=False)
    assert ran == [4, 5, 6] and saved == [6, 7]
    run_steps(step, steps=7, start=7, checkpoint=saved.append, progress=False)  # a finished run: nothing
    assert ran == [4, 5, 6]
    with pytest.raises(ValueError, match="start must lie in"):
        run_steps(step, steps=7, start=8)
    assert isinstance(ends[0], StepEnd) and ends[0].seconds <= sum(timer.seconds)


def test_the_sampler_is_a_permutation_per_epoch_and_stateless_in_the_step():
    sampler = BatchSampler(10, 4, seed=3, name="task")
    batches = [sampler.batch(s) for s in range(5)]  # 20 positions: two epochs
    flat = [i for b in batches for i in b]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:]  # a fresh order per epoch
    assert BatchSampler(10, 4, seed=3, name="task").batch(3) == batches[3]  # as a resumed run draws it
    assert BatchSampler(10, 4, seed=4, name="task").batch(0) != batches[0]
    big = BatchSampler(3, 7, seed=0, name="t").batch(0)  # a batch larger than the data spans epochs
    assert len(big) == 7 and sorted(big[:3]) == [0, 1, 2]
    with pytest.raises(ValueError, match="n >= 1"):
        BatchSampler(0, 4, seed=0, name="t")


def test_states_round_trip(tmp_path):
    state = {"step": 3, "weights": {"w": torch.arange(4.0)}, "history": [{"step": 1, "loss": 0.5}]}
    save_state(tmp_path / "state.pt", state)
    back = load_state(tmp_path / "state.pt")
    assert back["step"] == 3 and torch.equal(back["weights"]["w"], torch.arange(4.0))
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "state.pt").write_bytes(b"damaged")
    with pytest.raises(ValueError, match=r"state.pt cannot be read .*damaged"):
        load_state(tmp_path / "state.pt")


def test_a_non_finite_loss_stops_the_run():
    check_finite_loss(torch.tensor(0.3), 0, ["a"])
    check_finite_loss(0.3, 0, ["a"])
    with pytest.raises(ValueError, match=r"loss became nan at step 4 \(tasks \['a'\]\)"):
        check_finite_loss(torch.tensor(float("nan")), 4, ["a"])
    with pytest.raises(ValueError, match="loss became inf"):
        check_finite_loss(math.inf, 0, ("a",))


def test_with_callbacks_a_step_is_timed_with_its_device_work():
    """On a GPU a step returns once its work is queued: with callbacks (they get the step's time) the
    loop waits for the device before and after every step, so the time covers the step's work and not
    the previous step's. Without callbacks nothing waits. (A stand-in device records the order.)"""
    events: list[str] = []

    def step(s):
        events.append(f"step {s}")
        return {}

    run_steps(
        step,
        steps=2,
        callbacks=[lambda end: events.append(f"end {end.step}")],
        progress=False,
        synchronize=lambda: events.append("sync"),
    )
    assert events == ["sync", "step 0", "sync", "end 1", "sync", "step 1", "sync", "end 2"]
    events.clear()
    run_steps(step, steps=2, progress=False, synchronize=lambda: events.append("sync"))
    assert events == ["step 0", "step 1"]


def test_the_device_synchronizer_waits_for_a_gpu_only(monkeypatch):
    from headsup_lens._device import synchronizer

    waited: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    assert synchronizer("cpu") is None
    wait = synchronizer("cuda:1")
    assert wait is not None and not waited
    wait()
    assert waited == [torch.device("cuda:1")]


def test_every_trainer_refuses_a_batch_larger_than_the_data_it_draws_from(llama_dir, monkeypatch):
    """A step of more rows than there are examples would only repeat them (the same gradient, more
    time): refused before any work, naming the largest batch the data allows."""
    from headsup_lens import load_model, train_mask, train_masks
    from headsup_lens.data import Task
    from headsup_lens.reproduce._sft import organism_selection
    from headsup_lens.sft import _finetune as finetune_module
    from headsup_lens.sft import data_selection, finetune_, reloading

    words = ["cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird", "star", "rain"]
    small = Task.from_pairs("small", [(w, w[::-1]) for w in words], instruction="Reverse: {input}", n_eval=2)
    large = Task.from_pairs("large", [(w + w, w) for w in words], instruction="Half: {input}", n_eval=1)
    model = load_model(str(llama_dir), dtype="float32")
    touched = []
    monkeypatch.setattr(finetune_module, "encode_pairs", lambda *a, **k: touched.append(a) or [])

    with pytest.raises(
        ValueError, match="batch_size 9 is larger than the 8 training pairs of small .*use batch_size 8"
    ):
        train_mask(model, small, TrainConfig(steps=1, batch_size=9, progress=False))
    with pytest.raises(ValueError, match="the 8 training pairs of small"):  # each task draws its own rows
        train_masks(model, [large, small], TrainConfig(steps=1, batch_size=9, progress=False))
    train_mask(model, small, TrainConfig(steps=1, batch_size=8, progress=False))  # as many as there are: fine
    with pytest.raises(ValueError, match="batch_size 1000000 is larger than the 17 training pairs of small, large"):
        finetune_(model, [small, large], FinetuneConfig(batch_size=1_000_000, progress=False))
    assert not touched  # refused before a single pair was tokenised
    with pytest.raises(ValueError, match="batch_size 100000 is larger than the 6000 distinct examples of the corpus"):
        OrganismConfig(batch_size=100_000)
    # 8 words (4 of each split), each bare, with the 2 phrasings of reverse's instruction, and planted.
    assert OrganismConfig(n_words=4, tasks=("reverse",), batch_size=32).corpus_size() == 8 + 8 * 2 + 8
    with pytest.raises(ValueError, match="batch_size 33 is larger than the 32 distinct examples"):
        OrganismConfig(n_words=4, tasks=("reverse",), batch_size=33)
    study = organism_selection(steps=1, probe_steps=1, eval_examples=2, pattern_examples=2, train_pairs=8, k=1)
    runs = llama_dir.parent / "selection-never-written"
    with pytest.raises(ValueError, match="finetune.batch_size 16 is larger than the 8 training pairs of small"):
        data_selection(reloading(model), [small, large], [small], study, runs)
    assert not runs.exists()


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_run_after_the_step_under_way_with_its_state_saved(stop, request):
    """Ctrl-C, or SIGTERM (a background job ignores SIGINT; schedulers and `kill` send SIGTERM): the
    step finishes, `on_interrupt` saves it (unless it was just checkpointed), then KeyboardInterrupt."""
    import os
    import signal

    # A suite started in the background (`cmd &`) inherits SIGINT ignored, and a run leaves an ignored
    # SIGINT ignored: give this test the interactive default, as a terminal would.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, inherited))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    done, saved, interrupted = [], [], []

    def step(s: int) -> dict:
        if s == 2:
            os.kill(os.getpid(), getattr(signal, stop))  # lands mid-step
        done.append(s)
        return {}

    with pytest.raises(KeyboardInterrupt):
        run_steps(
            step,
            steps=10,
            checkpoint_every=4,
            checkpoint=saved.append,
            on_interrupt=interrupted.append,
            progress=False,
        )
    assert done == [0, 1, 2] and saved == [] and interrupted == [3]
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers are put back
    # At a checkpoint's step nothing is saved twice; without `on_interrupt` nothing waits for the step.
    done.clear()
    with pytest.raises(KeyboardInterrupt):
        run_steps(
            step,
            start=2,
            steps=10,
            checkpoint_every=3,
            checkpoint=saved.append,
            on_interrupt=interrupted.append,
            progress=False,
        )
    assert saved == [3] and interrupted == [3]
    if stop == "SIGINT":  # (SIGTERM's default ends the process)
        done.clear()
        with pytest.raises(KeyboardInterrupt):
            run_steps(step, steps=10, checkpoint=saved.append, progress=False)
        assert done == [0, 1]


def test_a_second_signal_stops_at_once_and_an_ignored_one_stays_ignored():
    import os
    import signal

    def twice(s: int) -> dict:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # raises here, inside the step
        raise AssertionError("not reached")

    interrupted: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_steps(twice, steps=3, on_interrupt=interrupted.append, progress=False)
    assert interrupted == []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started with `&` ignores Ctrl-C
    try:
        run_steps(
            lambda s: os.kill(os.getpid(), signal.SIGINT) or {},
            steps=3,
            on_interrupt=interrupted.append,
            progress=False,
        )
        assert interrupted == [] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
