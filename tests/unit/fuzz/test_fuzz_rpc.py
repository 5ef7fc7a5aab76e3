"""Hypothesis over every way a payload comes in (issue 15, part 5): RequestSpec
payloads, fleet documents, host reports, PCI reports and aggregate calls, through
the real SchedulerManager and FilterScheduler in-process on SQLite.

Every payload gets an answer or one of Berth's typed errors (never InternalError,
which is what any other exception becomes), within ``BOUND_S`` seconds; a refused
payload changes no row of any table. The default profile generates about 10,000
payloads in all (see conftest.py for more)."""
from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.simulate import check_invariants
from tests.unit.fuzz import strategies as S
from tests.unit.fuzz.conftest import examples
from tests.unit.hardening import inproc

#: Seconds any one payload may take (generous: the machine is shared; the point is
#: that nothing is unbounded, like the 6 s range or the 110 s alias bomb of #15).
BOUND_S = 10.0

BASE_FLEET = {
    "hosts": [
        {"host": "c0", "vcpus": 16, "memory_mb": 32768, "local_gb": 200,
         "numa_topology": {"cells": [
             {"id": 0, "socket": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [4, 5, 6, 7],
              "memory_mb": 16384, "siblings": [[4, 5], [6, 7]],
              "mempages": [{"size_kb": 4, "total": 3145728}, {"size_kb": 2048, "total": 1024}]},
             {"id": 1, "socket": 1, "cpuset": [8, 9, 10, 11], "pcpuset": [12, 13, 14, 15],
              "memory_mb": 16384}]},
         "pci_devices": [
             {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
              "dev_type": "type-PF", "numa_node": 0},
             {"address": "0000:81:00.1", "vendor_id": "8086", "product_id": "154c",
              "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0},
             {"address": "0000:81:00.2", "vendor_id": "8086", "product_id": "154c",
              "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0}]},
        {"host": "c1", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
         "stats": {"ssd": "true"}},
        {"host": "c2", "vcpus": 4, "memory_mb": 8192, "local_gb": 50,
         "hypervisor_type": "QEMU", "hypervisor_version": 8002000},
        {"host": "c3", "vcpus": 32, "memory_mb": 65536, "local_gb": 400, "disabled": True},
    ],
    "aggregates": [
        {"name": "a0", "availability_zone": "az1", "hosts": ["c0", "c1"],
         "metadata": {"cpu_allocation_ratio": "2.0", "ssd": "true"}},
        {"name": "a1", "availability_zone": "az2", "hosts": ["c2"],
         "metadata": {"max_instances_per_host": "3"}},
    ],
}


@pytest.fixture(scope="module")
def fast_dir():
    """Where the fuzz databases live: tmpfs when there is one (thousands of commits;
    an fsync each on a disk would be most of the suite's time)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else None
    path = tempfile.mkdtemp(prefix="berth-fuzz-", dir=base)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def world(fast_dir):
    db = Database(f"sqlite:///{fast_dir}/berth.sqlite")
    migration.db_sync(db)
    db_hosts.import_fleet(db, fleet_mod.load_fleet(BASE_FLEET))
    conf = inproc.configure()
    rpc = inproc.manager(db, conf)
    yield db, rpc
    inproc.unconfigure(conf)
    db.dispose()


#: The last dump of each database, kept current: the state before the next payload.
_STATE: dict[int, dict] = {}


def _call(db, fn, *args, unchanged_on=(exception.BerthError,), **kwargs):
    """Run one payload: an answer or a typed error in time; refused, nothing changed."""
    before = _STATE.get(id(db))
    if before is None:
        before = _STATE[id(db)] = inproc.dump(db)
    t0 = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
        error = None
    except exception.BerthError as e:
        result, error = None, e
    elapsed = time.perf_counter() - t0
    assert elapsed < BOUND_S, f"{elapsed:.1f} s"
    event("answer" if error is None else type(error).__name__)  # --hypothesis-show-statistics
    if error is not None:
        assert not isinstance(error, exception.InternalError), error
        if isinstance(error, exception.InvalidRequest):
            assert error.field and len(error.reason) <= 1000
        if isinstance(error, unchanged_on):
            assert inproc.dump(db) == before, error
            return result, error
    _STATE.pop(id(db))      # an answer (or an error allowed to write): dump again next time
    return result, error


def _release_all(rpc, db, result) -> None:
    for alternatives in result or ():
        assert rpc.release(alternatives[0]["instance_uuid"])
    assert check_invariants(db) == []


@examples(2000)
@given(payload=S.REQUEST_SPEC, dry_run=st.booleans())
def test_select_destinations(world, payload, dry_run):
    db, rpc = world
    result, error = _call(db, rpc.select_destinations, payload, dry_run=dry_run,
                          unchanged_on=(exception.InvalidRequest,))
    if error is None:
        assert isinstance(result, list) and result
        if not dry_run:
            _release_all(rpc, db, result)


@examples(1500)
@given(payload=S.maybe(S.REQUEST_SPEC, S.JUNK, 3), uuids=S.JUNK, alternates=S.SCALARS,
       dry_run=S.SCALARS)
def test_select_destinations_arguments(world, payload, uuids, alternates, dry_run):
    db, rpc = world
    result, error = _call(db, rpc.select_destinations, payload, instance_uuids=uuids,
                          return_alternates=alternates, dry_run=dry_run,
                          unchanged_on=(exception.InvalidRequest,))
    if error is None and dry_run is False:
        _release_all(rpc, db, result)


@examples(2000)
@given(node=S.maybe(S.HOST, S.JUNK, 10))
def test_report_compute_node(world, node):
    db, rpc = world
    _call(db, rpc.report_compute_node, node)


@examples(1500)
@given(node=st.one_of(S.HOST_NAMES, st.sampled_from(["fz-a", "fz-b"]), S.JUNK),
       devices=S.maybe(st.lists(S.PCI_DEVICE, max_size=4), S.JUNK, 6))
def test_report_pci_devices(world, node, devices):
    db, rpc = world
    _call(db, rpc.report_pci_devices, node, devices)


NAMES = S.maybe(st.sampled_from(["a0", "a1", "fz", "fz2"]), S.TEXT, 4)
HOSTS = S.maybe(st.sampled_from(["c0", "c1", "c2", "fz-a", "zz"]), S.TEXT, 4)
AGGREGATE_CALLS = st.one_of(
    st.tuples(st.just("aggregate_create"), NAMES).flatmap(lambda t: st.tuples(
        st.just(t[0]), st.just((t[1],)), st.fixed_dictionaries({}, optional={
            "availability_zone": S.maybe(st.sampled_from(["az1", "az2", "az3"]), S.TEXT, 4),
            "metadata": S.maybe(S.METADATA), "hosts": S.maybe(st.lists(HOSTS, max_size=3))}))),
    st.tuples(st.just("aggregate_update"), st.tuples(NAMES), st.fixed_dictionaries(
        {}, optional={"new_name": NAMES, "availability_zone": S.maybe(
            st.sampled_from(["az1", "az9", None]), S.TEXT, 4), "bogus": S.SCALARS})),
    st.tuples(st.just("aggregate_set_metadata"), st.tuples(NAMES, S.maybe(S.METADATA)),
              st.just({})),
    st.tuples(st.sampled_from(["aggregate_add_host", "aggregate_remove_host"]),
              st.tuples(NAMES, HOSTS), st.just({})),
    st.tuples(st.sampled_from(["aggregate_add_host", "aggregate_remove_host"]),
              st.tuples(NAMES), st.fixed_dictionaries({}, optional={
                  "hosts": S.maybe(st.lists(HOSTS, max_size=5)), "host": HOSTS})),
    st.tuples(st.just("aggregate_delete"), st.tuples(NAMES), st.just({})),
)


@examples(1500)
@given(call=AGGREGATE_CALLS)
def test_aggregate_calls(world, call):
    db, rpc = world
    method, args, kwargs = call
    _call(db, getattr(rpc, method), *args, **kwargs)


@examples(1500)
@given(doc=S.FLEET, via_file=st.integers(0, 3))
def test_fleet_documents(fast_dir, doc, via_file):
    """What validation accepts, import writes without error (what ``--dry-run``
    says is what import does); the YAML file path agrees with the document path."""
    t0 = time.perf_counter()
    try:
        fleet = fleet_mod.load_fleet(doc)
    except fleet_mod.InvalidFleet as e:
        assert e.field and len(e.reason) <= 1000
        fleet = None
    assert time.perf_counter() - t0 < BOUND_S
    text = None
    if via_file == 0:
        try:
            text = yaml.safe_dump(doc)
        except yaml.YAMLError:
            pass
    if text is not None and via_file == 0:     # one document in four
        path = fast_dir / "fuzz-fleet.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            fleet_mod.load_fleet_file(str(path))
        except fleet_mod.InvalidFleet:
            pass
    if fleet is not None:
        _import_fresh(fast_dir, fleet)


_FRESH: dict = {}


def _import_fresh(fast_dir, fleet) -> None:
    """Import into an empty database (one, emptied again by deleting the hosts)."""
    db = _FRESH.get("db")
    if db is None:
        db = _FRESH["db"] = Database(f"sqlite:///{fast_dir}/import.sqlite")
        migration.db_sync(db)
        _FRESH["empty"] = inproc.dump(db)
    db_hosts.import_fleet(db, fleet)
    written = inproc.dump(db)
    assert len(written["compute_nodes"]) == len(fleet.hosts)
    with db.writer_connection() as conn:
        for table in reversed(models.Base.metadata.sorted_tables):
            conn.execute(table.delete())
    assert inproc.dump(db) == _FRESH["empty"]
