# The public names of `headsup_lens.cli`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._main import build_parser as build_parser
from ._main import command_parsers as command_parsers
from ._main import main as main
