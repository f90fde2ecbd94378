# The public names of `headsup_lens.demo`: its one export list. At run time `lazy_loader` reads it
# (`__all__`, each name imported on first use); type checkers and the API reference read it as the module.

from ._config import DemoConfig as DemoConfig
from ._demo import DemoResult as DemoResult
from ._demo import run_demo as run_demo
from ._report import Report as Report
