"""The package's metadata: what `python -m build` reads from pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_the_license_is_an_spdx_expression_with_its_file():
    """The `project.license` table is deprecated (setuptools warns; removal announced for 2027-02-18):
    an SPDX string and `license-files`, which setuptools reads from version 77."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    assert project["license"] == "MIT"
    assert all((ROOT / name).is_file() for name in project["license-files"]) and "LICENSE" in project["license-files"]
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))  # refused beside an SPDX string
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert floor is not None and int(floor.group(1)) >= 77
