"""The package's version, written once: `headsup_lens.__version__` and `pyproject.toml` read it here,
and the modules that record it in their outputs import it from this basement module (not from the
package's top, which sits above them)."""

__version__ = "0.2.0"
