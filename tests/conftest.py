"""Builders for tiny models and tiny datasets; no test downloads anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from hypothesis import settings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests use tiny models: threads gain nothing there, and spinning threads stall on a busy machine.
torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Property-based tests (hypothesis). The default run is reproducible: the same examples on every run and
# machine (`derandomize`: seeded from each test), a bounded number of them, no example database (a
# failure found once in `.hypothesis/` must not turn every later run red), no deadline (a shared
# machine's load would make timing flaky). The `explore` profile draws ten times as many random
# examples and keeps what it finds in `.hypothesis/`; the slow command (`pytest -m slow`) runs every
# property test under it, or choose it with `--hypothesis-profile explore` / `HYPOTHESIS_PROFILE=explore`.
settings.register_profile("headsup", max_examples=40, deadline=None, derandomize=True, database=None)
settings.register_profile("explore", max_examples=400, deadline=None, derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "headsup"))
EXPLORE = "explore"


def pytest_configure(config: pytest.Config) -> None:
    """`pytest -m slow` also runs the property tests (hypothesis marks them), exploring: random examples,
    ten times as many (unless a profile is chosen explicitly)."""
    if (config.option.markexpr or "").strip() != "slow":
        return
    config.option.markexpr = "slow or hypothesis"
    if not config.getoption("hypothesis_profile", None) and "HYPOTHESIS_PROFILE" not in os.environ:
        settings.load_profile(EXPLORE)


# Chat templates in the style of real model families, for tokenizers built here (the tests' model builders below).
# The ChatML and Llama-3 ones inject a default system block, as Qwen2.5, SmolLM2 and Llama-3.1 do.
FAMILY_TEMPLATES = {
    "chatml": (
        "{%- if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
        "{%- set loop_messages = messages[1:] %}"
        "{%- else %}{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}"
        "{%- set loop_messages = messages %}{%- endif %}"
        "{%- for message in loop_messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
    ),
    "llama3": (
        "{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
        "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- set loop_messages = messages[1:] %}"
        "{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- '<|eot_id|>' }}"
        "{%- for message in loop_messages %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}"
        "{% endfor %}"
    ),
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
    ),
    "gemma2": (
        "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
    ),
}
FAMILY_SPECIALS = {
    "chatml": {"bos": None, "eos": "<|im_end|>", "extra": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]},
    "llama3": {
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "extra": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"],
    },
    "mistral": {"bos": "<s>", "eos": "</s>", "extra": ["<s>", "</s>"]},
    "phi3": {"bos": "<s>", "eos": "<|end|>", "extra": ["<s>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"]},
    "gemma2": {"bos": "<bos>", "eos": "<eos>", "extra": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]},
}
_CORPUS = (
    "the quick brown fox jumps over the lazy dog . a girl and a boy say hello to the world , "
    "hot cold up down big small happy sad yes no good bad day night open close left right "
    "translate into english french german chinese : output the opposite of the given word"
)


def subword_tokenizer(
    family: str = "chatml", kind: str = "sentencepiece", vocab_size: int = 300
) -> PreTrainedTokenizerFast:
    """A small trained subword tokenizer with a model family's specials and chat template.

    `kind="sentencepiece"`: BPE over "▁"-marked words (Metaspace, like Llama-2/Mistral/Gemma), so a
    word alone starts with "▁" but not after a newline; `kind="bytelevel"`: byte-level BPE (GPT-2,
    Llama-3, Qwen2, SmolLM2). Trained in-process on a fixed text: deterministic, no download.
    """
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if family not in FAMILY_TEMPLATES:
        raise ValueError(f"family must be one of {sorted(FAMILY_TEMPLATES)}, not {family!r}")
    specials = FAMILY_SPECIALS[family]
    special_tokens = ["<unk>", "<pad>", *[t for t in specials["extra"] if t not in ("<unk>", "<pad>")]]
    if kind == "sentencepiece":
        backend = Tokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = sorted(set(string.ascii_letters + string.digits + ".,:;!?'-\n▁"))
    elif kind == "bytelevel":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        raise ValueError(f"kind must be 'sentencepiece' or 'bytelevel', not {kind!r}")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator([_CORPUS] * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>" if kind == "sentencepiece" else None,
        pad_token="<pad>",
        bos_token=specials["bos"],
        eos_token=specials["eos"],
        additional_special_tokens=[t for t in specials["extra"] if t not in (specials["bos"], specials["eos"])],
    )
    tokenizer.chat_template = FAMILY_TEMPLATES[family]
    return tokenizer


def build_llama_dir(path: Path, **overrides) -> Path:
    """A grouped-query Llama (8 query heads over 2 KV heads) with a character tokenizer, saved to `path`.

    Norm gains and biases are drawn away from 1/0 and the embeddings are untied, as in real models.
    """
    from headsup_lens.models import random_llama_dir

    return random_llama_dir(path, **overrides)


def build_qwen2_dir(path: Path, **overrides) -> Path:
    """A grouped-query Qwen2 (q/k/v biases) with a byte-level BPE tokenizer and a ChatML chat template
    that injects a default system prompt (like Qwen2.5 and SmolLM2), saved to `path`."""
    from headsup_lens.models import random_llama_dir

    return random_llama_dir(path, tokenizer=subword_tokenizer("chatml", "bytelevel"), architecture="qwen2", **overrides)


def build_spm_dir(path: Path, **overrides) -> Path:
    """A grouped-query Llama with a SentencePiece-like subword tokenizer ("▁" word starts, an unknown
    token) and a ChatML chat template, saved to `path`."""
    from headsup_lens.models import random_llama_dir

    return random_llama_dir(path, tokenizer=subword_tokenizer("chatml", "sentencepiece"), **overrides)


def build_gemma3_dir(path: Path, **overrides) -> Path:
    """A Gemma-3 text model (QK-norm, two sliding-window layers of window 6 and a global one, tied
    embeddings as Gemma-3-270M) with a SentencePiece-like tokenizer and no chat template (a base
    model: the plain `{x}\\n\\n` template applies), saved to `path`."""
    from headsup_lens.models import random_llama_dir

    tokenizer = subword_tokenizer("gemma2", "sentencepiece")
    tokenizer.chat_template = None
    return random_llama_dir(path, tokenizer=tokenizer, architecture="gemma3", **overrides)


def build_gpt2_dir(path: Path, **overrides) -> Path:
    """A GPT-2 (4 heads, no chat template: the plain `{x}\\n\\n` template applies), saved to `path`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from headsup_lens.models import char_tokenizer
    from headsup_lens.models._builders import realistic_

    tokenizer = char_tokenizer()
    tokenizer.chat_template = None
    settings = dict(
        vocab_size=len(tokenizer),
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=256,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    settings.update(overrides)
    torch.manual_seed(settings.pop("seed", 0))
    model = realistic_(GPT2LMHeadModel(GPT2Config(**settings)))  # GPT-2 ties its embeddings, as the real one
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> Path:
    return build_llama_dir(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    return build_gpt2_dir(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory) -> Path:
    return build_qwen2_dir(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="session")
def qwen2(qwen2_dir):
    from headsup_lens import load_model

    return load_model(qwen2_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def gemma3_dir(tmp_path_factory) -> Path:
    return build_gemma3_dir(tmp_path_factory.mktemp("gemma3"))


@pytest.fixture(scope="session")
def gemma3(gemma3_dir):
    from headsup_lens import load_model

    return load_model(gemma3_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def spm_dir(tmp_path_factory) -> Path:
    return build_spm_dir(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="session")
def spm(spm_dir):
    from headsup_lens import load_model

    return load_model(spm_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def llama(llama_dir):
    from headsup_lens import load_model

    return load_model(llama_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def gpt2(gpt2_dir):
    from headsup_lens import load_model

    return load_model(gpt2_dir, device="cpu", dtype="float32")


@pytest.fixture(params=["llama", "gpt2", "spm"])
def any_model(request):
    """Each test using it runs on the grouped-query Llama (character tokenizer), on GPT-2 (no chat
    template) and on a Llama with a SentencePiece-like tokenizer and a ChatML template."""
    return request.getfixturevalue(request.param)


def random_tokens(model, batch: int = 3, pos: int = 7, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # Skip the special tokens so prompts look like text.
    return torch.randint(4, model.cfg.d_vocab, (batch, pos), generator=generator)


def random_mask(model, seed: int = 0, p_keep: float = 0.5, rows: int | None = None) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shape = (model.cfg.n_layers, model.cfg.n_heads) if rows is None else (rows, model.cfg.n_layers, model.cfg.n_heads)
    return (torch.rand(shape, generator=generator) < p_keep).float()


@pytest.fixture
def shared_data_dir() -> Path:
    """The paper's datasets: `HEADSUP_DATA_DIR` when set, else ../shared/data beside the checkout."""
    path = Path(os.environ.get("HEADSUP_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip(f"shared data not available at {path}")
    return path


REPOSITORY = Path(__file__).resolve().parents[1]


def run_script(script: str, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    """Run `experiments/<script>` as its users do, in a fresh process on this checkout's package, and
    check its exit code; its stdout and stderr are in the result (and in the failure message)."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(REPOSITORY / "experiments" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPOSITORY,
    )
    assert done.returncode == expect, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def load_script(script: str):
    """`experiments/<script>` imported in this process (its `Options` and constants), once: dataclasses
    look their module up in `sys.modules` while they are defined."""
    import importlib.util

    name = f"experiments_{Path(script).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPOSITORY / "experiments" / script)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


# Tiny decoders of further Hugging Face families (random weights, character tokenizer): the gates'
# fast path runs each model's own code, so each family is compared with the hook_z reference. Each is
# an architecture of `random_llama_dir` (untied embeddings here, Gemma-3 included) with these fields
# set apart from its own: Gemma-3 alternates a sliding-window layer (window 4) and a full-attention one.
FAMILY_SETTINGS: dict[str, dict] = {
    "mistral": {},
    "qwen3": {},
    "gemma3": dict(
        head_dim=8,
        query_pre_attn_scalar=256,
        sliding_window=4,
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=False,
    ),
    "phi3": {},
}
FAMILIES = tuple(FAMILY_SETTINGS)
# Gemma-3 with windows longer than the test rows: fixed-shape decoding and packed loss passes serve it
# (with conftest's window of 4 they are declined, as a sliding layer's keys then roll or band).
WIDE_GEMMA = dict(FAMILY_SETTINGS["gemma3"], sliding_window=64)


def build_family_dir(path: Path, family: str, seed: int = 0) -> Path:
    """A tiny `family` decoder (2 layers, 8 query heads over 2 KV heads, d_model 64) saved to `path`."""
    from headsup_lens.models import random_llama_dir

    return random_llama_dir(path, seed, architecture=family, **FAMILY_SETTINGS[family])


@pytest.fixture(scope="session")
def wide_gemma(tmp_path_factory):
    """The tiny Gemma-3 of `FAMILY_SETTINGS` with sliding windows of 64 (`WIDE_GEMMA`)."""
    from headsup_lens import load_model
    from headsup_lens.models import random_llama_dir

    folder = random_llama_dir(tmp_path_factory.mktemp("gemma3_wide"), 0, architecture="gemma3", **WIDE_GEMMA)
    return load_model(folder, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def family_model(tmp_path_factory):
    """`family_model(name)`: a tiny model of a family in `FAMILIES`, built once per session."""
    from headsup_lens import load_model

    built = {}

    def get(family: str):
        if family not in built:
            folder = build_family_dir(tmp_path_factory.mktemp(family), family)
            built[family] = load_model(folder, device="cpu", dtype="float32")
        return built[family]

    return get


# `headsup` commands run one after the other in one fresh process (no torch loaded at its start).
_CLI_CASES = """
import contextlib, io, json, sys
from headsup_lens.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    results.append([code, err.getvalue()])
print(json.dumps({"results": results, "torch": "torch" in sys.modules}))
"""


def cli_in_a_fresh_process(cases: list[list[str]]) -> tuple[list[tuple[int, str]], bool]:
    """Run `headsup ARGV` for each of `cases` in one new process on this checkout: (exit code, stderr)
    of each, and whether torch had been imported by the end (a refusal before any work imports none)."""
    import json

    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _CLI_CASES, json.dumps(cases)], capture_output=True, text=True, env=env, cwd=REPOSITORY
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return [(code, err) for code, err in report["results"]], report["torch"]
