"""[compute] reserved_huge_pages: parsed and checked like Nova's option, reported as
the cells' reserved pages, never handed to a guest."""
from __future__ import annotations

import pytest

from scheduler import exception, fleet
from scheduler.agent import host, memory
from tests.unit.agent import fake_host

FIELD = "compute.reserved_huge_pages"


def test_nova_syntax_and_units():
    assert memory.parse_reserved_huge_pages([
        "node:0,size:2048,count:64", "node:1, size:1GB, count:1", "node:0,size:1G,count:0",
        "node:1,size:4,count:1000"]) == {(0, 2048): 64, (1, 1048576): 1, (0, 1048576): 0,
                                         (1, 4): 1000}
    assert memory.parse_reserved_huge_pages([]) == {}


@pytest.mark.parametrize("values, field, words", [
    (["node:0,size:2048"], f"{FIELD}[0].count", "required"),
    (["node0,size:2048,count:1"], f"{FIELD}[0]", "node:N,size:KiB,count:N"),
    (["node:0,size:2048,count:1,colour:red"], f"{FIELD}[0].colour", "unknown key"),
    (["node:0,node:1,size:2048,count:1"], f"{FIELD}[0].node", "given twice"),
    (["node:-1,size:2048,count:1"], f"{FIELD}[0].node", "NUMA node id"),
    (["node:zero,size:2048,count:1"], f"{FIELD}[0].node", "NUMA node id"),
    (["node:0,size:2XB,count:1"], f"{FIELD}[0].size", "page size"),
    (["node:0,size:0,count:1"], f"{FIELD}[0].size", "page size"),
    (["node:0,size:2048,count:-4"], f"{FIELD}[0].count", "page count"),
    (["node:0,size:2048,count:²"], f"{FIELD}[0].count", "page count"),
    (["node:0,size:2048,count:1", "node:0,size:2MB,count:2"], f"{FIELD}[1]",
     "reserved twice"),
])
def test_errors_name_the_option(values, field, words):
    with pytest.raises(memory.ReservedPagesError) as e:
        memory.parse_reserved_huge_pages(values)
    assert e.value.field == field and words in e.value.reason


def test_a_bad_option_is_an_invalid_request_naming_it(conf_override):
    conf_override("reserved_huge_pages", ["node:0,size:2048,count:1", "node:0,size:2MB"],
                  "compute")
    with pytest.raises(exception.InvalidRequest) as e:
        host.settings_from_conf()
    assert e.value.field == f"{FIELD}[1].count"


def test_reserved_pages_are_reported_per_cell():
    s = fake_host.settings(reserved_huge_pages=memory.parse_reserved_huge_pages([
        "node:0,size:2048,count:64", "node:0,size:1GB,count:1",
        "node:1,size:1GB,count:2", "node:1,size:2048,count:600", "node:7,size:2048,count:1"]))
    report = host.build_report(fake_host.facts("two_socket_smt"), s)
    pages = [{p["size_kb"]: p.get("reserved", 0) for p in c["mempages"]}
             for c in report.node["numa_topology"]["cells"]]
    assert pages == [{4: 0, 2048: 64, 1048576: 1}, {4: 0, 2048: 512, 1048576: 0}]
    assert report.warnings == [
        "[compute] reserved_huge_pages: NUMA node 1 has 512 2048 kB pages, fewer than "
        "the 600 reserved; all of them are reserved",
        "[compute] reserved_huge_pages: NUMA node 1 has 0 1048576 kB pages, fewer than "
        "the 2 reserved; all of them are reserved",
        "[compute] reserved_huge_pages: NUMA node 7 is not reported as a cell; nothing "
        "reserved there"]
    # What the agent sends passes Berth's own checks.
    rec = fleet.parse_host(report.node)
    assert rec.numa_topology["cells"][0]["mempages"][1]["reserved"] == 64


def test_a_page_size_the_node_lacks_is_a_warning():
    s = fake_host.settings(reserved_huge_pages={(0, 16384): 4})
    report = host.build_report(fake_host.facts("two_socket_smt"), s)
    assert report.warnings == ["[compute] reserved_huge_pages: NUMA node 0 has no 16384 kB "
                               "pages; nothing reserved"]


def test_operators_see_the_reserved_pages():
    from scheduler.cmd import agent, manage_host

    page = {"size_kb": 2048, "total": 1024, "reserved": 64}
    assert agent._pages(0, page, {(0, 2048): 1000}) == "2048kB:1024(1000 free, 64 reserved)"
    assert agent._pages(0, dict(page, reserved=0), {}) == "2048kB:1024"
    hugepages = dict(manage_host._NUMA_COLUMNS)["HUGEPAGES"]
    assert hugepages({"mempages": [{"size_kb": 4, "total": 10}, page,
                                   {"size_kb": 1048576, "total": 2}]}) == \
        "2Mx1024(64 reserved),1Gx2"
