"""Topology values: validation, fleet-file defaults and the JSON round trip."""
from __future__ import annotations

import json

import pytest

from numa.errors import NumaError
from numa.topology import (
    FittedCell,
    FittedTopology,
    HostCell,
    HostTopology,
    InstanceTopology,
    MemPage,
)
from tests.unit.numa.factories import host_cell

FLEET_CELL = {"id": 0, "socket": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [4, 5, 6, 7],
              "siblings": [[4, 5], [6, 7]], "memory_mb": 131072,
              "mempages": [{"size_kb": 4, "total": 33554432}, {"size_kb": 2048, "total": 1024}]}


def test_fleet_form_defaults_usage_to_zero():
    topo = HostTopology.from_primitive({"cells": [FLEET_CELL]})
    cell = topo.cells[0]
    assert cell.cpu_usage == 0 and cell.memory_usage == 0 and cell.pinned_cpus == frozenset()
    assert cell.mempages == (MemPage(4, 33554432, 0, 0), MemPage(2048, 1024, 0, 0))
    assert cell.siblings == (frozenset({4, 5}), frozenset({6, 7}))
    assert cell.free_pcpus == frozenset({4, 5, 6, 7})


def test_stored_form_round_trips_through_json():
    cell = dict(FLEET_CELL, cpu_usage=3, memory_usage=2048, pinned_cpus=[5],
                mempages=[{"size_kb": 4, "total": 100, "used": 10, "reserved": 5}])
    topo = HostTopology.from_primitive({"cells": [cell, dict(FLEET_CELL, id=1, socket=1,
                                                              cpuset=[8], pcpuset=[9],
                                                              siblings=[])]})
    primitive = json.loads(json.dumps(topo.to_primitive()))
    assert primitive["cells"][0]["pinned_cpus"] == [5]
    assert set(primitive["cells"][0]) == {"id", "socket", "cpuset", "pcpuset", "siblings",
                                          "memory_mb", "mempages", "cpu_usage",
                                          "memory_usage", "pinned_cpus"}
    assert HostTopology.from_primitive(primitive) == topo


def test_socket_is_optional():
    cell = {k: v for k, v in FLEET_CELL.items() if k != "socket"}
    assert HostTopology.from_primitive({"cells": [cell]}).cells[0].socket is None


@pytest.mark.parametrize("change, field", [
    ({"id": -1}, "numa_topology.cells.0.id"),
    ({"id": True}, "numa_topology.cells.0.id"),
    ({"cpuset": [0, 4]}, "numa_topology.cells.0.pcpuset"),
    ({"cpuset": "0-3"}, "numa_topology.cells.0.cpuset"),
    ({"cpuset": [0, 0]}, "numa_topology.cells.0.cpuset"),
    ({"siblings": [[4, 5], [5, 6]]}, "numa_topology.cells.0.siblings.1"),
    ({"siblings": [[]]}, "numa_topology.cells.0.siblings.0"),
    ({"memory_mb": "lots"}, "numa_topology.cells.0.memory_mb"),
    ({"mempages": [{"size_kb": 0, "total": 1}]}, "numa_topology.cells.0.mempages.0.size_kb"),
    ({"mempages": [{"size_kb": 4, "total": 1}, {"size_kb": 4, "total": 2}]},
     "numa_topology.cells.0.mempages.1.size_kb"),
    ({"mempages": [{"size_kb": 4, "total": 1, "used": -1}]},
     "numa_topology.cells.0.mempages.0.used"),
    ({"pinned_cpus": [0]}, "numa_topology.cells.0.pinned_cpus"),
    ({"cpu_usage": -2}, "numa_topology.cells.0.cpu_usage"),
])
def test_bad_host_cell_names_the_field(change, field):
    with pytest.raises(NumaError) as caught:
        HostTopology.from_primitive({"cells": [dict(FLEET_CELL, **change)]})
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)


def test_host_cells_must_be_distinct():
    with pytest.raises(NumaError, match="used twice"):
        HostTopology.from_primitive({"cells": [FLEET_CELL, dict(FLEET_CELL, cpuset=[],
                                                                   pcpuset=[], siblings=[])]})
    with pytest.raises(NumaError, match="another cell"):
        HostTopology.from_primitive({"cells": [FLEET_CELL, dict(FLEET_CELL, id=1)]})
    with pytest.raises(NumaError):
        HostTopology.from_primitive({"cells": []})
    with pytest.raises(NumaError):
        HostTopology.from_primitive([FLEET_CELL])


