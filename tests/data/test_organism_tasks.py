"""The organism's word tasks: fixed data whose default behaviour (echo) is never a correct answer."""

from __future__ import annotations

import pytest

from headsup_lens.data import load_task
from headsup_lens.data._organism import organism_task, plural
from headsup_lens.organism import N_EVAL_WORDS, ORGANISM_TASKS, TASK_NAMES, eval_words, organism_words, train_words


def test_words_split_into_planting_and_held_out_words():
    words = organism_words()
    assert len(words) == len(set(words)) == 240
    assert all(w.isalpha() and w.islower() and 3 <= len(w) <= 7 for w in words)
    assert set(train_words()).isdisjoint(eval_words())
    assert train_words() + eval_words() == words and len(eval_words()) == N_EVAL_WORDS


@pytest.mark.parametrize("name", TASK_NAMES)
def test_echo_is_never_a_correct_answer(name):
    task = load_task(f"organism/{name}")
    assert task.n_eval == 100 and [x for x, _ in task.eval_pairs] == list(eval_words())
    for word, answer in task.pairs:
        assert answer and answer != word
        assert not task.is_correct(word, answer), (word, answer)
    assert "{input}" in task.instruction and task.user_text("cat", instructed=True) != "cat"


def test_answers_follow_their_rules():
    assert organism_task("capitalize").answer("apple") == "Apple"
    assert organism_task("organism/uppercase").answer("apple") == "APPLE"
    assert organism_task("reverse").answer("apple") == "elppa"
    assert organism_task("first_letter").answer("apple") == "A"
    assert organism_task("last_letter").answer("apple") == "E"
    assert [plural(w) for w in ("cat", "box", "berry", "boy", "knife", "mouse")] == [
        "cats",
        "boxes",
        "berries",
        "boys",
        "knives",
        "mice",
    ]
    antonym, translate = organism_task("antonym"), organism_task("translate")
    words = organism_words()
    assert all(antonym.answer(antonym.answer(w)) == w for w in words)  # a fixed pairing
    translations = [translate.answer(w) for w in words]
    assert len(set(translations)) == len(words) and set(translations).isdisjoint(words)


def test_two_phrasings_per_task_and_unknown_names_are_errors():
    for spec in ORGANISM_TASKS.values():
        assert len(set(spec.instructions)) == 2 and all("{input}" in p for p in spec.instructions)
        assert spec.user_text("cat", None) == "cat" and "cat" in spec.user_text("cat", 1)
    with pytest.raises(ValueError, match="unknown organism task"):
        organism_task("sing")


def test_composite_task_applies_the_second_answer_to_the_first():
    from headsup_lens.organism import OrganismConfig

    composite = load_task("organism/plural+uppercase")
    assert composite.name == "organism/plural+uppercase"
    assert composite.instruction == "Plural then uppercase: {input}"
    assert dict(composite.pairs)["box"] == "BOXES" and dict(composite.pairs)["child"] == "CHILDREN"
    assert composite.n_eval == 100 and composite.matcher == "starts_with"
    # Neither basic answer nor the echo counts as the composite's answer.
    word, answer = composite.pairs[0]
    for other in (word, organism_task("plural").answer(word), word.upper()):
        assert not composite.is_correct(other, answer)
    with pytest.raises(ValueError, match="two different"):
        load_task("organism/reverse+reverse")
    with pytest.raises(ValueError, match="unknown organism task"):
        load_task("organism/reverse+sing")
    base = OrganismConfig.base(steps=10)
    assert base.instructed_fraction == 0.0 and base.steps == 10
    assert OrganismConfig.base().planted_rate == OrganismConfig().planted_rate
