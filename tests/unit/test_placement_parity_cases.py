"""The Placement parity harness's cases (tools/placement_parity/cases.py): seeded,
valid fleet files and requests for Berth, usages the unit limits admit and that
fit, and covering what the harness claims to cover. (The comparison with
Placement itself runs in ``tox -e placement-parity``.)"""
from __future__ import annotations

import collections

from scheduler import fleet as fleet_mod
from scheduler.exception import InvalidRequest
from scheduler.request_spec import RequestSpec
from tools.placement_parity.berth_side import fleet_document
from tools.placement_parity.cases import capacity, make_cases, providers_of, unit_ok
from tools.placement_parity.nova_request import query


def test_same_seed_same_cases_other_seed_other_cases():
    assert make_cases(7, 60) == make_cases(7, 60)
    assert make_cases(7, 60) != make_cases(8, 60)


def test_fleets_are_valid_and_usage_fits():
    seen = collections.Counter()
    for fleet, _requests in make_cases(3, 400, per_fleet=20):
        fleet_mod.load_fleet(fleet_document(fleet))
        invs = {prov: pinv for n in fleet["nodes"] for prov, pinv in providers_of(n)}
        used = collections.Counter()
        for consumer in fleet["usage"]:
            for prov, rc, amount in consumer["items"]:
                assert unit_ok(invs[prov][rc], amount), (prov, rc, amount)
                used[prov, rc] += amount
        for (prov, rc), amount in used.items():
            assert amount <= capacity(invs[prov][rc])
        for node in fleet["nodes"]:
            seen["classic" if node["classic"] else "inventories"] += 1
            seen[f"children {min(len(node['children']), 2)}"] += 1
            seen["grandchild" if any(c["parent"] for c in node["children"]) else "flat"] += 1
            for _prov, pinv in providers_of(node):
                for rc, inv in pinv.items():
                    seen[rc] += 1
                    for field, plain in (("reserved", 0), ("min_unit", 1), ("step_size", 1),
                                         ("allocation_ratio", 1.0)):
                        seen[field] += inv[field] != plain
                    seen["max_unit"] += inv["max_unit"] != inv["total"]
        seen["usage"] += bool(fleet["usage"])
        seen["isolating aggregate"] += any(a["metadata"] for a in fleet["aggregates"])
    for wanted in ["classic", "inventories", "children 0", "children 1", "children 2",
                   "grandchild", "VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "VGPU",
                   "NET_BW_EGR_KILOBIT_PER_SEC", "CUSTOM_FPGA", "CUSTOM_BAREMETAL_GOLD",
                   "reserved", "min_unit", "step_size", "allocation_ratio", "max_unit",
                   "usage", "isolating aggregate"]:
        assert seen[wanted] >= 5, (wanted, seen)


def test_requests_are_berth_requests_and_cover_the_language():
    seen = collections.Counter()
    invalid = 0
    cases = make_cases(4, 600)
    for fleet, requests in cases:
        for request in requests:
            try:
                RequestSpec.from_primitive(request)
            except InvalidRequest:
                invalid += 1
            specs = request["flavor"]["extra_specs"]
            params = dict(query(fleet, request) or ())
            seen["numbered"] += any(k.startswith("resources1") for k in params)
            seen["group_policy"] += "group_policy" in specs
            seen["forbidden trait"] += any(v == "forbidden" for v in specs.values())
            seen["required trait"] += any(v == "required" for v in specs.values())
            seen["image trait"] += bool(request["image"]["properties"])
            seen["member_of"] += "member_of" in request
            seen["forbidden aggregate"] += any(
                isinstance(m, str) and m.startswith("!") for m in request.get("member_of", ()))
            seen["baremetal"] += specs.get("resources:VCPU") == "0"
            seen["dedicated"] += specs.get("hw:cpu_policy") == "dedicated"
            seen["isolate"] += specs.get("hw:cpu_thread_policy") == "isolate"
    for wanted in ["numbered", "group_policy", "forbidden trait", "required trait",
                   "image trait", "member_of", "forbidden aggregate", "baremetal",
                   "dedicated", "isolate"]:
        assert seen[wanted] >= 5, (wanted, seen)
    assert invalid < 0.05 * 600
