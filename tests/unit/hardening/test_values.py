"""Issue 15, part 3: no value can poison the database. Each case of the issue's
table is refused with a typed error naming the field, and nothing is written."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from db import hosts as db_hosts
from db import limits, models
from scheduler import exception
from scheduler import fleet as fleet_mod
from tests.unit.hardening import inproc

HOST = {"host": "compute-1", "vcpus": 8, "memory_mb": 8192, "local_gb": 100}


@pytest.fixture
def rpc(sqlite_db):
    conf = inproc.configure()
    yield inproc.manager(sqlite_db, conf)
    inproc.unconfigure(conf)


def refused(call, *args, **kwargs) -> exception.InvalidRequest:
    with pytest.raises(exception.InvalidRequest) as caught:
        call(*args, **kwargs)
    return caught.value


def refused_unchanged(db, call, *args, **kwargs) -> exception.InvalidRequest:
    before = inproc.dump(db)
    err = refused(call, *args, **kwargs)
    assert inproc.dump(db) == before
    return err


def fleet_error(doc) -> fleet_mod.InvalidFleet:
    with pytest.raises(fleet_mod.InvalidFleet) as caught:
        fleet_mod.load_fleet(doc)
    return caught.value


# -- floats: finite and in range --------------------------------------------------------

@pytest.mark.parametrize("ratio", [1e308, 1001, float("inf"), float("nan"), 0, -1, True])
def test_ratio_out_of_range_in_fleet(ratio):
    err = fleet_error({"hosts": [{**HOST, "cpu_allocation_ratio": ratio}]})
    assert err.field == "hosts[0].cpu_allocation_ratio"


@pytest.mark.parametrize("ratio", [0.5, 1000, 16])
def test_ratio_in_range_in_fleet(ratio):
    fleet = fleet_mod.load_fleet({"hosts": [{**HOST, "ram_allocation_ratio": ratio}]})
    assert fleet.hosts[0].ram_allocation_ratio == ratio


def test_ratio_1e308_report_refused_and_listing_still_works(rpc, sqlite_db):
    rpc.report_compute_node(HOST)
    err = refused_unchanged(sqlite_db, rpc.report_compute_node,
                            {**HOST, "cpu_allocation_ratio": 1e308})
    assert err.field == "node.cpu_allocation_ratio"
    assert [h["host"] for h in rpc.list_hosts()] == ["compute-1"]


@pytest.mark.parametrize("value", [{"load": 1e300}, {"load": "high"}])
def test_metrics_are_bounded(value):
    err = fleet_error({"hosts": [{**HOST, "metrics": value}]})
    assert err.field == "hosts[0].metrics.load"


@pytest.mark.parametrize("key, value", [
    ("cpu_allocation_ratio", "inf"), ("cpu_allocation_ratio", "nan"),
    ("ram_allocation_ratio", "1e999"), ("disk_allocation_ratio", "1e308"),
    ("cpu_allocation_ratio", "0"), ("cpu_allocation_ratio", "lots"),
    ("max_io_ops_per_host", "1e3"), ("max_instances_per_host", "-1"),
    ("ram_weight_multiplier", "inf"), ("cpu_weight_multiplier", "1e300"),
])
def test_numeric_aggregate_metadata_is_finite_and_in_range(rpc, sqlite_db, key, value):
    rpc.aggregate_create("agg")
    err = refused_unchanged(sqlite_db, rpc.aggregate_set_metadata, "agg", {key: value})
    assert err.field == f"metadata.{key}"
    err = refused_unchanged(sqlite_db, rpc.aggregate_create, "agg2", metadata={key: value})
    assert err.field == f"metadata.{key}"
    err = fleet_error({"hosts": [HOST], "aggregates": [{"name": "a",
                                                        "metadata": {key: value}}]})
    assert err.field == f"aggregates[0].metadata.{key}"


def test_numeric_aggregate_metadata_in_range_is_kept(rpc):
    rpc.aggregate_create("agg")
    out = rpc.aggregate_set_metadata("agg", {"cpu_allocation_ratio": 2.5,
                                             "max_io_ops_per_host": "8",
                                             "ram_weight_multiplier": "-1.5",
                                             "note": "inf"})
    assert out["metadata"] == {"cpu_allocation_ratio": "2.5", "max_io_ops_per_host": "8",
                               "ram_weight_multiplier": "-1.5", "note": "inf"}


# -- integers within the columns ---------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("vcpus", 2 ** 63), ("vcpus", 2 ** 20 + 1), ("memory_mb", 2 ** 63 - 1),
    ("local_gb", 2 ** 41), ("reserved_host_disk_mb", 2 ** 31),
    ("hypervisor_version", 2 ** 63),
])
def test_integers_beyond_the_columns_are_refused(rpc, sqlite_db, field, value):
    err = fleet_error({"hosts": [{**HOST, field: value}]})
    assert err.field == f"hosts[0].{field}"
    err = refused_unchanged(sqlite_db, rpc.report_compute_node, {**HOST, field: value})
    assert err.field == f"node.{field}"


def test_huge_integer_anywhere_in_a_fleet_is_named():
    err = fleet_error({"hosts": [{**HOST, "cpu_info": {"features": [1, 2 ** 70]}}]})
    assert err.field == "hosts[0].cpu_info.features[1]"


def test_largest_accepted_host_lists_without_overflow(sqlite_db):
    """The documented maxima together: every listed sum and product stays finite."""
    big = {"host": "big", "vcpus": limits.MAX_VCPUS, "memory_mb": limits.MAX_CAPACITY,
           "local_gb": limits.MAX_CAPACITY, "cpu_allocation_ratio": limits.MAX_RATIO,
           "ram_allocation_ratio": limits.MAX_RATIO, "disk_allocation_ratio": limits.MAX_RATIO}
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [big]}))
    (row,) = db_hosts.list_hosts(sqlite_db)
    assert row["vcpus"] == limits.MAX_VCPUS
    assert json.dumps(row, default=str)


# -- names without control characters ----------------------------------------------------

@pytest.mark.parametrize("name", ["evil\nINFO forged line", "nul\x00", "esc\x1b[31m",
                                  "del\x7f", "c1\x85", " ", ""])
def test_control_characters_in_names_are_refused(rpc, sqlite_db, name):
    assert fleet_error({"hosts": [{**HOST, "host": name}]}).field == "hosts[0].host"
    assert fleet_error({"hosts": [{**HOST, "node": name}]}).field == "hosts[0].node"
    err = refused_unchanged(sqlite_db, rpc.report_compute_node, {**HOST, "host": name})
    assert err.field.startswith("node")
    assert refused_unchanged(sqlite_db, rpc.aggregate_create, name).field == "name"
    err = refused_unchanged(sqlite_db, rpc.aggregate_create, "a", metadata={name: "x"})
    assert err.field.startswith("metadata")
    doc = {"hosts": [HOST], "aggregates": [{"name": name}]}
    assert fleet_error(doc).field == "aggregates[0].name"


def test_aggregate_name_ending_in_newline_is_refused(rpc, sqlite_db):
    assert refused_unchanged(sqlite_db, rpc.aggregate_create, "zone-a\n").field == "name"
    rpc.aggregate_create("zone-a")
    err = refused_unchanged(sqlite_db, rpc.aggregate_update, "zone-a", new_name="zone-b\n")
    assert err.field == "new_name"


def test_control_characters_in_metadata_values_are_refused(rpc, sqlite_db):
    rpc.aggregate_create("a")
    err = refused_unchanged(sqlite_db, rpc.aggregate_set_metadata, "a", {"k": "v\x1b"})
    assert err.field == "metadata.k"


def test_db_layer_checks_names_itself(sqlite_db):
    """The checks live in db.aggregates too, so a caller that skips the RPC
    layer (fleet import, tools) cannot write a control character either."""
    from db import aggregates

    with pytest.raises(exception.InvalidRequest) as caught:
        aggregates.create_aggregate(sqlite_db, "x\ny")
    assert caught.value.field == "name"
    aggregates.create_aggregate(sqlite_db, "x")
    with pytest.raises(exception.InvalidRequest) as caught:
        aggregates.set_metadata(sqlite_db, "x", {"cpu_allocation_ratio": "nan"})
    assert caught.value.field == "metadata.cpu_allocation_ratio"


# -- YAML and files ----------------------------------------------------------------------

BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
hosts:
  - {host: c1, vcpus: 8, memory_mb: 8192, local_gb: 100, cpu_info: {bomb: *i}}
"""


