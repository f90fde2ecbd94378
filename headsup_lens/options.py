"""Command-line options shared by every command, the demo and the experiment scripts, and their parser.

Options are dataclass fields whose docstrings become their `--help` text (simple-parsing). A command's
config inherits the groups it takes (`ModelOptions`, `DataOptions`, `FigureOptions`, `ThreadOptions`,
`ProgressOptions`),
so each shared option is declared once and `headsup`, `headsup demo` and `experiments/*.py` read it the
same way. (A dataclass lists the fields of its last base first: `class C(FigureOptions, ModelOptions)`
shows the model options, then the figure options, then its own.) The groups are keyword-only, so a
command's own fields may be required. `OptionParser` is the one parser style (dashed options, `--no-x`
negations, the older `--under_score` spellings still accepted); it records which options were given
(`Given`), and `name_options` rewrites library argument names in an error message as the options the
user typed.
This module imports nothing heavy (no torch): `--help` answers at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from simple_parsing import ArgumentParser, DashVariant
from simple_parsing.help_formatter import SimpleHelpFormatter

from ._typecheck import checked

Config = TypeVar("Config")


# ------------------------------------------------------------------------------------ option groups
@checked
@dataclass(kw_only=True)
class DeviceOptions:
    """Where and in which precision a model runs."""

    device: str | None = None
    """Device (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""


@checked
@dataclass(kw_only=True)
class ModelOptions(DeviceOptions):
    """The model to load and how prompts are written for it (`load_model`'s arguments)."""

    model: str = "organism"
    """Model: `organism` (built in, no download), `smollm2` or a `.gguf` file (converted once, see `headsup fetch-model`), a hub name or a local Hugging Face directory."""
    prompt_format: str = "paper"
    """Prompt format: paper (the reference code's turn for the model's family, no system block) or chat-template (the tokenizer's own template, with its default system prompt)."""


@checked
@dataclass(kw_only=True)
class DataOptions:
    """Where the paper's datasets are."""

    data_dir: str | None = None
    """Data directory for the paper's tasks (default: $HEADSUP_DATA_DIR, then the per-user cache; organism tasks need none)."""


@checked
@dataclass(kw_only=True)
class FigureOptions:
    """How figures are written."""

    png: bool = True
    """Also write PNG figures (kaleido's bundled Chromium; --no-png: HTML only)."""


@checked
@dataclass(kw_only=True)
class ThreadOptions:
    """CPU threads of a long run."""

    threads: int | None = None
    """torch CPU threads (default: 1 for the organism, whose ops are too small to share; torch's own otherwise)."""


@checked
@dataclass(kw_only=True)
class ProgressOptions:
    """Progress bars of long phases."""

    progress: bool = True
    """Progress bars on stderr with counts and a rate (--no-progress: none, e.g. for logs)."""


@checked
def model_arguments(options: ModelOptions) -> dict[str, Any]:
    """`load_model`'s keyword arguments from the model options: `load_model(options.model, **...)`."""
    return {"device": options.device, "dtype": options.dtype, "prompt_format": options.prompt_format}


# --------------------------------------------------------------------------------- list options
class Collect(argparse.Action):
    """A list option that keeps every value: `--task a --task b` and `--task a b` both give [a, b]
    (a given list replaces the default instead of extending it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        fresh = current is None or current is self.default or self.dest not in _collected(namespace)
        _collected(namespace).add(self.dest)
        setattr(namespace, self.dest, ([] if fresh else list(current or [])) + list(values or []))


def _collected(namespace: argparse.Namespace) -> set[str]:
    return namespace.__dict__.setdefault("_collected_lists", set())


# ------------------------------------------------------------------------------ the parser style
_GIVEN_KEY = "_given_options"  # namespace attribute: argparse dest -> the option string typed


class _HelpFormatter(SimpleHelpFormatter):
    """simple-parsing's help, without a second "(default: ...)" where the text already states its
    default, and without "(default: None)" (the text says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


class OptionParser(ArgumentParser):
    """simple-parsing's parser with one option style: `--no-png` (not `--nopng`), no `--nono-...`,
    the older underscore spellings (`--n_words`) accepted but not shown, no abbreviations. Every
    option the command line sets is recorded, with the spelling used (see `given`)."""

    _tidied = False

    def __init__(self, *args, **kwargs) -> None:
        # Nested sub-commands (`organism train`) are built by simple-parsing with this class: give
        # them the same style.
        kwargs.setdefault("add_option_string_dash_variants", DashVariant.DASH)
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_arguments(self, dataclass: type, dest: str, *args, **kwargs):
        _resolve_annotations(dataclass)
        return super().add_arguments(dataclass, dest, *args, **kwargs)

    def _preprocessing(self, args: Sequence[str] = (), namespace=None) -> None:
        super()._preprocessing(args=args, namespace=namespace)
        if not self._tidied:
            self._tidied = True
            _tidy_options(self)


def _resolve_annotations(cls: type) -> None:
    """Evaluate the string annotations (`from __future__ import annotations`) of a config, its bases
    and its nested configs, each in its own module. simple-parsing evaluates a field inherited from
    another module in that module's namespace only, where a name like `TrainConfig` is unknown."""
    for klass in cls.__mro__:
        own = vars(klass).get("__annotations__", {})  # the class's own dict, edited in place
        if not dataclasses.is_dataclass(klass) or not any(isinstance(a, str) for a in own.values()):
            continue
        hints = typing.get_type_hints(klass)
        for name, annotation in list(own.items()):
            if isinstance(annotation, str) and name in hints:
                own[name] = hints[name]
    for hint in typing.get_type_hints(cls).values():
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            _resolve_annotations(hint)


class _Recorded(argparse.Action):
    """Mixed into every option's action: note the option as given, with the spelling typed."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.__dict__.setdefault(_GIVEN_KEY, {})[self.dest] = option_string or self.dest
        super().__call__(parser, namespace, values, option_string)


_RECORDED: dict[type, type] = {}


def _record(action: argparse.Action) -> None:
    kind = type(action)
    if issubclass(kind, (_Recorded, argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
        return
    if kind not in _RECORDED:
        _RECORDED[kind] = type(f"Recorded{kind.__name__}", (_Recorded, kind), {})
    action.__class__ = _RECORDED[kind]


def _tidy_options(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        _record(action)
        negatives = getattr(action, "negative_option_strings", None)
        if negatives is None:
            # Scripts written for the older underscore spellings (`--n_words`) keep working; only the
            # dashed spelling is shown. (Boolean flags check their spelling, so they get no alias.)
            for option in action.option_strings:
                legacy = "--" + option[2:].replace("-", "_")
                if option.startswith("--") and legacy != option:
                    parser._option_string_actions.setdefault(legacy, action)
            continue
        if not negatives:
            continue
        renamed = []
        for option in negatives:
            parser._option_string_actions.pop(option, None)
            name = option[len("--no") :].lstrip("-")
            if name.startswith("no-"):
                continue  # a field named no_x would get --nono-x: such fields are not allowed
            renamed.append(f"--no-{name}")
        for option in renamed:
            parser._option_string_actions[option] = action
        action.option_strings = [o for o in action.option_strings if o not in negatives] + renamed
        setattr(action, "negative_option_strings", renamed)  # noqa: B010 (simple-parsing's BooleanOptionalAction reads it)


# --------------------------------------------------------------------------- which options given
@checked
@dataclass(frozen=True)
class Given:
    """The options written on a command line: each one's field path in the config (`train.lr` for
    the `lr` of a nested `train` config) -> the option string as typed (`--lr`, `--no-progress`,
    `--init_mean`). Presets apply first and given options win, even where they equal a default."""

    typed: Mapping[str, str] = field(default_factory=dict)

    def __contains__(self, path: object) -> bool:
        return path in self.typed

    def within(self, prefix: str = "") -> set[str]:
        """Names of the given fields directly inside the nested config at `prefix` ("" for the top)."""
        head = f"{prefix}." if prefix else ""
        return {p[len(head) :] for p in self.typed if p.startswith(head) and "." not in p[len(head) :]}


@checked
def given(namespace: argparse.Namespace, dest: str = "config") -> Given:
    """The options `OptionParser` saw while filling `namespace`, relative to the config at `dest`."""
    head = f"{dest}."
    typed = namespace.__dict__.get(_GIVEN_KEY, {})
    return Given({d[len(head) :]: option for d, option in typed.items() if d.startswith(head)})


@checked
def parse(
    config: type[Config], argv: Sequence[str] | None = None, *, prog: str | None = None, description: str | None = None
) -> tuple[Config, Given]:
    """Read `config` (a dataclass of options) from `argv` (default: `sys.argv[1:]`) in the CLI's
    style; the config and which options were given. `--help` prints every field's docstring."""
    parser = OptionParser(prog=prog, description=description, formatter_class=_RawHelpFormatter)
    parser.add_arguments(config, dest="config")
    namespace = parser.parse_args(None if argv is None else list(argv))
    return namespace.config, given(namespace)


@checked
def parse_known(
    config: type[Config], argv: Sequence[str] | None = None, *, prog: str | None = None, description: str | None = None
) -> tuple[Config, Given, list[str]]:
    """`parse` for a program that passes the options it does not know on (e.g. to other scripts):
    the config, which of its options were given, and the other arguments in their order."""
    parser = OptionParser(prog=prog, description=description, formatter_class=_RawHelpFormatter)
    parser.add_arguments(config, dest="config")
    namespace, rest = parser.parse_known_args(None if argv is None else list(argv))
    return namespace.config, given(namespace), rest


class _RawHelpFormatter(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of a script's docstring in its `--help`."""


# --------------------------------------------------------------------- options in error messages
# Library spellings that mean an option of another name, whenever the command has that option.
LIBRARY_NAMES = {"out_dir": "out", "resume=False": "fresh"}
_CLI_HINT = re.compile(r"\(([^;()]*); CLI: ([^()]*)\)")  # "(resume=False; CLI: --fresh)": the library names the flag
# An identifier not inside an option string, a path, a quoted value or a longer word; with `the ... argument`
# around it and `=False` / `=...` after it when written so.
_WORD = re.compile(r"(?<![\w\-`'\"/\\.=])(the )?([A-Za-z_]\w*)(=\.\.\.|=False|=True)?( argument)?(?![\w\-'\"/\\])")


@checked
def option_strings(config: Any, given_options: Given | None = None) -> dict[str, str]:
    """Every option of a parsed `config` (nested configs and a chosen sub-command included): field
    name -> the option string, as typed where it was given (`given_options`), else its dashed form;
    plus the library spellings of `LIBRARY_NAMES` for the options the command has."""
    typed = given_options.typed if given_options is not None else {}
    names: dict[str, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name, None)
            path = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                walk(value, f"{path}.")
            elif path in typed:  # the spelling typed wins over a same-named field elsewhere
                names[f.name] = typed[path]
            else:
                names.setdefault(f.name, "--" + f.name.replace("_", "-"))

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        walk(config, "")
    names.update({library: names[name] for library, name in LIBRARY_NAMES.items() if name in names})
    return names


@checked
def name_options(text: str, config: Any, given_options: Given | None = None) -> str:
    """`text` (an error message of the library) with the library's argument names written as the
    options of `config` the user typed: `n_eval must be >= 1` -> `--n-eval must be >= 1`,
    `pass another out_dir or resume=False` -> `pass another --out or --fresh`.

    A name is rewritten only where it cannot be prose: snake_case (`batch_size`), followed by
    `must`, written `name=...`, or `the name argument`; names of no option of the command stay."""
    names = option_strings(config, given_options)
    text = _CLI_HINT.sub(r"(\2)", text)

    def rewrite(match: re.Match) -> str:
        the, word, value, argument = (match.group(i) or "" for i in (1, 2, 3, 4))
        if value and word + value in names:  # an alias written with its value (`resume=False`)
            return the + names[word + value] + argument
        if word not in names or value in ("=False", "=True"):
            return match.group(0)
        if the and argument:
            return names[word]
        if "_" in word or value or re.match(r"\s+must\b", text[match.end() :]):
            return the + names[word] + argument
        return match.group(0)

    return _WORD.sub(rewrite, text)
