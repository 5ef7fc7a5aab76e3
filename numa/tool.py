"""Plain-data entry point to the fitting: one dict in, one dict out (``fit_case``), and
JSON lines in, JSON lines out (``run``, behind ``berth-manage numa fit``).

Case::

    {"host": {"cells": [HostCell...]}, "instance": {"cells": [InstanceCell...],
     "emulator_threads_policy": null | "share" | "isolate"},
     "limits": null | {"cpu_allocation_ratio": x, "ram_allocation_ratio": y},
     "strategy": "pack" | "spread" (optional),
     "isolate_on_smt_hosts": "reserve-siblings" | "refuse" (optional),
     "id": anything (optional, echoed)}

Result: ``{"fits": true, "cells": [{"id", "host_cell_id", "cpu_pinning": {"vcpu": pcpu},
"pagesize_kb", "cpuset_reserved"}]}``, or ``{"fits": false, "cells": [], "reason": ...}``,
or for a malformed case ``{"fits": false, "cells": [], "error": ...}``; plus ``"id"``
when the case has one.

``limits``: an object gives the allocation ratios (a missing ratio is 1.0); ``null`` (or
no key) means *no limits object*, as for Nova's ``numa_fit_instance_to_host``: guests
with shared vCPUs are checked only against each cell's size (CPUs and memory, or
small-page memory), not against its usage; pinned vCPUs still need free pCPUs and free
memory. ``isolate_on_smt_hosts`` is the ``[numa]`` option of the same name (default
``reserve-siblings``).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from numa.errors import NumaError
from numa.fitting import ISOLATE_ON_SMT, RESERVE_SIBLINGS, STRATEGIES, Limits, fit_instance_to_host
from numa.topology import HostTopology, InstanceTopology

_CASE_KEYS = frozenset(("host", "instance", "limits", "strategy", "isolate_on_smt_hosts", "id"))
_LIMIT_KEYS = ("cpu_allocation_ratio", "ram_allocation_ratio")


def fit_case(case: Any) -> dict:
    """Answer one case (see the module docstring); never raises for bad input."""
    try:
        host, instance, limits, strategy, isolate_on_smt = _parse_case(case)
    except NumaError as exc:
        return _with_id({"fits": False, "cells": [], "error": str(exc)}, case)
    result = fit_instance_to_host(host, instance, limits, strategy=strategy,
                                  isolate_on_smt=isolate_on_smt)
    if result.fitted is None:
        answer = {"fits": False, "cells": [], "reason": result.reason}
    else:
        answer = {"fits": True, "cells": [
            {"id": cell.id,
             "host_cell_id": cell.host_cell_id,
             "cpu_pinning": {str(g): h for g, h in sorted(cell.cpu_pinning.items())},
             "pagesize_kb": cell.pagesize_kb,
             "cpuset_reserved": sorted(cell.cpuset_reserved)}
            for cell in result.fitted.cells]}
    return _with_id(answer, case)


def run(stdin: TextIO, stdout: TextIO) -> int:
    """Answer each JSON line of ``stdin`` with one JSON line on ``stdout``; a malformed
    line gets an ``error`` answer and the next line is read. Returns how many lines were
    malformed."""
    malformed = 0
    for line in stdin:
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except ValueError as exc:
            answer = {"fits": False, "cells": [], "error": f"invalid JSON: {exc}"}
        else:
            try:
                answer = fit_case(case)
            except Exception as exc:  # a bug must not stop the stream
                answer = _with_id({"fits": False, "cells": [],
                                   "error": f"internal error: {type(exc).__name__}: {exc}"},
                                  case)
        malformed += "error" in answer
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
    return malformed


def _parse_case(case: Any) -> tuple[HostTopology, InstanceTopology, Limits | None, str, str]:
    if not isinstance(case, Mapping):
        raise NumaError("case", "expected an object")
    unknown = sorted(set(case) - _CASE_KEYS)
    if unknown:
        raise NumaError(unknown[0], f"unknown key (expected {', '.join(sorted(_CASE_KEYS))})")
    if "host" not in case:
        raise NumaError("host", "required")
    if "instance" not in case:
        raise NumaError("instance", "required")
    host = HostTopology.from_primitive(case["host"], "host")
    instance = InstanceTopology.from_primitive(case["instance"], "instance")
    strategy = case.get("strategy") or "pack"
    if strategy not in STRATEGIES:
        raise NumaError("strategy", f"expected one of {' | '.join(STRATEGIES)}")
    isolate_on_smt = case.get("isolate_on_smt_hosts") or RESERVE_SIBLINGS
    if isolate_on_smt not in ISOLATE_ON_SMT:
        raise NumaError("isolate_on_smt_hosts", f"expected one of {' | '.join(ISOLATE_ON_SMT)}")
    return host, instance, _parse_limits(case.get("limits")), strategy, isolate_on_smt


def _parse_limits(data: Any) -> Limits | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise NumaError("limits", "expected null or an object")
    unknown = sorted(set(data) - set(_LIMIT_KEYS))
    if unknown:
        raise NumaError(f"limits.{unknown[0]}", "unknown key")
    ratios = {}
    for key in _LIMIT_KEYS:
        value = data.get(key, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise NumaError(f"limits.{key}", "expected a number > 0")
        ratios[key] = float(value)
    return Limits(**ratios)


def _with_id(answer: dict, case: Any) -> dict:
    if isinstance(case, Mapping) and "id" in case:
        answer["id"] = case["id"]
    return answer
