"""What the daemon does with a compute host's own reports (berth-agent's calls):
heartbeats, a disabled state the agent does not undo, capacity below usage
flagged, claimed devices kept."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import exception, fleet
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.manager import SchedulerManager
from tests.unit.scheduler.test_manager import CTX, Direct

HOST = {"host": "cn1", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
        "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0,
        "reserved_host_memory_mb": 0}
PF = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
      "dev_type": "type-PF", "numa_node": 0}
VF = {"address": "0000:81:02.0", "vendor_id": "8086", "product_id": "154c",
      "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0}
VF2 = dict(VF, address="0000:81:02.1")
ALIAS = '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    c.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                       "DiskFilter", "PciPassthroughFilter"],
                   group="filter_scheduler")
    c.set_override("weight_classes", [], group="filter_scheduler")
    c.set_override("alias", [ALIAS], group="pci")
    yield c
    for name, group in (("enabled_filters", "filter_scheduler"),
                        ("weight_classes", "filter_scheduler"), ("alias", "pci")):
        c.clear_override(name, group)


@pytest.fixture
def manager(sqlite_db, conf):
    return Direct(SchedulerManager(
        sqlite_db, FilterScheduler(HostManager(sqlite_db, conf), conf), conf))


def _place(manager, vcpus=1, memory_mb=1024, extra_specs=None):
    flavor = {"vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 10,
              "extra_specs": extra_specs or {}}
    return manager.select_destinations(CTX, {"flavor": flavor})[0][0]


def test_heartbeat_records_the_host_up(manager, sqlite_db):
    with pytest.raises(exception.NotFound):
        manager.heartbeat(CTX, "cn1")
    manager.report_compute_node(CTX, HOST)
    with sqlite_db.reader() as session:
        before = session.scalars(sa.select(models.Service)).one()
    assert manager.heartbeat(CTX, "cn1") is True
    with sqlite_db.reader() as session:
        after = session.scalars(sa.select(models.Service)).one()
    assert after.report_count == before.report_count + 1
    assert after.last_seen_up >= before.last_seen_up
    with pytest.raises(exception.InvalidRequest):
        manager.heartbeat(CTX, "")


def test_a_report_without_disabled_keeps_the_operators_choice(manager):
    manager.report_compute_node(CTX, dict(HOST, disabled=True, disabled_reason="maintenance"))
    again = manager.report_compute_node(CTX, dict(HOST, vcpus=16))
    assert (again["vcpus"], again["disabled"], again["disabled_reason"]) == (
        16, True, "maintenance")
    enabled = manager.report_compute_node(CTX, dict(HOST, disabled=False))
    assert (enabled["disabled"], enabled["disabled_reason"]) == (False, None)


def test_a_report_without_stats_keeps_the_imported_ones(manager):
    manager.report_compute_node(CTX, dict(HOST, stats={"ssd": "true"}, metrics={"load": 1.5}))
    again = manager.report_compute_node(CTX, dict(HOST, vcpus=16))
    assert (again["stats"], again["metrics"]) == ({"ssd": "true"}, {"load": 1.5})
    cleared = manager.report_compute_node(CTX, dict(HOST, stats={}))
    assert (cleared["stats"], cleared["metrics"]) == ({}, {"load": 1.5})


def test_capacity_below_usage_disables_until_it_fits(manager):
    manager.report_compute_node(CTX, HOST)
    placed = _place(manager, vcpus=6, memory_mb=12288)
    shrunk = manager.report_compute_node(CTX, dict(HOST, vcpus=4, memory_mb=8192))
    # Accepted as the truth about the hardware, but the host is marked.
    assert (shrunk["vcpus"], shrunk["memory_mb"]) == (4, 8192)
    assert (shrunk["vcpus_used"], shrunk["memory_mb_used"]) == (6, 12288)
    assert shrunk["warnings"] == ["capacity below usage: MEMORY_MB 8192 < 12288 used",
                                  "capacity below usage: VCPU 4 < 6 used"]
    assert shrunk["disabled"] is True
    assert shrunk["disabled_reason"] == ("capacity below usage: MEMORY_MB 8192 < 12288 "
                                         "used; VCPU 4 < 6 used")
    with pytest.raises(exception.NoValidHost):
        _place(manager)
    # Still short on the next report: still disabled, same reason.
    assert manager.report_compute_node(CTX, dict(HOST, vcpus=4, memory_mb=8192))["disabled"]
    fits = manager.report_compute_node(CTX, HOST)
    assert (fits["disabled"], fits["disabled_reason"], fits["warnings"]) == (False, None, [])
    assert manager.release(CTX, placed["instance_uuid"]) is True


def test_an_operators_reason_is_not_replaced(manager):
    manager.report_compute_node(CTX, HOST)
    _place(manager, vcpus=6)
    manager.report_compute_node(CTX, dict(HOST, disabled=True, disabled_reason="rma"))
    shrunk = manager.report_compute_node(CTX, dict(HOST, vcpus=2))
    assert shrunk["warnings"] == ["capacity below usage: VCPU 2 < 6 used"]
    assert (shrunk["disabled"], shrunk["disabled_reason"]) == (True, "rma")
    back = manager.report_compute_node(CTX, HOST)
    assert (back["disabled"], back["disabled_reason"]) == (True, "rma")


def test_huge_pages_below_usage_are_flagged(sqlite_db):
    import sqlalchemy as sa

    from scheduler import fleet
    cell = {"id": 0, "cpuset": [0, 1], "memory_mb": 4096,
            "mempages": [{"size_kb": 4, "total": 1000}, {"size_kb": 2048, "total": 8}]}
    with sqlite_db.writer() as session:
        db_hosts.upsert_host(session, fleet.parse_host(dict(HOST, numa_topology={
            "cells": [cell]})))
    with sqlite_db.writer() as session:
        node = session.scalars(sa.select(models.ComputeNode)).one()
        node.numa_topology = ('{"cells": [{"id": 0, "cpuset": [0, 1], "memory_mb": 4096, '
                              '"memory_usage": 3072, "mempages": [{"size_kb": 2048, '
                              '"total": 8, "used": 6}]}]}')
        session.flush()
        rec = fleet.parse_host(dict(HOST, numa_topology={"cells": [
            dict(cell, memory_mb=2048, mempages=[{"size_kb": 2048, "total": 4}])]}))
        assert db_hosts.capacity_shortfalls(node, rec) == [
            "NUMA cell 0 memory_mb 2048 < 3072 used", "NUMA cell 0 2048 kB pages 4 < 6 used"]
        same = fleet.parse_host(dict(HOST, numa_topology={"cells": [cell]}))
        assert db_hosts.capacity_shortfalls(node, same) == []


def test_a_claimed_device_is_never_dropped(manager, sqlite_db):
    manager.report_compute_node(CTX, HOST)
    manager.report_pci_devices(CTX, "cn1", [PF, VF, VF2])
    placed = _place(manager, extra_specs={"pci_passthrough:alias": "vf:1"})
    [taken] = placed["pci_devices"]
    with sqlite_db.reader() as session:
        rows = {d.address: d.status for d in session.scalars(sa.select(models.PciDevice))}
    assert rows[taken] == "claimed"
    free_vf = ({VF["address"], VF2["address"]} - {taken}).pop()
    # The host stops reporting both VFs: the free one goes, the claimed one stays.
    plan = manager.report_pci_devices(CTX, "cn1", [PF])
    assert plan["remove"] == [free_vf]
    assert plan["warnings"] == [f"device {taken} is no longer reported but is claimed by "
                                f"instance {placed['instance_uuid']}; kept"]
    with sqlite_db.reader() as session:
        rows = {d.address: d.status for d in session.scalars(sa.select(models.PciDevice))}
    assert rows == {PF["address"]: "unclaimable", taken: "claimed", free_vf: "removed"}
    assert manager.release(CTX, placed["instance_uuid"]) is True


TRUSTED_ALIAS = ('{"name": "tvf", "vendor_id": "8086", "product_id": "154c", '
                 '"device_type": "type-VF", "trusted": "true"}')


def test_tagged_devices_are_stored_and_placed_only_for_the_tag(sqlite_db, conf):
    conf.set_override("alias", [ALIAS, TRUSTED_ALIAS], group="pci")
    manager = Direct(SchedulerManager(
        sqlite_db, FilterScheduler(HostManager(sqlite_db, conf), conf), conf))
    manager.report_compute_node(CTX, HOST)
    plan = manager.report_pci_devices(CTX, "cn1", [PF, VF, dict(VF2, tags={"trusted": True})])
    assert [d["tags"] for d in plan["add"]] == [{}, {}, {"trusted": "true"}]
    with sqlite_db.reader() as session:
        tags = dict(session.execute(sa.select(models.PciDevice.address,
                                              models.PciDevice.tags)).all())
    assert tags == {PF["address"]: None, VF["address"]: None,
                    VF2["address"]: '{"trusted":"true"}'}
    shown = manager.show_host(CTX, "cn1")["pci_devices"]
    assert shown["by_tag"] == {"trusted=true": 1}
    trusted = _place(manager, extra_specs={"pci_passthrough:alias": "tvf:1"})
    assert trusted["pci_devices"] == [VF2["address"]]
    # The only trusted VF is taken: a second trusted request finds none, while an
    # untagged one still gets the plain VF.
    with pytest.raises(exception.NoValidHost) as e:
        _place(manager, extra_specs={"pci_passthrough:alias": "tvf:1"})
    assert "alias tvf: need 1 matching device, 0 free" in str(e.value)
    plain = _place(manager, extra_specs={"pci_passthrough:alias": "vf:1"})
    assert plain["pci_devices"] == [VF["address"]]


@pytest.mark.parametrize("devices, field", [
    ([PF, dict(VF, tags={"trusted": "yes\x1b[2J"})], "devices[1].tags.trusted"),
    ([PF, dict(VF, tags={"vendor_id": "8086"})], "devices[1].tags.vendor_id"),
    ([PF, dict(VF, tags="trusted")], "devices[1].tags"),
])
def test_bad_tags_are_refused_naming_the_field(manager, devices, field):
    manager.report_compute_node(CTX, HOST)
    with pytest.raises(exception.InvalidRequest) as e:
        manager.report_pci_devices(CTX, "cn1", devices)
    assert e.value.field == field


def test_bad_tags_in_a_node_report_name_the_field(manager):
    with pytest.raises(exception.InvalidRequest) as e:
        manager.report_compute_node(CTX, dict(HOST, pci_devices=[
            PF, VF, VF2, dict(VF, address="0000:81:02.3", tags={"bad key": "x"})]))
    assert e.value.field == "node.pci_devices[3].tags.bad key"


def _hugepage_host(reserved: int) -> dict:
    return dict(HOST, numa_topology={"cells": [
        {"id": 0, "cpuset": [0, 1, 2, 3, 4, 5, 6, 7], "memory_mb": 16384,
         "mempages": [{"size_kb": 4, "total": 3145728},
                      {"size_kb": 2048, "total": 512, "reserved": reserved}]}]})


def _place_2m(manager, memory_mb):
    flavor = {"vcpus": 1, "memory_mb": memory_mb, "root_gb": 10,
              "extra_specs": {"hw:mem_page_size": "2MB"}}
    return manager.select_destinations(CTX, {"flavor": flavor})[0][0]


@pytest.fixture
def numa_manager(sqlite_db, conf):
    conf.set_override("enabled_filters", ["ComputeFilter", "RamFilter",
                                          "NUMATopologyFilter"], group="filter_scheduler")
    return Direct(SchedulerManager(
        sqlite_db, FilterScheduler(HostManager(sqlite_db, conf), conf), conf))


def _pages_2m(manager) -> dict:
    cell = manager.show_host(CTX, "cn1")["numa_topology"]["cells"][0]
    page = next(p for p in cell["mempages"] if p["size_kb"] == 2048)
    return {k: page[k] for k in ("total", "used", "reserved")}


def test_reserved_huge_pages_are_never_given_to_a_guest(numa_manager):
    m = numa_manager
    m.report_compute_node(CTX, _hugepage_host(reserved=400))
    with pytest.raises(exception.NoValidHost) as e:
        _place_2m(m, 512)                          # 256 pages, 112 free
    assert "2048 KiB pages: need 256, 112 free" in str(e.value)
    placed = _place_2m(m, 224)                     # all 112 free pages
    assert _pages_2m(m) == {"total": 512, "used": 112, "reserved": 400}
    with pytest.raises(exception.NoValidHost):
        _place_2m(m, 2)
    # A report that reserves fewer keeps the guest's pages and frees the rest.
    m.report_compute_node(CTX, _hugepage_host(reserved=398))
    assert _pages_2m(m) == {"total": 512, "used": 112, "reserved": 398}
    _place_2m(m, 2)
    with pytest.raises(exception.NoValidHost):
        _place_2m(m, 4)
    # Reserving pages a guest holds is capacity below usage: flagged, not hidden.
    short = m.report_compute_node(CTX, _hugepage_host(reserved=450))
    assert short["warnings"] == ["capacity below usage: NUMA cell 0 2048 kB pages 512 < "
                                 "113 used + 450 reserved"]
    assert short["disabled"] is True
    assert m.release(CTX, placed["instance_uuid"]) is True


def test_reserved_pages_above_the_total_are_refused():
    with pytest.raises(exception.InvalidRequest) as e:
        fleet.parse_host(_hugepage_host(reserved=513), where="node")
    assert e.value.field == "node.numa_topology.cells.0.mempages.1.reserved"
    assert "between 0 and total (512)" in e.value.reason
