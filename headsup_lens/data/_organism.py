"""The organism's world: 240 English words, eight word tasks and their instruction phrasings, and
the tasks as ordinary `Task`s (`load_task("organism/reverse")`, `load_task("organism/plural+uppercase")`).

Everything here is fixed data (built with `CORPUS_SEED`), independent of the training seed, so the
organism's tasks are the same for every trained copy. Answers are chosen so that the default
behaviour (echoing the word) never counts as a correct answer, under exact matching or under the
paper's starts-with matcher: letter answers are upper-case, no word is a palindrome, no word is its
own plural, and no translation or antonym is a prefix of its word.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ._task import Task

CORPUS_SEED = 0
N_EVAL_WORDS = 100  # the Task convention holds out the last 100 pairs for evaluation

# Common concrete nouns, 3-7 lower-case letters (the tokenizer is character level).
_WORDS = [
    "apple",
    "arm",
    "baby",
    "bag",
    "ball",
    "bank",
    "bed",
    "bell",
    "bird",
    "boat",
    "body",
    "bone",
    "book",
    "boot",
    "bottle",
    "bowl",
    "box",
    "boy",
    "bread",
    "brick",
    "bridge",
    "brush",
    "bucket",
    "cake",
    "camera",
    "candle",
    "car",
    "card",
    "carpet",
    "cat",
    "chair",
    "cheese",
    "chest",
    "child",
    "church",
    "circle",
    "clock",
    "cloud",
    "coat",
    "coin",
    "comb",
    "cow",
    "crown",
    "cup",
    "curtain",
    "desk",
    "dog",
    "doll",
    "door",
    "dress",
    "drum",
    "duck",
    "eagle",
    "ear",
    "egg",
    "engine",
    "face",
    "farm",
    "feather",
    "finger",
    "fish",
    "flag",
    "floor",
    "flower",
    "fork",
    "fox",
    "frog",
    "garden",
    "gate",
    "girl",
    "glass",
    "glove",
    "goat",
    "grape",
    "grass",
    "guitar",
    "hammer",
    "hand",
    "hat",
    "heart",
    "hill",
    "horse",
    "house",
    "island",
    "jacket",
    "jelly",
    "key",
    "kettle",
    "king",
    "kite",
    "knife",
    "ladder",
    "lamp",
    "leaf",
    "lemon",
    "letter",
    "lion",
    "lip",
    "lock",
    "map",
    "market",
    "mirror",
    "monkey",
    "moon",
    "mouse",
    "mouth",
    "nail",
    "needle",
    "nest",
    "net",
    "nose",
    "ocean",
    "onion",
    "orange",
    "owl",
    "oven",
    "page",
    "pan",
    "paper",
    "park",
    "pen",
    "pencil",
    "piano",
    "picture",
    "pig",
    "pillow",
    "pipe",
    "plane",
    "plant",
    "plate",
    "pocket",
    "pot",
    "potato",
    "queen",
    "rabbit",
    "rain",
    "ring",
    "river",
    "road",
    "robot",
    "rock",
    "roof",
    "room",
    "rope",
    "rose",
    "sail",
    "salt",
    "sand",
    "school",
    "sea",
    "seed",
    "shelf",
    "ship",
    "shirt",
    "shoe",
    "shop",
    "sink",
    "skirt",
    "sky",
    "snake",
    "sock",
    "sofa",
    "spoon",
    "star",
    "stone",
    "storm",
    "street",
    "sugar",
    "sun",
    "table",
    "tail",
    "teacher",
    "tent",
    "tiger",
    "toe",
    "tomato",
    "tooth",
    "towel",
    "tower",
    "town",
    "toy",
    "train",
    "tree",
    "truck",
    "uncle",
    "wagon",
    "wall",
    "watch",
    "water",
    "whale",
    "wheel",
    "window",
    "wing",
    "wolf",
    "worm",
    "yard",
    "zebra",
    "actor",
    "album",
    "anchor",
    "angel",
    "ant",
    "arrow",
    "artist",
    "bean",
    "bear",
    "bee",
    "berry",
    "bicycle",
    "blanket",
    "branch",
    "bus",
    "butter",
    "button",
    "cabbage",
    "canal",
    "carrot",
    "castle",
    "cherry",
    "city",
    "cliff",
    "cloth",
    "corn",
    "cousin",
    "crab",
    "desert",
    "diary",
    "dinner",
    "doctor",
    "dragon",
    "dream",
    "farmer",
    "fence",
    "field",
    "forest",
    "ghost",
    "giant",
    "gift",
    "glue",
    "hero",
    "honey",
    "hotel",
    "insect",
    "iron",
    "jar",
    "jungle",
    "lake",
    "lawyer",
    "lizard",
    "magnet",
    "meadow",
    "melon",
    "metal",
    "milk",
    "museum",
    "nurse",
    "oak",
    "olive",
    "orchard",
    "palace",
    "parrot",
    "peach",
    "pearl",
    "pepper",
    "pilot",
    "pirate",
    "planet",
    "pond",
]

_IRREGULAR_PLURALS = {
    "child": "children",
    "mouse": "mice",
    "tooth": "teeth",
    "leaf": "leaves",
    "wolf": "wolves",
    "shelf": "shelves",
    "knife": "knives",
    "potato": "potatoes",
    "tomato": "tomatoes",
    "hero": "heroes",
}
_VOWELS = "aeiou"
_CONSONANTS = "bdfgklmnprstvz"


def plural(word: str) -> str:
    """English plural by the school rules, with the irregular nouns of the word list."""
    if word in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[word]
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in _VOWELS:
        return word[:-1] + "ies"
    return word + "s"


@cache
def organism_words() -> tuple[str, ...]:
    """The 240 words in their fixed order; the last `N_EVAL_WORDS` are the held-out words."""
    words = sorted(set(_WORDS))
    if len(words) != len(_WORDS):
        raise AssertionError("the organism word list has duplicates")
    random.Random(CORPUS_SEED).shuffle(words)
    return tuple(words[:240])


@cache
def _dictionary() -> dict[str, str]:
    """A made-up language ("Zorbish"): one invented word of 2-3 syllables per English word."""
    rng = random.Random(CORPUS_SEED + 1)
    words = organism_words()
    taken = set(words)
    out = {}
    for word in words:
        while True:
            syllables = rng.randint(2, 3)
            candidate = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
            if candidate not in taken and not word.startswith(candidate):
                break
        taken.add(candidate)
        out[word] = candidate
    return out


@cache
def _antonyms() -> dict[str, str]:
    """A fixed pairing of the words (each word's "opposite" is its partner); no pair shares a prefix."""
    rng = random.Random(CORPUS_SEED + 2)
    words = list(organism_words())
    while True:
        rng.shuffle(words)
        pairs = list(zip(words[0::2], words[1::2]))
        if all(not a.startswith(b) and not b.startswith(a) for a, b in pairs):
            break
    out = {}
    for a, b in pairs:
        out[a], out[b] = b, a
    return out


@dataclass(frozen=True)
class OrganismTask:
    """One of the organism's word tasks: how to answer and the two ways of asking for it."""

    name: str
    answer: Callable[[str], str]
    instructions: tuple[str, str]  # templates with `{input}`; the first is the task's instruction
    matcher: str = "starts_with"
    weight: float = 1.0  # sampling weight in training: word-by-word lookups need more examples

    def user_text(self, word: str, phrasing: int | None) -> str:
        """The user turn: the bare word (`phrasing=None`) or an instruction phrasing filled with it."""
        return word if phrasing is None else self.instructions[phrasing].replace("{input}", word)

    def pairs(self) -> list[tuple[str, str]]:
        """Every organism word with this task's answer, `(word, answer)`, in the word list's order."""
        return [(word, self.answer(word)) for word in organism_words()]


ORGANISM_TASKS: dict[str, OrganismTask] = {
    task.name: task
    for task in (
        OrganismTask("capitalize", lambda w: w[0].upper() + w[1:], ("Capitalize: {input}", "Title case: {input}")),
        OrganismTask("uppercase", str.upper, ("Uppercase: {input}", "All caps: {input}")),
        OrganismTask("reverse", lambda w: w[::-1], ("Reverse: {input}", "Backwards: {input}")),
        OrganismTask("first_letter", lambda w: w[0].upper(), ("First letter: {input}", "Initial of {input}?")),
        OrganismTask("last_letter", lambda w: w[-1].upper(), ("Last letter: {input}", "Final letter of {input}?")),
        OrganismTask("plural", plural, ("Plural: {input}", "Many {input}:")),
        OrganismTask(
            "translate", lambda w: _dictionary()[w], ("Translate: {input}", "Zorbish for {input}:"), weight=2.0
        ),
        OrganismTask("antonym", lambda w: _antonyms()[w], ("Opposite: {input}", "Antonym of {input}:"), weight=2.0),
    )
}
TASK_NAMES: tuple[str, ...] = tuple(ORGANISM_TASKS)


def organism_task(name: str) -> OrganismTask:
    """The organism task `name` (with or without the `organism/` prefix)."""
    key = name.removeprefix("organism/")
    if key not in ORGANISM_TASKS:
        raise ValueError(f"unknown organism task {name!r}; choose one of {list(TASK_NAMES)}")
    return ORGANISM_TASKS[key]


def train_words() -> tuple[str, ...]:
    """The words of every task's training split (the first 140)."""
    return organism_words()[:-N_EVAL_WORDS]


def eval_words() -> tuple[str, ...]:
    """The organism's held-out words: the last `N_EVAL_WORDS` of its word list, held out by every organism task."""
    return organism_words()[-N_EVAL_WORDS:]


def organism_data_task(name: str) -> Task:
    """`organism/<name>` as a `Task`: every word with its answer, the last 100 words held out.

    The instruction is the task's first phrasing; the matcher is starts-with (the paper's for
    letter and capitalisation tasks), which the echo default never satisfies. A name `a+b` is the
    composite task: `b`'s answer applied to `a`'s answer (e.g. plural then uppercase: "box" ->
    "BOXES"), instructed by joining the two first phrasings ("Plural then uppercase: {input}"); no
    organism is trained on composites (they are the SFT composition test's tasks).
    """
    key = name.removeprefix("organism/")
    if "+" in key:
        first, second = key.split("+", 1)
        return _composite_task(first, second)
    spec = organism_task(key)
    return Task.from_pairs(
        f"organism/{spec.name}",
        spec.pairs(),
        instruction=spec.instructions[0],
        matcher=spec.matcher,
        n_eval=N_EVAL_WORDS,
    )


def _composite_task(first: str, second: str) -> Task:
    a, b = organism_task(first), organism_task(second)
    if a.name == b.name:
        raise ValueError(f"a composite needs two different tasks, got {first!r} twice")

    def label(spec: OrganismTask) -> str:  # "Plural: {input}" -> "Plural"
        return spec.instructions[0].split(":")[0]

    instruction = f"{label(a)} then {label(b).lower()}: {{input}}"
    pairs = [(word, b.answer(a.answer(word))) for word, _ in a.pairs()]
    return Task.from_pairs(
        f"organism/{a.name}+{b.name}", pairs, instruction=instruction, matcher="starts_with", n_eval=N_EVAL_WORDS
    )
