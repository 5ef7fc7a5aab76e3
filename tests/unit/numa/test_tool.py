"""The plain-data entry point (``berth-manage numa fit``)."""
from __future__ import annotations

import io
import json

from numa.tool import fit_case, run

HOST = {"cells": [
    {"id": 0, "cpuset": [0, 1], "pcpuset": [2, 3, 4, 5], "siblings": [[2, 3], [4, 5]],
     "memory_mb": 4096, "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [],
     "mempages": [{"size_kb": 4, "total": 524288, "used": 0, "reserved": 0},
                  {"size_kb": 2048, "total": 512, "used": 0, "reserved": 0}]},
    {"id": 1, "cpuset": [6, 7], "pcpuset": [8, 9, 10, 11], "siblings": [[8, 9], [10, 11]],
     "memory_mb": 4096, "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [8],
     "mempages": [{"size_kb": 4, "total": 1048576, "used": 0, "reserved": 0}]},
]}


def pinned(cells=1, **kw):
    return {"cells": [dict({"id": i, "cpuset": [], "pcpuset": [2 * i, 2 * i + 1],
                            "memory_mb": 1024, "cpu_policy": "dedicated",
                            "cpu_thread_policy": None, "pagesize": None}, **kw)
                      for i in range(cells)],
            "emulator_threads_policy": None}


def test_fits():
    answer = fit_case({"host": HOST, "instance": pinned(pagesize="large"), "limits": None,
                       "id": "c1"})
    assert answer == {"fits": True, "cells": [
        {"id": 0, "host_cell_id": 0, "cpu_pinning": {"0": 2, "1": 3}, "pagesize_kb": 2048,
         "cpuset_reserved": []}], "id": "c1"}
    json.dumps(answer)


def test_emulator_and_two_cells():
    instance = dict(pinned(cells=2), emulator_threads_policy="isolate")
    answer = fit_case({"host": HOST, "instance": instance,
                       "limits": {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0}})
    assert answer["fits"] and "id" not in answer
    first, second = answer["cells"]
    assert len(first["cpuset_reserved"]) == 1 and second["cpuset_reserved"] == []
    assert {first["host_cell_id"], second["host_cell_id"]} == {0, 1}


def test_does_not_fit():
    answer = fit_case({"host": HOST, "instance": pinned(cpu_thread_policy="require",
                                                        pcpuset=[0, 1, 2, 3, 4]),
                       "limits": None, "id": 7})
    assert answer == {"fits": False, "cells": [], "id": 7,
                      "reason": "no host cell with 5 free pCPUs in sibling pairs"}


def test_strategy_is_an_optional_extension():
    case = {"host": HOST, "instance": pinned(), "limits": None}
    assert fit_case(dict(case, strategy="pack"))["cells"][0]["host_cell_id"] == 1
    assert fit_case(dict(case, strategy="spread"))["cells"][0]["host_cell_id"] == 0


def test_malformed_cases_name_the_field():
    assert fit_case([]) == {"fits": False, "cells": [], "error": "case: expected an object"}
    bad_host = fit_case({"host": {"cells": [{"id": 0, "cpuset": "all", "memory_mb": 1}]},
                         "instance": pinned(), "id": 3})
    assert bad_host == {"fits": False, "cells": [], "id": 3,
                        "error": "host.cells.0.cpuset: expected a list of CPU numbers"}
    assert fit_case({"host": HOST})["error"] == "instance: required"
    assert fit_case({"host": HOST, "instance": pinned(), "limit": None})["error"].startswith(
        "limit: unknown key")
    assert fit_case({"host": HOST, "instance": pinned(),
                     "limits": {"cpu_allocation_ratio": "2"}})["error"].startswith(
        "limits.cpu_allocation_ratio")


def test_run_answers_every_line_and_goes_on():
    good = json.dumps({"host": HOST, "instance": pinned(), "limits": None, "id": 1})
    lines = "\n".join([good, "{not json", "", json.dumps({"id": 2}), good]) + "\n"
    out = io.StringIO()
    assert run(io.StringIO(lines), out) == 2
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["fits"] for a in answers] == [True, False, False, True]
    assert answers[1]["error"].startswith("invalid JSON")
    assert answers[2] == {"fits": False, "cells": [], "error": "host: required", "id": 2}


def test_limits_null_means_no_limits_object():
    busy = {"cells": [{"id": 0, "cpuset": [0, 1], "pcpuset": [2, 3], "memory_mb": 2048,
                       "cpu_usage": 2, "memory_usage": 2048, "pinned_cpus": [2]}]}
    shared = {"cells": [{"id": 0, "cpuset": [0, 1], "memory_mb": 2048}]}
    # shared guest: the cell's size only, not its usage
    assert fit_case({"host": busy, "instance": shared, "limits": None})["fits"]
    assert fit_case({"host": busy, "instance": shared})["fits"]
    limited = {"cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0}
    assert not fit_case({"host": busy, "instance": shared, "limits": limited})["fits"]
    too_big = {"cells": [{"id": 0, "cpuset": [0, 1, 2], "memory_mb": 512}]}
    assert not fit_case({"host": busy, "instance": too_big, "limits": None})["fits"]
    # pinned guest: still free pCPUs and free memory
    one_pinned = {"cells": [{"id": 0, "pcpuset": [0], "memory_mb": 512,
                             "cpu_policy": "dedicated"}]}
    assert fit_case({"host": busy, "instance": one_pinned, "limits": None})["reason"] == \
        "no host cell with 512 MB free memory"


def test_isolate_on_smt_hosts_key():
    isolate = pinned(cpu_thread_policy="isolate")
    assert fit_case({"host": HOST, "instance": isolate})["fits"]
    refused = fit_case({"host": HOST, "instance": isolate, "isolate_on_smt_hosts": "refuse"})
    assert not refused["fits"] and "SMT siblings" in refused["reason"]
    bad = fit_case({"host": HOST, "instance": isolate, "isolate_on_smt_hosts": "never"})
    assert bad["error"].startswith("isolate_on_smt_hosts")
