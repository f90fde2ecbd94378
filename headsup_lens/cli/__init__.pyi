# The public names of `headsup_lens.cli`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._main import command_line as command_line
from ._main import command_lines as command_lines
from ._main import main as main
from ._main import top_help as top_help
