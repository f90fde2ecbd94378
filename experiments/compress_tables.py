"""Store the long committed tables gzipped: every CSV under `figures/` larger than `--min-kib` whose name
says it holds every output or every step (`generations`, `history`, per-example similarity) becomes
`<name>.csv.gz`, written with a fixed timestamp (the same table gives the same bytes). Readers find a
table under its plain name (`headsup_lens._io.stored_table`, the results pages' macros), and a script
that writes it again keeps it compressed.

    python experiments/compress_tables.py            # figures/
    python experiments/compress_tables.py --dry-run  # list what would be compressed
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from headsup_lens._io import atomic_write
from headsup_lens.options import parse

ROOT = Path(__file__).resolve().parents[1]
LONG = re.compile(r"generations|history|similarity")


@dataclass(frozen=True)
class Options:
    """Options of the compression."""

    root: str = str(ROOT / "figures")
    """Folder searched (recursively) for long tables."""
    min_kib: int = 100
    """Compress tables larger than this many KiB."""
    dry_run: bool = False
    """Only list the tables that would be compressed."""


def compress(path: Path) -> Path:
    """`path` -> `<path>.gz` (mtime 0), then `path` removed; the compressed path."""
    target = path.with_name(path.name + ".gz")
    data = path.read_bytes()

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped:
            zipped.write(data)

    atomic_write(target, write)
    path.unlink()
    return target


def main(argv: list[str] | None = None) -> None:
    options, _ = parse(Options, argv, prog="compress_tables", description=__doc__)
    found = [
        p
        for p in sorted(Path(options.root).rglob("*.csv"))
        if LONG.search(p.name) and p.stat().st_size > options.min_kib * 1024
    ]
    before = sum(p.stat().st_size for p in found)
    for path in found:
        if options.dry_run:
            print(f"{path.stat().st_size / 1024:8.0f} KiB  {path}")
        else:
            compress(path)
    after = before if options.dry_run else sum(p.with_name(p.name + ".gz").stat().st_size for p in found)
    print(f"{len(found)} tables, {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
