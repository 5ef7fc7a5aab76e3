"""The filter and weigher catalogue (doc/source/reference/filters.rst) lists
every filter and weigher entry point of setup.cfg, with every option its
module declares."""
from __future__ import annotations

import configparser
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMESPACES = ("berth.scheduler.filters", "berth.scheduler.weights")


def _entry_points() -> dict[str, str]:
    """name -> "module:Class" for every filter and weigher in setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    out = {}
    for namespace in NAMESPACES:
        for line in parser["options.entry_points"][namespace].strip().splitlines():
            name, _, target = line.partition("=")
            out[name.strip()] = target.strip()
    return out


def _reference() -> str:
    return (ROOT / "doc" / "source" / "reference" / "filters.rst").read_text()


def _entries(section: str) -> dict[str, str]:
    """Each name of a definition-list term -> the text of its entry."""
    out = {}
    for m in re.finditer(r"^(``\w+``(?:, ``\w+``)*)\n((?:    .*\n|\n)+)", section + "\n",
                         re.MULTILINE):
        for name in re.findall(r"``(\w+)``", m.group(1)):
            out[name] = m.group(2)
    return out


ENTRY_POINTS = _entry_points()


def test_there_are_plugins():
    assert len(ENTRY_POINTS) >= 40
    assert "JsonFilter" in ENTRY_POINTS and "MetricsWeigher" in ENTRY_POINTS


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_entry_point_is_in_the_reference_with_its_options(name):
    entries = _entries(_reference())
    assert name in entries, f"{name} is not listed in the catalogue"
    module = importlib.import_module(ENTRY_POINTS[name].partition(":")[0])
    for group, opts in getattr(module, "LIST_OPTS", []):
        for opt in opts:
            assert opt.name in entries[name], \
                f"{name}: option [{group}] {opt.name} is not in its reference entry"


def test_the_reference_lists_nothing_else():
    names = set(_entries(_reference()))
    assert names <= set(ENTRY_POINTS), sorted(names - set(ENTRY_POINTS))
