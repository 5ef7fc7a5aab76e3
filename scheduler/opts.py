"""Every option of the ``berth.scheduler`` namespace, for oslo-config-generator.

Options are declared beside the code that reads them, in a module-level
``LIST_OPTS = [(group, [opts]), ...]``. This module finds them by importing
every module of the ``scheduler`` package: there is no list to keep up to date.
"""
from __future__ import annotations

import importlib
import pkgutil


def option_modules() -> list[str]:
    """Names of the ``scheduler`` modules that declare options (``LIST_OPTS``)."""
    import scheduler

    found = []
    for info in pkgutil.walk_packages(scheduler.__path__, "scheduler."):
        module = importlib.import_module(info.name)
        if hasattr(module, "LIST_OPTS"):
            found.append(info.name)
    return sorted(found)


def list_opts():
    result: dict[str, list] = {}
    for name in option_modules():
        for group, opts in importlib.import_module(name).LIST_OPTS:
            bucket = result.setdefault(group, [])
            bucket.extend(o for o in opts if o not in bucket)
    return sorted(result.items(), key=lambda kv: (kv[0] != "DEFAULT", kv[0]))
