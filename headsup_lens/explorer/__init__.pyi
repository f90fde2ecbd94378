# The public names of `headsup_lens.explorer`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._runner import ExplorerRunner as ExplorerRunner
from ._runner import PathwayView as PathwayView
from ._widget import Explorer as Explorer
from ._widget import ExplorerState as ExplorerState
from ._widget import explore as explore
