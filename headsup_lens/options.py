"""Command-line options shared by every command, the demo and the experiment scripts, and their parser.

Options are dataclass fields; each field's docstring (or the comment on its line) is its `--help`
text, so the command line is generated from the configs and cannot drift from them. A command's
config inherits the groups it takes (`ModelOptions`, `DataOptions`, `FigureOptions`, `ThreadOptions`,
`ProgressOptions`, `PromptOptions`), so each shared option is declared once and `headsup`, `headsup demo` and
`experiments/*.py` read it the same way. (A dataclass lists the fields of its last base first:
`class C(FigureOptions, ModelOptions)` shows the model options, then the figure options, then its
own.) The groups are keyword-only, so a command's own fields may be required.

`OptionParser` is plain argparse built from a dataclass: dashed options (the older `--under_score`
spellings still accepted, not shown), `--x / --no-x` flags, lists that take several values or repeat,
`--help` sections named for what they set ("Model", "Training", "Evaluation", ...). The config is
built, and so validated by its `__post_init__`, while the command line is read: a value out of range
is a usage error naming the option (exit 2). It records which options were given (`Given`), and
`name_options` rewrites library argument names in an error message as the options the user typed.
This module imports nothing heavy (no torch): `--help` answers at once.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import re
import sys
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ._typecheck import checked
from ._validate import check_device, check_float, check_int

Config = TypeVar("Config")


# ------------------------------------------------------------------------------------ option groups
class Options:
    """Base of every option group and command config: each `__post_init__` checks its own fields and
    calls `super().__post_init__()`, so a config that combines groups checks all of them once."""

    def __post_init__(self) -> None:
        pass


def recipe_of(config: Any, how: Sequence[str]) -> dict[str, Any]:
    """The fields of a config dataclass that decide its result (what a resumed run must share): all
    but those in `how`, which say how it runs, not what it computes."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in how}


def check_counts(config: Any, **minimums: int) -> None:
    """The counts of an options config at their minimum (`top_k=1`, `seed=0`); None means the default.
    A ValueError names the field and its value: `--top-k must be >= 1, got 0` on the command line."""
    for name, minimum in minimums.items():
        value = getattr(config, name)
        if value is not None:
            check_int(name, value, minimum=minimum)


@checked
@dataclass(frozen=True, kw_only=True)
class DeviceOptions(Options):
    """Where and in which precision a model runs."""

    device: str | None = None
    """Device: cpu, cuda or cuda:N (default: cuda when available)."""
    dtype: str | None = None
    """Model dtype (default: bf16 on CUDA, fp32 on CPU)."""

    def __post_init__(self) -> None:
        if self.device is not None:
            object.__setattr__(self, "device", check_device("device", self.device))
        super().__post_init__()


@checked
@dataclass(frozen=True, kw_only=True)
class ModelOptions(DeviceOptions):
    """The model to load and how prompts are written for it (`load_model`'s arguments)."""

    model: str = "organism"
    """Model: `organism` (built in, no download), `smollm2` or a `.gguf` file (converted once, see `headsup fetch-model`), a hub name or a local Hugging Face directory."""
    prompt_format: str = "paper"
    """Prompt format: paper (the reference code's turn for the model's family, no system block) or chat-template (the tokenizer's own template, with its default system prompt)."""


@checked
@dataclass(frozen=True, kw_only=True)
class PromptOptions(Options):
    """One user prompt that a command reads the model on."""

    prompt: str
    """User text, wrapped in the model's chat template unless --formatted."""
    formatted: bool = False
    """The prompt is already chat-formatted."""


@checked
@dataclass(frozen=True, kw_only=True)
class DataOptions(Options):
    """Where the paper's datasets are."""

    data_dir: str | None = None
    """Data directory for the paper's tasks (default: $HEADSUP_DATA_DIR, then the per-user cache; organism tasks need none)."""


@checked
@dataclass(frozen=True, kw_only=True)
class FigureOptions(Options):
    """How figures are written."""

    png: bool = True
    """Also write PNG figures (kaleido's bundled Chromium; --no-png: HTML only)."""


@checked
@dataclass(frozen=True, kw_only=True)
class ThreadOptions(Options):
    """CPU threads of a long run."""

    threads: int | None = None
    """torch CPU threads, 1 or more (default: 1 for the organism, whose ops are too small to share; torch's own otherwise)."""

    def __post_init__(self) -> None:
        check_counts(self, threads=1)
        super().__post_init__()


