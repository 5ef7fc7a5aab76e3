"""The real daemon over RabbitMQ and MariaDB, in both backends, with 1 and 2 workers:
every RPC method, typed errors, malformed payloads, 16 concurrent clients."""
from __future__ import annotations

import random
import threading
import uuid

import pytest

from scheduler import exception, rpc
from scheduler.manager import RPC_API_VERSION
from tests.functional.daemon import Daemon

SMALL = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}}
PF = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
      "dev_type": "type-PF", "numa_node": 0}


@pytest.fixture(scope="module", params=[("eventlet", 1), ("threading", 1),
                                        ("eventlet", 2), ("threading", 2)],
                ids=lambda p: f"{p[0]}-{p[1]}w")
def daemon(request, tmp_path_factory):
    backend, workers = request.param
    d = Daemon(tmp_path_factory.mktemp("daemon"), backend=backend, workers=workers)
    try:
        d.start()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        d.close()


def _raw_call(daemon, method, **kwargs):
    """Send exactly ``kwargs`` (no client-side checks), as a foreign client with
    the service role might."""
    daemon.api()  # makes the transport
    client = rpc.get_client(daemon.transport(), daemon.topic, timeout=30)
    return client.call({"roles": ["service"]}, method, **kwargs)


def test_ping_answers_from_every_worker(daemon):
    api = daemon.api()
    pids = {api.ping()["pid"] for _ in range(20)}
    info = api.ping()
    assert info["backend"] == daemon.backend and info["version"] == RPC_API_VERSION
    assert len(pids) == daemon.workers


def test_every_rpc_method(daemon):
    api = daemon.api()
    u1, u2 = str(uuid.uuid4()), str(uuid.uuid4())
    dry = api.select_destinations(None, SMALL, dry_run=True)
    assert len(dry) == 1 and dry[0][0]["host"].startswith("fc")
    assert u1 not in daemon.allocations()

    placed = api.select_destinations(None, dict(SMALL, num_instances=2),
                                     instance_uuids=[u1, u2], return_alternates=True)
    assert [p[0]["instance_uuid"] for p in placed] == [u1, u2]
    assert all(len(p) > 1 for p in placed)            # alternates came back
    assert placed[0][0]["allocation"] == {"vcpus": 2, "memory_mb": 2048, "disk_mb": 10240}
    assert set(daemon.allocations()) >= {u1, u2}

    first = placed[0][0]["host"]
    moved = api.reschedule(None, u1, first)
    assert moved[0]["instance_uuid"] == u1 and moved[0]["host"] != first

    assert api.release(None, u1) is True
    assert api.release(None, u1) is False            # idempotent
    assert api.release(None, u2) is True
    assert not ({u1, u2} & set(daemon.allocations()))

    reported = api.report_compute_node(None, {"host": "fc-new", "vcpus": 4,
                                              "memory_mb": 8192, "local_gb": 50})
    assert reported["host"] == "fc-new"
    again = api.report_compute_node(None, {"host": "fc-new", "vcpus": 8,
                                           "memory_mb": 8192, "local_gb": 50})
    assert again["vcpus"] == 8 and again["generation"] > reported["generation"]
    api.report_pci_devices(None, "fc-new", [PF])
    assert api.show_host(None, "fc-new")["pci_devices"]["total"] == 1

    api.aggregate_create(None, "ft-agg", availability_zone="ftz", metadata={"ssd": "true"})
    api.aggregate_add_host(None, "ft-agg", "fc-new")
    api.aggregate_set_metadata(None, "ft-agg", {"gpu": "1"})
    api.aggregate_update(None, "ft-agg", new_name="ft-agg2")
    assert api.show_host(None, "fc-new")["availability_zone"] == "ftz"
    zoned = api.select_destinations(None, dict(SMALL, availability_zone="ftz"))
    assert zoned[0][0]["host"] == "fc-new"
    assert api.release(None, zoned[0][0]["instance_uuid"]) is True
    api.aggregate_remove_host(None, "ft-agg2", "fc-new")
    fleet = sorted({h["host"] for h in api.list_hosts(None)})
    with pytest.raises(exception.NotFound) as caught:     # all or none (RPC 1.1)
        api.aggregate_add_host(None, "ft-agg2", hosts=fleet + ["fc-unknown"])
    assert caught.value.name == "fc-unknown"
    assert api.aggregate_add_host(None, "ft-agg2", hosts=fleet)["hosts"] == fleet
    assert api.aggregate_remove_host(None, "ft-agg2", hosts=fleet)["hosts"] == []
    assert api.aggregate_delete(None, "ft-agg2") is True
    assert "fc-new" in [h["host"] for h in api.list_hosts(None)]
    api.report_compute_node(None, {"host": "fc-new", "vcpus": 8, "memory_mb": 8192,
                                   "local_gb": 50, "disabled": True})
    daemon.assert_consistent()


