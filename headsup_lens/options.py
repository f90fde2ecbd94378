"""Command-line options shared by every command, the demo and the experiment scripts, and their parser.

Options are dataclass fields; each field's docstring (or the comment on its line) is its `--help`
text, so the command line is generated from the configs and cannot drift from them. A command's
config inherits the groups it takes (`ModelOptions`, `DataOptions`, `FigureOptions`, `ThreadOptions`,
`ProgressOptions`, `PromptOptions`), so each shared option is declared once and `headsup`, `headsup demo` and
`experiments/*.py` read it the same way. (A dataclass lists the fields of its last base first:
`class C(FigureOptions, ModelOptions)` shows the model options, then the figure options, then its
own.) The groups are keyword-only, so a command's own fields may be required.

`CommandLine` is the command line of a dataclass, generated with tyro: dashed options (the older
`--under_score` spellings still accepted), `--x / --no-x` flags, lists that take several values or
repeat, `--help` sections named for what they set ("Model options", "Training options", ...), each
field's docstring its help. The config is built, and so validated by its `__post_init__`, when the
command line is read: a value out of range is a usage error naming the option (exit 2). It records
which options were given (`Given`), and `name_options` rewrites library argument names in an error
message as the options the user typed. tyro is imported only when a command line is read, and this
module imports nothing heavy (no torch): `--help` answers at once.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

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


# ------------------------------------------------------------------------------- the command line
_BOOLS = {"true": True, "yes": True, "false": False, "no": False}  # `--png false`, as older scripts write it


class UsageError(Exception):
    """A command line that cannot be read: the option, its value and what is allowed, in one line."""


@dataclass(frozen=True)
class _Option:
    """One option of a config: its field path (`lr`, `train.lr`), how it reads values, and its spellings."""

    path: str
    kind: str  # "flag", "list", "value"
    element: Any  # the type of one value (int, float, str, bool, a Literal)
    strings: tuple[str, ...]
    valued: bool = False  # a flag that may be None (`bool | None`): tyro reads it as `--x True|False|None`


class CommandLine:
    """The command line of a dataclass `config`, generated with tyro: one option per field (nested
    configs flattened, `--x / --no-x` flags, lists that take several values and repeat, choices from
    `Literal`s), each field's docstring its help, the shared groups and nested configs in sections
    ("Model options", "Training options"). `read` returns the config, built and so validated by its
    `__post_init__`, and which options were given; a value the config refuses is a `UsageError`
    naming the option as typed. Older spellings are read as today's: `--n_words` as `--n-words`,
    `--png false` as `--no-png`, and `--task a --task b` as `--task a b`.

    `switches`: options of the program around the config (`--fresh`: option string -> help), read
    and returned by `read` beside the config, listed by `--help`."""

    def __init__(
        self,
        config: type,
        prog: str,
        description: str | None = None,
        switches: Mapping[str, str] | Callable[[type], Mapping[str, str]] | None = None,
    ) -> None:
        self.config, self.prog, self.description = config, prog, description
        switches_of = switches if callable(switches) else (lambda _: switches or {})
        self.switches = dict(switches_of(config))
        self.options: dict[str, _Option] = {}  # option string -> option (aliases included)
        # A field with `subcommands` (`organism train|check`): one command line per sub-command.
        chosen = next((f for f in dataclasses.fields(config) if f.metadata.get("subcommands")), None)
        self._chooser = None if chosen is None else chosen.name
        self.subcommands: dict[str, CommandLine] = {
            name: CommandLine(child, f"{prog} {name}", (child.__doc__ or "").strip().split("\n")[0], switches_of(child))
            for name, child in (chosen.metadata["subcommands"].items() if chosen is not None else ())
        }
        self._tyro_config = self._derive(config, "") if chosen is None else None

    # ------------------------------------------------------------------ the config tyro reads
    def _derive(self, config: type, prefix: str) -> type:
        """A dataclass tyro reads for `config`: the same fields, their help and spellings as tyro
        markers (`Annotated`), the shared groups' and nested configs' fields in sections."""
        import tyro

        hints = typing.get_type_hints(config)
        docs = field_docs(config)
        owner = _declared_in(config)
        top: list[tuple] = []
        sections: dict[str, list[tuple]] = {}
        for f in dataclasses.fields(config):
            meta = f.metadata
            if not meta.get("cmd", True):
                continue
            path = f"{prefix}{f.name}"
            hint = hints[f.name]
            nested = _dataclass_of(hint)
            if nested is not None:  # its own section, titled by its `group`
                derived = self._derive(nested, f"{path}.")
                default = dataclasses.field(default_factory=derived)
                marker = tyro.conf.arg(name=meta.get("group") or f.name, help=docs.get(f.name, ""))
                top.append((f.name, Annotated[derived, marker], default))
                continue
            title = GROUP_TITLES.get(owner.get(f.name, config))
            where = top if title is None or prefix else sections.setdefault(title, [])
            kind, element = _kind(hint)
            if meta.get("choices"):
                element = Literal[tuple(meta["choices"])]  # type: ignore[valid-type]
                hint = (
                    tuple[element, ...]
                    if typing.get_origin(hint) is tuple
                    else (list[element] if kind == "list" else element)
                )  # type: ignore[valid-type]
            markers: list[Any] = []
            name = "--" + f.name.replace("_", "-")
            if meta.get("positional"):
                markers.append(tyro.conf.Positional)
                strings: tuple[str, ...] = ()
            else:
                strings = (name, *meta.get("aliases", ()))
                if kind == "flag":
                    strings += ("--no-" + name[2:],)
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            doc = docs.get(f.name, "")
            markers.append(
                tyro.conf.arg(
                    help=doc,
                    aliases=tuple(meta.get("aliases", ())) or None,
                    metavar=meta.get("metavar"),
                    help_behavior_hint=_default_hint(doc, f, kind, required),
                )
            )
            default: Any = (
                dataclasses.field()
                if required
                else dataclasses.field(default=f.default)
                if f.default_factory is dataclasses.MISSING
                else dataclasses.field(default_factory=f.default_factory)
            )
            where.append((f.name, Annotated[(hint, *markers)], default))  # type: ignore[misc]
            valued = kind == "flag" and hint is not bool
            for string in strings:
                self.options[string] = _Option(path, kind, element, strings, valued)
        for title, fields in sections.items():
            group = dataclasses.make_dataclass(_identifier(title), fields, kw_only=True)
            required = any(
                x.default is dataclasses.MISSING and x.default_factory is dataclasses.MISSING
                for x in dataclasses.fields(group)
            )
            default = dataclasses.field() if required else dataclasses.field(default_factory=group)
            top.append((_identifier(title), Annotated[group, tyro.conf.arg(name=title)], default))
        return dataclasses.make_dataclass(config.__name__, top, kw_only=True)

    # ------------------------------------------------------------------ reading
    def read(self, argv: Sequence[str], *, known_only: bool = False) -> tuple[Any, Given, set[str], list[str]]:
        """(the config, the options given, the switches given, the arguments not read: only with
        `known_only`, else an unknown option is a `UsageError`)."""
        import tyro
        from tyro import _errors

        if self._chooser is not None or self._tyro_config is None:
            return self._read_subcommand(list(argv), known_only)
        tokens, typed, switches, rest = self._spelled(list(argv), known_only)

        def refuse(event: Any) -> None:
            raise UsageError(_event_text(event))

        with _errors.on_parse_error(refuse):
            parsed = tyro.cli(
                self._tyro_config,
                args=tokens,
                prog=self.prog,
                description=self._description(),
                config=(tyro.conf.OmitArgPrefixes,),
            )
        values = _values(parsed)
        try:
            built = _construct(self.config, values, "")
        except (ValueError, TypeError) as error:
            raise UsageError(_option_names(" ".join(str(error).split()), _names_of(self.config, typed))) from None
        return built, Given(typed), switches, rest

    def _read_subcommand(self, argv: list[str], known_only: bool) -> tuple[Any, Given, set[str], list[str]]:
        chooser = str(self._chooser)
        name = next((token for token in argv if not token.startswith("-")), None)
        if name is None and any(token in ("-h", "--help") for token in argv):
            sys.stdout.write(self.format_help())
            raise SystemExit(0)
        if name is None:
            raise UsageError("the following arguments are required: ACTION")
        if name not in self.subcommands:
            choices = ", ".join(repr(c) for c in self.subcommands)
            raise UsageError(f"argument ACTION: invalid choice: {name!r} (choose from {choices})")
        argv.remove(name)
        built, typed, switches, rest = self.subcommands[name].read(argv, known_only=known_only)
        given_options = Given({f"{chooser}.{path}": text for path, text in typed.typed.items()})
        return self.config(**{chooser: built}), given_options, switches, rest

    def _description(self) -> str | None:
        first = self.description or (self.config.__doc__ or "").strip().split("\n")[0]
        switches = " ".join(f"{string}: {text}." for string, text in self.switches.items())
        return "\n\n".join(text for text in (first, switches) if text) or None

    def _spelled(self, argv: list[str], known_only: bool) -> tuple[list[str], dict[str, str], set[str], list[str]]:
        """`argv` in today's spellings for tyro, the options given (field path -> the spelling
        typed), the switches given and (with `known_only`) the tokens of unknown options."""
        out: list[str] = []
        lists: dict[str, int] = {}  # a list option's path -> its place in `out`, to gather repeats
        typed: dict[str, str] = {}
        switches: set[str] = set()
        rest: list[str] = []
        i = 0
        while i < len(argv):
            token = argv[i]
            i += 1
            if token == "--":
                (rest if known_only else out).extend(argv[i - 1 :])
                break
            if not token.startswith("--") or token in ("--help",):
                out.append(token)
                continue
            name, eq, value = token.partition("=")
            dashed = name.replace("_", "-")
            if dashed in self.switches:
                switches.add(dashed)
                continue
            option = self.options.get(dashed)
            if option is None:
                if not known_only:
                    out.append(token)
                    continue
                rest.append(token)
                while not eq and i < len(argv) and not argv[i].startswith("-"):
                    rest.append(argv[i])
                    i += 1
                continue
            typed[option.path] = name
            values = [value] if eq else []
            if option.kind == "flag":
                if not eq and i < len(argv) and argv[i].lower() in _BOOLS:  # `--png false` (the older style)
                    values, i = [argv[i]], i + 1
                on = dashed != option.strings[-1]  # `--no-x` is the last spelling of a flag
                if values:
                    if values[0].lower() not in _BOOLS:
                        raise UsageError(f"argument {name}: expected true or false, got {values[0]!r}")
                    on = on == _BOOLS[values[0].lower()]
                if option.valued:
                    out += [option.strings[0], str(on)]
                else:
                    out.append(option.strings[0] if on else option.strings[-1])
                continue
            if not eq:
                while i < len(argv) and not (argv[i].startswith("--") or argv[i] == "-h"):
                    values.append(argv[i])
                    i += 1
                    if option.kind == "value":
                        break
            for text in values:
                _check_value(name, text, option.element)
            if option.kind == "list" and option.path in lists:
                end = lists[option.path]
                out[end:end] = values  # a repeat adds its values after the earlier ones
                lists = {path: place + len(values) if place >= end else place for path, place in lists.items()}
                continue
            out += [option.strings[0], *values]
            if option.kind == "list":
                lists[option.path] = len(out)  # where its values end
        return out, typed, switches, rest

    def format_help(self) -> str:
        """What `PROG --help` prints."""
        import contextlib
        import io

        if self._chooser is not None:
            width = max(map(len, self.subcommands)) + 2
            lines = [f"usage: {self.prog} {{{','.join(self.subcommands)}}} ...", "", self.description or ""]
            lines += ["", "actions:"]
            lines += [f"  {name.ljust(width)}{line.description or ''}" for name, line in self.subcommands.items()]
            return "\n".join(lines) + "\n"
        raw = io.BytesIO()
        text = io.TextIOWrapper(raw, encoding="utf-8")  # a UTF-8 stream, as a terminal's: tyro draws its boxes
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            self.read(["--help"])
        text.flush()
        return raw.getvalue().decode("utf-8")


def _default_hint(doc: str, f: dataclasses.Field, kind: str, required: bool) -> str | None:
    """What `--help` adds after a field's text: its default, once (not where the text says it, nor an
    empty one), "(required)", or nothing for a flag (its two spellings say it)."""
    if required:
        return "(required)"
    if kind == "flag" or "(default" in doc:
        return ""
    default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    if default is None or default == "" or default in ((), []):
        return ""
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f"(default: {shown})"


def _identifier(title: str) -> str:
    """A section's field name: its title as an identifier that starts upper case (`Distributed_torchrun`)."""
    name = re.sub(r"\W+", "_", title).strip("_") or "Options"
    return name[0].upper() + name[1:]


