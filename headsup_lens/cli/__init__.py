"""Command line: `headsup COMMAND [--options]`.

Command modules are imported only when their command runs (`_registry.LAZY` lists them with their
one-line help), so `headsup --help` answers without importing torch. A module imported here
registers its command eagerly with `@command` and works too.
"""

from ._main import build_parser as build_parser
from ._main import command_parsers as command_parsers
from ._main import main as main
