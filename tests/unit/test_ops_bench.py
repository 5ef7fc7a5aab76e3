"""tools/ops_bench.py generates valid fleet files and traces."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from pci import request as pci_request  # noqa: E402
from scheduler import fleet  # noqa: E402
from scheduler.request_spec import RequestSpec  # noqa: E402
from tools import ops_bench  # noqa: E402


def test_fleet_document_is_a_valid_fleet_with_numa_pci_and_zones():
    doc = ops_bench.fleet_document(20)
    parsed = fleet.load_fleet(doc, {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
                                    "disk_allocation_ratio": 1.0})
    assert len(parsed.hosts) == 20
    assert sum(1 for h in parsed.hosts if h.numa_topology) == 10
    assert sum(1 for h in parsed.hosts if h.pci_devices) == 4
    assert {a.availability_zone for a in parsed.aggregates} == {"az1", "az2", None}
    assert ops_bench.fleet_document(20) == doc            # seeded


def test_trace_has_requests_and_releases_of_placed_instances():
    lines = ops_bench.trace(200)
    releases = [line["release"] for line in lines if "release" in line]
    requested = {u for line in lines for u in line.get("instance_uuids", [])}
    assert releases and set(releases) <= requested
    aliases = pci_request.parse_aliases([ops_bench.ALIAS])
    specs = [RequestSpec.from_primitive(line, pci_aliases=aliases)
             for line in lines if "release" not in line]
    assert any(s.pci_requests for s in specs) and any(s.numa_topology for s in specs)
    assert any(s.instance_group for s in specs)
