"""The one-command demo (`headsup demo`) and the self-contained HTML report it writes."""

from ._demo import DemoConfig as DemoConfig
from ._demo import DemoResult as DemoResult
from ._demo import run_demo as run_demo
from ._report import Report as Report