def test_yaml_alias_bomb_is_refused_by_validation(tmp_path):
    """9**9 (387 M) values from a few hundred bytes: refused by the same check
    that --dry-run runs, before anything would be written."""
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(fleet_mod.InvalidFleet) as caught:
        fleet_mod.load_fleet_file(str(path))
    assert "YAML aliases count" in caught.value.reason


def test_dry_run_refuses_the_alias_bomb(tmp_path, capsys):
    from scheduler.cmd import manage

    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    code = manage.main(["host", "import", "--dry-run", str(path)])
    out = capsys.readouterr()
    assert code != 0
    assert "valid (" not in out.out
    assert "YAML aliases" in out.err + out.out


def test_modest_aliases_still_work(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("""\
hosts:
  - {host: c1, vcpus: 2, memory_mb: 4096, local_gb: 10, stats: &s {rack: r1}}
  - {host: c2, vcpus: 2, memory_mb: 4096, local_gb: 10, stats: *s}
""")
    fleet = fleet_mod.load_fleet_file(str(path))
    assert [h.stats for h in fleet.hosts] == [{"rack": "r1"}, {"rack": "r1"}]


def test_latin1_file_is_refused_by_name(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("hosts:\n  - {host: caf\xe9, vcpus: 1, memory_mb: 1, local_gb: 1}\n"
                     .encode("latin-1"))
    with pytest.raises(fleet_mod.InvalidFleet) as caught:
        fleet_mod.load_fleet_file(str(path))
    assert caught.value.field == "file" and "UTF-8" in caught.value.reason


def test_deep_yaml_is_refused_by_name(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("hosts: " + "[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(fleet_mod.InvalidFleet) as caught:
        fleet_mod.load_fleet_file(str(path))
    assert caught.value.field in ("file", "hosts")


def test_moderately_deep_document_is_refused_by_depth():
    doc = inner = {}
    for _ in range(40):
        inner["x"] = {}
        inner = inner["x"]
    err = fleet_error({"hosts": [{**HOST, "cpu_info": doc}]})
    assert "nesting" in err.reason


# -- reports held to the fleet's rules ---------------------------------------------------

def _pf(addr="0000:81:00.0"):
    return {"address": addr, "vendor_id": "8086", "product_id": "1572", "dev_type": "type-PF"}


def _vf(addr, parent="0000:81:00.0"):
    return {"address": addr, "vendor_id": "8086", "product_id": "154c",
            "dev_type": "type-VF", "parent_addr": parent}


def test_vf_without_its_pf_is_refused(rpc, sqlite_db):
    rpc.report_compute_node(HOST)
    err = refused_unchanged(sqlite_db, rpc.report_pci_devices, "compute-1",
                            [_vf("0000:81:00.1")])
    assert err.field == "devices[0].parent_addr"
    rpc.report_pci_devices("compute-1", [_pf(), _vf("0000:81:00.1")])


def test_duplicate_address_in_a_report_is_refused(rpc, sqlite_db):
    rpc.report_compute_node(HOST)
    err = refused_unchanged(sqlite_db, rpc.report_pci_devices, "compute-1",
                            [_pf(), _pf()])
    assert err.field == "devices[1].address"


@pytest.mark.parametrize("change, what", [
    ({"vcpus": 1}, "VCPU"), ({"memory_mb": 512}, "MEMORY_MB"),
    ({"local_gb": 1}, "DISK_GB"), ({"reserved_host_cpus": 8}, "VCPU"),
    ({"cpu_allocation_ratio": 0.1}, "VCPU"),
])
def test_report_below_usage_is_flagged_never_silently_accepted(rpc, sqlite_db, change, what):
    """The report is the truth about the hardware, so it is stored; the host is
    disabled with a reason saying what is short (and the reply warns) until a
    report fits again."""
    rpc.report_compute_node({**HOST, "cpu_allocation_ratio": 1.0})
    rpc.select_destinations({"flavor": {"vcpus": 4, "memory_mb": 4096, "root_gb": 50}})
    shrunk = rpc.report_compute_node({**HOST, "cpu_allocation_ratio": 1.0, **change})
    assert any(w.startswith(f"capacity below usage: {what}") for w in shrunk["warnings"])
    shown = rpc.show_host("compute-1")
    assert shown["disabled"] and "capacity below usage" in shown["disabled_reason"]
    # growing back (or to exactly the usage) re-enables the host
    rpc.report_compute_node({**HOST, "vcpus": 4, "memory_mb": 4096, "local_gb": 50,
                             "cpu_allocation_ratio": 1.0})
    assert not rpc.show_host("compute-1")["disabled"]


# -- request specs stored once per request -----------------------------------------------

def _spec_rows(db):
    with db.reader_connection() as conn:
        specs = conn.execute(sa.select(models.RequestSpecRow.spec)).scalars().all()
        inline = conn.execute(sa.select(sa.func.count()).where(
            models.Consumer.request_spec.is_not(None))).scalar_one()
    return specs, inline


def test_request_spec_stored_once_per_request(rpc, sqlite_db):
    for i in range(4):
        rpc.report_compute_node({**HOST, "host": f"c{i}", "vcpus": 64, "memory_mb": 65536})
    big = {"flavor": {"vcpus": 1, "memory_mb": 64, "root_gb": 1,
                      "extra_specs": {f"k{i}": "v" * 4000 for i in range(100)}},
           "num_instances": 20}
    result = rpc.select_destinations(big)
    specs, inline = _spec_rows(sqlite_db)
    assert len(result) == 20 and len(specs) == 1 and inline == 0
    assert json.loads(specs[0])["num_instances"] == 1
    # reschedule still finds the spec; releasing every instance removes it
    uuids = [r[0]["instance_uuid"] for r in result]
    again = rpc.reschedule(uuids[0], result[0][0]["host"])
    assert again[0]["host"] != result[0][0]["host"]
    for u in uuids[:-1]:
        assert rpc.release(u)
    assert len(_spec_rows(sqlite_db)[0]) == 1
    assert rpc.release(uuids[-1])
    assert _spec_rows(sqlite_db) == ([], 0)


def test_request_spec_of_one_instance_stored_with_its_consumer(rpc, sqlite_db):
    """A request of one instance has nothing to share: its spec goes on its
    consumer's row (no request_specs row to write, nor to delete on release),
    and reschedule and release find it there."""
    for i in range(2):
        rpc.report_compute_node({**HOST, "host": f"c{i}", "vcpus": 64, "memory_mb": 65536})
    result = rpc.select_destinations({"flavor": {"vcpus": 1, "memory_mb": 64, "root_gb": 1}})
    assert _spec_rows(sqlite_db) == ([], 1)
    uuid, host = result[0][0]["instance_uuid"], result[0][0]["host"]
    again = rpc.reschedule(uuid, host)
    assert again[0]["host"] != host
    assert _spec_rows(sqlite_db) == ([], 1)
    assert rpc.release(uuid)
    assert _spec_rows(sqlite_db) == ([], 0)


def test_refused_multi_instance_request_leaves_no_spec(rpc, sqlite_db):
    """The first two instances fit and are claimed (their spec row written), the
    third does not: the request fails whole, and neither allocations nor the
    spec row remain."""
    rpc.report_compute_node({**HOST, "cpu_allocation_ratio": 1.0})
    with pytest.raises(exception.NoValidHost):
        rpc.select_destinations({"flavor": {"vcpus": 4, "memory_mb": 1024, "root_gb": 1},
                                 "num_instances": 3})
    after = inproc.dump(sqlite_db)
    assert after["request_specs"] == [] and after["allocations"] == []
    assert rpc.show_host("compute-1")["vcpus_used"] == 0


def _orphan_specs(db) -> int:
    specs, allocs = models.RequestSpecRow, models.Consumer
    with db.reader_connection() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(specs).where(
            ~sa.exists().where(allocs.request_spec_id == specs.id))).scalar_one()


def test_forced_host_delete_leaves_no_orphaned_spec(rpc, sqlite_db):
    """A forced delete removes the host's allocations; the specs only they
    referred to go with them, a spec another host's allocation shares stays
    (reschedule still reads it)."""
    for name in ("c0", "c1"):
        rpc.report_compute_node({**HOST, "host": name, "cpu_allocation_ratio": 1.0})
    flavor = {"vcpus": 4, "memory_mb": 1024, "root_gb": 1}
    # two instances of one request (one spec row), one per host: c0 and c1
    shared = rpc.select_destinations({"flavor": flavor, "num_instances": 2,
                                      "instance_group": {"uuid": "g1",
                                                         "policy": "anti-affinity"}})
    on = {r[0]["host"]: r[0]["instance_uuid"] for r in shared}
    assert set(on) == {"c0", "c1"}
    alone = rpc.select_destinations({"flavor": flavor, "project_id": "p2"})
    alone_host = alone[0][0]["host"]
    # the request of one instance keeps its spec on its consumer's row
    assert _spec_rows(sqlite_db)[1] == 1
    assert len(_spec_rows(sqlite_db)[0]) == 1 and _orphan_specs(sqlite_db) == 0
    result = db_hosts.delete_host(sqlite_db, alone_host, force=True)
    assert result["allocations_deleted"] == 2
    specs, inline = _spec_rows(sqlite_db)
    assert len(specs) == 1 and json.loads(specs[0]).get("project_id") is None
    assert inline == 0
    assert _orphan_specs(sqlite_db) == 0
    other = "c1" if alone_host == "c0" else "c0"
    db_hosts.delete_host(sqlite_db, other, force=True)
    assert _spec_rows(sqlite_db) == ([], 0)
