"""The gate kinds, one file each; `GATES` registers every module here when first read. A kind's
file imports no torch at import time (configs read `GATES` while a command line is parsed)."""

BUILT_IN = ("value", "query")
