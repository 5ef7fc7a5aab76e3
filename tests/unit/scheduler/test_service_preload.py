"""A worker loads its host-state cache before it takes requests."""
from __future__ import annotations

import gc
import uuid

import pytest
from oslo_config import cfg

from db import hosts as db_hosts
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import rpc
from scheduler.manager import RPC_API_VERSION
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService


@pytest.fixture
def serve():
    started = []

    def make(db):
        transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
        cfg.CONF.set_override("topic", "test_" + uuid.uuid4().hex[:8], group="scheduler")
        service = SchedulerService(cfg.CONF, backend="threading", transport=transport, db=db)
        started.append((service, transport))
        service.start()
        return service, SchedulerAPI(cfg.CONF, transport=transport, timeout=10)

    yield make
    for service, transport in started:
        service.stop(5)
        transport.cleanup()
    cfg.CONF.clear_override("topic", group="scheduler")
    gc.unfreeze()


def test_cache_is_loaded_and_frozen_before_the_first_request(sqlite_db, serve, caplog):
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [
        {"host": f"h{i}", "vcpus": 8, "memory_mb": 8192, "local_gb": 100} for i in range(3)]}))
    gc.unfreeze()
    with caplog.at_level("INFO", logger="scheduler.service"):
        service, api = serve(sqlite_db)
    hm = service._host_manager
    assert hm.loaded                              # before any request arrived
    assert gc.get_freeze_count() > 0
    assert "loaded 3 hosts" in caplog.text
    sel = api.select_destinations(None, {"flavor": {"vcpus": 1, "memory_mb": 512,
                                                    "root_gb": 1}})
    assert sel[0][0]["host"] in {"h0", "h1", "h2"}


def test_unreadable_database_at_start_defers_the_load(tmp_path, serve, caplog):
    db = Database(f"sqlite:///{tmp_path}/empty.sqlite")       # no schema yet
    gc.unfreeze()
    try:
        with caplog.at_level("WARNING", logger="scheduler.service"):
            service, api = serve(db)
        assert not service._host_manager.loaded
        assert gc.get_freeze_count() == 0
        assert "the first request will try again" in caplog.text
        assert api.ping()["version"] == RPC_API_VERSION         # it serves anyway
    finally:
        db.dispose()
