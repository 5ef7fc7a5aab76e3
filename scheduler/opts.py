"""Every option of the ``berth.scheduler`` namespace, for oslo-config-generator.

Options are declared beside the code that reads them; this module only lists
them. Add a module here when it declares options.
"""
from __future__ import annotations

import importlib

# Each module here exposes LIST_OPTS = [(group, [opts]), ...].
_MODULES: tuple[str, ...] = (
    "scheduler.rpc",
    "scheduler.service",
    "scheduler.fleet",
    "scheduler.filter_scheduler",
    "scheduler.host_manager",
    "scheduler.weights.pci",
    "scheduler.filters.compute",
    "scheduler.filters.io_ops",
    "scheduler.filters.num_instances",
    "scheduler.weights.affinity",
    "scheduler.weights.build_failure",
    "scheduler.weights.cpu",
    "scheduler.weights.disk",
    "scheduler.weights.hypervisor_version",
    "scheduler.weights.io_ops",
    "scheduler.weights.num_instances",
    "scheduler.weights.ram",
)


def list_opts():
    result: dict[str, list] = {}
    for name in _MODULES:
        mod = importlib.import_module(name)
        for group, opts in mod.LIST_OPTS:
            result.setdefault(group, []).extend(opts)
    return sorted(result.items(), key=lambda kv: (kv[0] != "DEFAULT", kv[0]))