def test_typed_errors_cross_rpc(daemon):
    api = daemon.api()
    with pytest.raises(exception.NoValidHost) as e:
        api.select_destinations(None, {"flavor": {"vcpus": 1, "memory_mb": 10 ** 7,
                                                  "root_gb": 1}})
    assert "RamFilter" in e.value.reason
    assert any(f["filter"] == "RamFilter" for f in e.value.summary["filters"])
    with pytest.raises(exception.InvalidRequest) as e:
        api.select_destinations(None, {"flavor": {"vcpus": 1, "memory_mb": 1}})
    assert e.value.field == "flavor.root_gb"
    with pytest.raises(exception.NotFound):
        api.show_host(None, "no-such-host")
    with pytest.raises(exception.NotFound):
        api.reschedule(None, str(uuid.uuid4()), "fc00")
    with pytest.raises(exception.Conflict):
        api.aggregate_create(None, "dup")
        api.aggregate_create(None, "dup")
    api.aggregate_delete(None, "dup")


MALFORMED = [
    ("select_destinations", {"request_spec": {}}),                       # missing flavor
    ("select_destinations", {"request_spec": {"flavor": {"vcpus": "2", "memory_mb": 1,
                                                         "root_gb": 1}}}),
    ("select_destinations", {"request_spec": "flavor"}),
    ("select_destinations", {"request_spec": dict(SMALL, force_hosts=["h"] * 20000)}),
    ("select_destinations", {"request_spec": dict(SMALL, project_id=float("nan"))}),
    ("select_destinations", {"request_spec": dict(SMALL, num_instances=10 ** 6)}),
    ("select_destinations", {"request_spec": SMALL, "instance_uuids": ["x"]}),
    ("select_destinations", {"request_spec": SMALL, "dry_run": "no"}),
    ("select_destinations", {"request_spec": dict(SMALL, extra=1)}),
    ("report_compute_node", {"node": {"host": "fc00", "vcpus": -4, "memory_mb": 1,
                                      "local_gb": 1}}),
    ("report_compute_node", {"node": {"host": "fc00", "vcpus": 4, "memory_mb": 1,
                                      "local_gb": 1, "stats": {"x": float("inf")}}}),
    ("report_compute_node", {"node": ["fc00"]}),
    ("report_pci_devices", {"node": "fc00", "devices": [PF] * 5000}),
    ("report_pci_devices", {"node": "fc00", "devices": [dict(PF, address="zz")]}),
    ("release", {"instance_uuid": {"a": 1}}),
    ("aggregate_create", {"name": "x" * 1000}),
    ("aggregate_set_metadata", {"name": "a", "metadata": {"k": {"nested": 1}}}),
]


def test_malformed_payloads_are_refused_and_change_nothing(daemon):
    before = daemon.snapshot()
    for method, kwargs in MALFORMED:
        with pytest.raises(exception.InvalidRequest) as e:
            _raw_call(daemon, method, **kwargs)
        assert e.value.field, (method, kwargs)
    assert daemon.snapshot() == before


def test_16_clients_never_overcommit(daemon):
    """16 clients x 50 requests of mixed sizes, some released as they go: the fleet
    fills up (so claims compete), and what MariaDB holds is exactly what the
    clients were told."""
    api = daemon.api(timeout=60)
    held: dict[str, str] = {}
    released: set[str] = set()
    outcomes = {"placed": 0, "nvh": 0}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(seed: int) -> None:
        rnd = random.Random(seed)
        mine: list[str] = []
        try:
            for _ in range(50):
                spec = {"flavor": {"vcpus": rnd.choice([1, 2, 4]),
                                   "memory_mb": rnd.choice([1024, 2048, 4096]),
                                   "root_gb": rnd.choice([5, 10, 20])}}
                try:
                    sel = api.select_destinations(None, spec)[0][0]
                except exception.NoValidHost:
                    with lock:
                        outcomes["nvh"] += 1
                else:
                    mine.append(sel["instance_uuid"])
                    with lock:
                        held[sel["instance_uuid"]] = sel["host"]
                        outcomes["placed"] += 1
                if mine and rnd.random() < 0.3:
                    victim = mine.pop(rnd.randrange(len(mine)))
                    assert api.release(None, victim) is True
                    with lock:
                        released.add(victim)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert errors == []
    assert outcomes["placed"] + outcomes["nvh"] == 16 * 50
    assert outcomes["nvh"] > 0 and outcomes["placed"] > 0
    assert set(daemon.allocations()) == set(held) - released
    daemon.assert_consistent()
    for u in set(held) - released:
        api.release(None, u)
    daemon.assert_consistent()
