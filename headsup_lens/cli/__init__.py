"""Command line: `headsup COMMAND [--options]`; each command module registers itself on import."""

from . import _demo, _organism, _selfcheck  # noqa: F401  (registers commands)
from . import _train  # noqa: F401  (registers train, evaluate, download-data)
from . import _analysis  # noqa: F401  (registers sweep, lens, similarity, pathways)
from ._main import build_parser as build_parser
from ._main import main as main
