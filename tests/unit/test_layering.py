"""The layers import downwards only: ``db``, ``pci`` and ``numa`` never import
``scheduler`` (errors and records shared with the scheduler live in ``db.errors``
and ``db.records``)."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["db", "pci", "numa"])
def test_lower_layers_do_not_import_the_scheduler(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in _imported_modules(path)
                                            if m == "scheduler" or m.startswith("scheduler."))
        for path in sorted((ROOT / package).rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from scheduler import exception\n")
    assert _imported_modules(probe) == {"scheduler"}


def test_shared_errors_are_the_schedulers_errors():
    from db import errors
    from scheduler import exception, rpc

    assert exception.InvalidRequest is errors.InvalidRequest
    assert issubclass(exception.NoValidHost, errors.BerthError)
    assert {"db.errors", "scheduler.exception"} <= set(rpc.ALLOWED_REMOTE_EXMODS)