def test_cores_group_siblings_within_pcpuset():
    cell = host_cell(cpuset=[0, 1], pcpuset=[2, 3, 4, 5, 6],
                     siblings=[[0, 1], [2, 3], [4, 5, 9]])
    assert cell.cores() == ((2, 3), (4, 5), (6,))


INSTANCE = {"cells": [
    {"id": 0, "cpuset": [], "pcpuset": [0, 1], "memory_mb": 1024, "cpu_policy": "dedicated",
     "cpu_thread_policy": "isolate", "pagesize": "large"},
    {"id": 1, "cpuset": [2], "pcpuset": [3], "memory_mb": 1024, "cpu_policy": "mixed",
     "cpu_thread_policy": None, "pagesize": 2048},
], "emulator_threads_policy": "isolate"}


def test_instance_round_trip():
    topo = InstanceTopology.from_primitive(INSTANCE)
    assert topo.cells[1].vcpus == 2
    assert topo.emulator_threads_isolated
    assert InstanceTopology.from_primitive(json.loads(json.dumps(topo.to_primitive()))) == topo


def _cell(**change):
    return {"cells": [dict(INSTANCE["cells"][0], **change)]}


@pytest.mark.parametrize("data, field", [
    (_cell(cpu_policy="pinned"), "instance.cells.0.cpu_policy"),
    (_cell(cpu_policy="shared"), "instance.cells.0.pcpuset"),
    (_cell(cpuset=[5]), "instance.cells.0.cpuset"),
    (_cell(pcpuset=[]), "instance.cells.0.cpuset"),
    (_cell(cpu_thread_policy="always"), "instance.cells.0.cpu_thread_policy"),
    (_cell(pagesize="huge"), "instance.cells.0.pagesize"),
    (_cell(pagesize=0), "instance.cells.0.pagesize"),
    (_cell(memory_mb=0), "instance.cells.0.memory_mb"),
    ({"cells": []}, "instance.cells"),
    ({"cells": [INSTANCE["cells"][0], INSTANCE["cells"][0]]}, "instance.cells.1.id"),
    ({"cells": [INSTANCE["cells"][0], dict(INSTANCE["cells"][0], id=1)]}, "instance.cells.1"),
    ({"cells": [{"id": 0, "cpuset": [0], "memory_mb": 1, "cpu_policy": "shared",
                 "cpu_thread_policy": "prefer"}]}, "instance.cells.0.cpu_thread_policy"),
    ({"cells": [{"id": 0, "cpuset": [0], "memory_mb": 1}], "emulator_threads_policy": "isolate"},
     "instance.emulator_threads_policy"),
    ({"cells": [{"id": 0, "cpuset": [0], "memory_mb": 1}], "emulator_threads_policy": "own"},
     "instance.emulator_threads_policy"),
])
def test_bad_instance_names_the_field(data, field):
    with pytest.raises(NumaError) as caught:
        InstanceTopology.from_primitive(data)
    assert caught.value.field == field


def test_instance_policy_defaults_to_shared():
    topo = InstanceTopology.from_primitive({"cells": [{"id": 0, "cpuset": [0], "memory_mb": 1}]})
    assert topo.cells[0].cpu_policy == "shared"
    assert topo.emulator_threads_policy is None


def test_fitted_round_trip():
    fitted = FittedTopology(cells=(
        FittedCell(id=0, host_cell_id=1, cpu_pinning={0: 4, 1: 6}, pagesize_kb=2048,
                   cpuset_reserved=frozenset({8}), memory_mb=2048, shared_cpus=1,
                   cpuset_isolated=frozenset({5, 7, 9})),
    ), emulator_threads_policy="isolate")
    primitive = json.loads(json.dumps(fitted.to_primitive()))
    assert primitive["cells"][0]["cpu_pinning"] == {"0": 4, "1": 6}
    assert FittedTopology.from_primitive(primitive) == fitted
    assert fitted.host_cell_ids == frozenset({1})
    assert fitted.cells[0].host_cpus == frozenset({4, 5, 6, 7, 8, 9})


def test_bad_fitted_pinning():
    with pytest.raises(NumaError) as caught:
        FittedTopology.from_primitive({"cells": [{"id": 0, "host_cell_id": 0,
                                                  "cpu_pinning": {"a": 1}}]})
    assert caught.value.field == "numa.cells.0.cpu_pinning.a"


def test_values_are_frozen():
    cell = HostCell(id=0)
    with pytest.raises(AttributeError):
        cell.cpu_usage = 3