@checked
@dataclass(frozen=True, kw_only=True)
class ProgressOptions(Options):
    """Progress bars of long phases."""

    progress: bool = True
    """Progress bars on stderr with counts and a rate (--no-progress: none, e.g. for logs)."""


@checked
@dataclass(frozen=True, kw_only=True)
class DebugOptions(Options):
    """How a script reports a failure (the `headsup` command line has `headsup --debug`)."""

    debug: bool = False
    """Show the Python traceback of an error or an interruption instead of one line."""


@checked
@dataclass(frozen=True, kw_only=True)
class ShardOptions(Options):
    """How a command started by `torchrun` spreads the model over the job's ranks."""

    shard: Literal["fsdp"] | None = None
    """Shard the weights over the ranks of the torchrun job with FSDP2 (each rank holds 1/N of every weight and reads only that from the checkpoint); without it every rank holds the whole model."""
    timeout_minutes: float = 30.0
    """Under torchrun: how long a rank waits for the others at a collective before the job fails (a rank that dies is noticed at once)."""

    def __post_init__(self) -> None:
        check_float("timeout_minutes", self.timeout_minutes, 0.0, low_open=True)
        super().__post_init__()


# The `--help` section of each shared group (the fields a command declares itself come first, under "options").
GROUP_TITLES: dict[type, str] = {
    DeviceOptions: "Model",
    ModelOptions: "Model",
    DataOptions: "Data",
    FigureOptions: "Output",
    ThreadOptions: "Run",
    ProgressOptions: "Output",
    PromptOptions: "Prompt",
    ShardOptions: "Distributed (torchrun)",
}


@checked
def model_arguments(options: ModelOptions) -> dict[str, Any]:
    """`load_model`'s keyword arguments from the model options: `load_model(options.model, **...)`."""
    return {"device": options.device, "dtype": options.dtype, "prompt_format": options.prompt_format}