def _kind(hint: Any) -> tuple[str, Any]:
    """("flag" / "list" / "value", the type of one value) of a field's annotation."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) == 1:
            hint = options[0]
    origin = typing.get_origin(hint)
    if origin in (list, tuple, Sequence):
        return "list", typing.get_args(hint)[0]
    return ("flag" if hint is bool else "value"), hint


def _check_value(option: str, text: str, element: Any) -> None:
    """The one-line refusals of a number that is none, or not finite (before tyro reads it)."""
    if text.lower() == "none":  # an optional number left unset; tyro refuses it where it is not optional
        return
    if element is float:
        try:
            number = float(text)
        except ValueError:
            raise UsageError(f"argument {option}: not a number: {text!r}") from None
        if not math.isfinite(number):
            raise UsageError(f"argument {option}: must be a finite number, got {text!r}")
    elif element is int:
        try:
            int(text)
        except ValueError:
            raise UsageError(f"argument {option}: not a whole number: {text!r}") from None


def _event_text(event: Any) -> str:
    """A tyro parse error as one line, in the words argparse used."""
    from tyro import _errors

    def option_of(argument: Any) -> str:
        names = getattr(getattr(argument, "lowered", None), "name_or_flags", None) or ()
        return "/".join(names) or str(getattr(getattr(argument, "field", None), "extern_name", "?"))

    if isinstance(event, _errors.InvalidChoice):
        choices = ", ".join(repr(c) for c in event.choices)
        return f"argument {option_of(event.argument)}: invalid choice: {event.value!r} (choose from {choices})"
    if isinstance(event, _errors.UnrecognizedArgs):
        return f"unrecognized arguments: {' '.join(event.tokens)}"
    if isinstance(event, _errors.MissingArgs):
        names = [option_of(missing.arg) for missing in event.missing_arguments]
        return f"the following arguments are required: {', '.join(names)}"
    if isinstance(event, _errors.BadValue):
        return f"argument {option_of(event.argument)}: expected a value"
    if isinstance(event, _errors.InstantiationFailure):
        where = f"argument {option_of(event.argument)}: " if event.argument is not None else ""
        return where + " ".join(str(event.message).split("\n\n")[0].split())
    return " ".join(str(event).split())


def _values(parsed: Any, prefix: str = "") -> dict[str, Any]:
    """Field path -> value of what tyro built (sections dissolved)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(parsed):
        value = getattr(parsed, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            section = f.name[:1].isupper()  # a --help section, not a nested config
            values.update(_values(value, prefix if section else f"{prefix}{f.name}."))
        else:
            values[f"{prefix}{f.name}"] = value
    return values


def _construct(config: type, values: Mapping[str, Any], prefix: str) -> Any:
    """`config(...)` from the given values (field path -> value); nested configs are built first."""
    hints = typing.get_type_hints(config)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        path = f"{prefix}{f.name}"
        nested = _dataclass_of(hints[f.name])
        if nested is not None and any(p.startswith(f"{path}.") for p in values):
            kwargs[f.name] = _construct(nested, values, f"{path}.")
        elif path in values:
            value = values[path]
            kwargs[f.name] = (
                tuple(value) if isinstance(value, list) and typing.get_origin(hints[f.name]) is tuple else value
            )
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


def _exit_usage(prog: str, error: UsageError) -> typing.NoReturn:
    sys.stderr.write(f"{prog}: error: {error}\n")
    raise SystemExit(2)


@checked
def parse(
    config: type[Config], argv: Sequence[str] | None = None, *, prog: str | None = None, description: str | None = None
) -> tuple[Config, Given]:
    """Read `config` (a dataclass of options) from `argv` (default: `sys.argv[1:]`) in the CLI's
    style; the config and which options were given. `--help` prints every field's docstring; a
    usage error is one line on stderr and exit code 2."""
    name = prog or os.path.basename(sys.argv[0])
    try:
        built, given_options, _, _ = CommandLine(config, name, description).read(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        _exit_usage(name, error)
    return built, given_options


@checked
def parse_known(
    config: type[Config], argv: Sequence[str] | None = None, *, prog: str | None = None, description: str | None = None
) -> tuple[Config, Given, list[str]]:
    """`parse` for a program that passes the options it does not know on (e.g. to other scripts):
    the config, which of its options were given, and the other arguments in their order."""
    name = prog or os.path.basename(sys.argv[0])
    try:
        line = CommandLine(config, name, description)
        built, given_options, _, rest = line.read(sys.argv[1:] if argv is None else argv, known_only=True)
    except UsageError as error:
        _exit_usage(name, error)
    return built, given_options, rest


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