def option(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    positional: bool = False,
    aliases: Sequence[str] = (),
    choices: Sequence[Any] | None = None,
    metavar: str | None = None,
    group: str | None = None,
    subcommands: Mapping[str, type] | None = None,
    cmd: bool = True,
) -> Any:
    """A dataclass field with what its command-line option needs beyond its type and docstring: a
    positional argument, other spellings (`aliases=["--output"]`), `choices`, the `--help` section
    of a nested config (`group="Training"`), sub-commands (`subcommands={"train": ..., "check": ...}`),
    or no option at all (`cmd=False`). Lists need nothing: every `list`/`tuple` field takes several
    values (`--task a b`) and repeats (`--task a --task b`)."""
    metadata = {
        "positional": positional,
        "aliases": tuple(aliases),
        "choices": None if choices is None else tuple(choices),
        "metavar": metavar,
        "group": group,
        "subcommands": None if subcommands is None else dict(subcommands),
        "cmd": cmd,
    }
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# ------------------------------------------------------------------------- help text of each field
def field_docs(cls: type) -> dict[str, str]:
    """Each field's help text: the docstring under it, else the comment on its line (every class of
    the MRO, the nearest winning)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_class_docs(klass))
    return docs


_DOCS: dict[type, dict[str, str]] = {}


def _class_docs(klass: type) -> dict[str, str]:
    if klass in _DOCS:
        return _DOCS[klass]
    docs: dict[str, str] = {}
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # defined in a -c string or an interactive session: no help texts
        source = ""
    if source:
        lines = source.splitlines()
        body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)).body
        for node, after in zip(body, [*body[1:], None]):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            name = node.target.id
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[name] = " ".join(inspect.cleandoc(after.value.value).split())
            else:
                tail = lines[(node.end_lineno or node.lineno) - 1][node.end_col_offset or 0 :].strip()
                if tail.startswith("#"):
                    docs[name] = tail.lstrip("#").strip()
    _DOCS[klass] = docs
    return docs


# --------------------------------------------------------------------------- converters and actions
def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


_BOOLS = {"true": True, "yes": True, "false": False, "no": False}  # `--png false`, as older scripts write it


def _boolean(text: str) -> bool:
    """An element of a list of booleans (`--checkpointing false true`)."""
    if text.lower() not in _BOOLS:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return _BOOLS[text.lower()]


_CONVERTERS: dict[Any, Any] = {int: _integer, float: _finite_float, str: str, bool: _boolean}
_GIVEN_KEY = "_given_options"  # namespace attribute: field path -> the option string typed


def _record(namespace: argparse.Namespace, path: str, option_string: str | None) -> None:
    given_options = getattr(namespace, _GIVEN_KEY, None)
    if given_options is None:
        given_options = {}
        setattr(namespace, _GIVEN_KEY, given_options)
    given_options[path] = option_string or path


class _Store(argparse.Action):
    """A single value; the option is recorded as given with the spelling typed."""

    def __call__(self, parser, namespace, values, option_string=None):
        _record(namespace, self.dest, option_string)
        setattr(namespace, self.dest, values)


class Collect(_Store):
    """A list option that keeps every value: `--task a --task b` and `--task a b` both give [a, b]
    (a given list replaces the default instead of extending it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        typed = getattr(namespace, _GIVEN_KEY, None) or {}
        current = getattr(namespace, self.dest, None) if self.dest in typed else None
        super().__call__(parser, namespace, [*(current or []), *(values or [])], option_string)


class _Flag(_Store):
    """`--x` sets True, `--no-x` sets False."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _record(namespace, self.dest, option_string)
        setattr(namespace, self.dest, not (option_string or "").startswith("--no-"))


# ------------------------------------------------------------------------------------- the parser
@dataclass(frozen=True)
class _Spec:
    """One option of a config: where its value goes and how it becomes the field's value."""

    path: str  # field path inside the config: `lr`, `train.lr`
    kind: str  # "value", "list", "tuple"


class OptionParser(argparse.ArgumentParser):
    """argparse with one option style, built from dataclasses (`add_arguments`): dashed options,
    `--x / --no-x` flags, the older underscore spellings (`--n_words`) accepted but not shown, no
    abbreviations. The configs are built (and so validated) as the command line is read; a value a
    config refuses is a usage error naming the option. Every option set is recorded (`given`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._configs: dict[str, type] = {}  # namespace attribute -> config class built there
        self._specs: dict[str, dict[str, _Spec]] = {}
        self._dashed: set[str] = set()  # every option string, to accept its underscore spelling
        self._flags: set[str] = set()  # `--x` of every flag, to accept `--x true` / `--x false`
        self._sections: dict[str, Any] = {}  # --help section title -> its argument group
        self.subcommands: dict[str, OptionParser] = {}  # `organism train`: the parser of each sub-command

    # -------------------------------------------------------------------------- building
    def add_arguments(self, config: type, dest: str = "config") -> None:
        """One option per field of the dataclass `config` (nested configs included); the parsed
        namespace holds the built config at `dest`."""
        self._configs[dest] = config
        self._specs[dest] = {}
        self._add_fields(config, dest, "", None)

    def _section(self, title: str | None) -> Any:
        if title is None:
            return self
        if title not in self._sections:
            self._sections[title] = self.add_argument_group(title)
        return self._sections[title]

    def _add_fields(self, config: type, dest: str, prefix: str, section: str | None) -> None:
        hints = typing.get_type_hints(config)
        docs = field_docs(config)
        owner = _declared_in(config)
        for f in dataclasses.fields(config):
            meta = f.metadata
            if not meta.get("cmd", True) or not f.init:
                continue
            path = f"{prefix}{f.name}"
            hint = hints[f.name]
            if meta.get("subcommands"):
                self._add_subcommands(dest, path, meta["subcommands"])
                continue
            nested = _dataclass_of(hint)
            if nested is not None:
                title = meta.get("group") or GROUP_TITLES.get(nested) or docs.get(f.name, "").rstrip(".")
                self._add_fields(nested, dest, f"{path}.", title or None)
                continue
            title = section or GROUP_TITLES.get(owner.get(f.name, config))
            self._add_field(self._section(title), f, hint, docs.get(f.name, ""), dest, path)

    def _add_field(self, where: Any, f: dataclasses.Field, hint: Any, doc: str, dest: str, path: str) -> None:
        meta = f.metadata
        base, kind = _unwrap(hint)
        kwargs: dict[str, Any] = {"dest": f"{dest}.{path}", "default": argparse.SUPPRESS}
        choices = meta.get("choices")
        if typing.get_origin(base) is Literal:
            choices = choices or typing.get_args(base)
            base = type(choices[0])
        if base is bool and kind == "value":
            kwargs["action"] = _Flag
        else:
            if base not in _CONVERTERS:
                raise TypeError(f"{f.name}: options of type {hint} are not supported")
            kwargs["type"] = _CONVERTERS[base]
            kwargs["action"] = Collect if kind != "value" else _Store
            if kind != "value":
                kwargs["nargs"] = "+"
            if choices:
                kwargs["choices"] = choices
            kwargs["metavar"] = meta.get("metavar") or (None if choices else f.name.upper())
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        kwargs["help"] = _help_text(doc, f, kwargs["action"] is _Flag, required).replace("%", "%%")
        if meta.get("positional"):
            kwargs.pop("dest")
            name = f"{dest}.{path}"
            where.add_argument(name, **kwargs)
        else:
            strings = [f"--{f.name.replace('_', '-')}"]
            if kwargs["action"] is _Flag:
                strings.append(f"--no-{f.name.replace('_', '-')}")
                self._flags.add(strings[0])
            strings += list(meta.get("aliases", ()))
            kwargs["required"] = required
            where.add_argument(*strings, **kwargs)
            self._dashed.update(s for s in strings if "-" in s[2:])
        self._specs[dest][f"{dest}.{path}"] = _Spec(path, kind)

    def _add_subcommands(self, dest: str, path: str, choices: Mapping[str, type]) -> None:
        sub = self.add_subparsers(dest=f"{dest}.{path}.command", required=True, metavar="ACTION")
        self._specs[dest][f"{dest}.{path}"] = _Spec(path, "subcommand")
        for name, config in choices.items():
            child = sub.add_parser(name, help=(config.__doc__ or "").split("\n")[0], description=config.__doc__)
            child.add_arguments(config, dest=f"{dest}.{path}")
            self.subcommands[name] = child

    def error(self, message: str):  # type: ignore[override]
        """A usage error as one line on stderr (the option, its value, what is allowed), exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    # -------------------------------------------------------------------------- reading
    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's reading, after the older spellings are read as today's (`--n_words` as
        `--n-words`, `--png false` as `--no-png`); then every config is built at its `dest`."""
        argv, renamed = self._spelled(list(sys.argv[1:] if args is None else args))
        namespace, rest = super().parse_known_args(argv, namespace)
        typed = getattr(namespace, _GIVEN_KEY, None)
        if typed is not None and renamed:  # the spelling typed, for messages
            typed.update({path: renamed[spelling] for path, spelling in typed.items() if spelling in renamed})
        for dest, config in self._configs.items():
            self._build(namespace, dest, config)
        return namespace, rest

    def _spelled(self, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """`argv` in today's spellings, and today's spelling -> the one typed (for messages)."""
        out: list[str] = []
        renamed: dict[str, str] = {}
        i = 0
        while i < len(argv):
            token = argv[i]
            i += 1
            if token == "--":
                out += argv[i - 1 :]
                break
            name, eq, value = token.partition("=")
            dashed = name.replace("_", "-") if name.startswith("--") else name
            if dashed not in self._dashed and dashed not in self._flags:
                out.append(token)
                continue
            if dashed != name:
                renamed[dashed] = name
            if dashed in self._flags:
                if not eq and i < len(argv) and argv[i].lower() in _BOOLS:  # `--png false` (the older style)
                    value, eq = argv[i], "="
                    i += 1
                if eq:
                    if value.lower() not in _BOOLS:
                        self.error(f"argument {name}: expected true or false, got {value!r}")
                    if not _BOOLS[value.lower()]:
                        dashed = "--no-" + dashed[2:]
                    renamed[dashed] = name
                out.append(dashed)
                continue
            out.append(dashed + eq + value)
        return out, renamed

    def _build(self, namespace: argparse.Namespace, dest: str, config: type) -> None:
        values: dict[str, Any] = {}
        for attribute, spec in self._specs[dest].items():
            if spec.kind == "subcommand":
                values[spec.path] = getattr(namespace, attribute)
            elif hasattr(namespace, attribute):
                value = getattr(namespace, attribute)
                values[spec.path] = tuple(value) if spec.kind == "tuple" else value
            else:
                continue
            delattr(namespace, attribute)
        try:
            built = _construct(config, values, "")
        except (ValueError, TypeError) as error:
            head = f"{dest}."
            typed = {p[len(head) :]: o for p, o in _typed(namespace).items() if p.startswith(head)}
            self.error(_option_names(" ".join(str(error).split()), _names_of(config, typed)))
        setattr(namespace, dest, built)


def _typed(namespace: argparse.Namespace) -> dict[str, str]:
    return dict(getattr(namespace, _GIVEN_KEY, None) or {})


def _construct(config: type, values: Mapping[str, Any], prefix: str) -> Any:
    """`config(...)` from the given values (field path -> value); nested configs are built first."""
    hints = typing.get_type_hints(config)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        path = f"{prefix}{f.name}"
        nested = _dataclass_of(hints[f.name])
        if path in values:
            kwargs[f.name] = values[path]
        elif nested is not None and not f.metadata.get("subcommands") and any(p.startswith(f"{path}.") for p in values):
            kwargs[f.name] = _construct(nested, values, f"{path}.")
    return config(**kwargs)


def _declared_in(config: type) -> dict[str, type]:
    """Each field name -> the class of the MRO that declares it (the first one, as dataclasses do)."""
    owner: dict[str, type] = {}
    for klass in reversed(config.__mro__):
        for name in vars(klass).get("__annotations__", {}):
            owner.setdefault(name, klass)
    return owner


def _dataclass_of(hint: Any) -> type | None:
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _unwrap(hint: Any) -> tuple[Any, str]:
    """(element type, kind) of a field's annotation: `X | None` -> X; `list[X]`, `tuple[X, ...]` -> X."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) == 1:
            hint = options[0]
    origin = typing.get_origin(hint)
    if origin in (list, tuple, Sequence):
        return typing.get_args(hint)[0], "tuple" if origin is tuple else "list"
    return hint, "value"


def _help_text(doc: str, f: dataclasses.Field, flag: bool, required: bool) -> str:
    if required or flag or "(default" in doc:
        return doc
    default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    if default is None or default == "" or default in ((), []):
        return doc
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f"{doc} (default: {shown})"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help with the terminal's width and room for the option names."""

    def __init__(self, prog: str, **kwargs) -> None:
        kwargs.setdefault("max_help_position", 32)
        super().__init__(prog, **kwargs)


class _RawHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """Keeps the line breaks of a script's docstring in its `--help`."""


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
    return Given({d[len(head) :]: option for d, option in _typed(namespace).items() if d.startswith(head)})


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


# --------------------------------------------------------------------- options in error messages
# Library spellings that mean an option of another name, whenever the command has that option.
LIBRARY_NAMES = {"out_dir": "out", "resume=False": "fresh"}
_CLI_HINT = re.compile(r"\(([^;()]*); CLI: ([^()]*)\)")  # "(resume=False; CLI: --fresh)": the library names the flag
# An identifier not inside an option string, a path, a quoted value or a longer word; with `the ... argument`
# around it and `=False` / `=...` after it when written so.
_WORD = re.compile(r"(?<![\w\-`'\"/\\.=])(the )?([A-Za-z_]\w*)(=\.\.\.|=False|=True)?( argument)?(?![\w\-'\"/\\])")


def _names_of(config: Any, typed: Mapping[str, str]) -> dict[str, str]:
    """Field name -> option string for a config class or instance (nested configs and a chosen
    sub-command included; the spelling typed wins), plus the library spellings of `LIBRARY_NAMES`."""
    names: dict[str, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        klass = obj if isinstance(obj, type) else type(obj)
        hints = typing.get_type_hints(klass)
        for f in dataclasses.fields(klass):
            path = f"{prefix}{f.name}"
            value = getattr(obj, f.name, None) if not isinstance(obj, type) else None
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                walk(value, f"{path}.")
            elif isinstance(obj, type) and _dataclass_of(hints[f.name]) is not None:
                walk(hints[f.name], f"{path}.")
            elif path in typed:  # the spelling typed wins over a same-named field elsewhere
                names[f.name] = typed[path]
            else:
                names.setdefault(f.name, "--" + f.name.replace("_", "-"))
        if any(f.name == "out" for f in dataclasses.fields(klass)) and getattr(klass, "CLAIMS_OUT", True):
            names.setdefault("fresh", "--fresh")  # every command that writes an --out folder has it (cli)

    if dataclasses.is_dataclass(config):
        walk(config, "")
    names.update({library: names[name] for library, name in LIBRARY_NAMES.items() if name in names})
    return names


@checked
def option_strings(config: Any, given_options: Given | None = None) -> dict[str, str]:
    """Every option of a parsed `config` (nested configs and a chosen sub-command included): field
    name -> the option string, as typed where it was given (`given_options`), else its dashed form;
    plus the library spellings of `LIBRARY_NAMES` for the options the command has."""
    return _names_of(config, given_options.typed if given_options is not None else {})


@checked
def name_options(text: str, config: Any, given_options: Given | None = None) -> str:
    """`text` (an error message of the library) with the library's argument names written as the
    options of `config` the user typed: `n_eval must be >= 1` -> `--n-eval must be >= 1`,
    `pass another out_dir or resume=False` -> `pass another --out or --fresh`.

    A name is rewritten only where it cannot be prose: snake_case (`batch_size`), followed by
    `must`, written `name=...`, or `the name argument`; names of no option of the command stay."""
    return _option_names(text, option_strings(config, given_options))


def _option_names(text: str, names: Mapping[str, str]) -> str:
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
