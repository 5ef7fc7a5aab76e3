"""The scheduler's RPC endpoint in-process on SQLite, as a hostile client meets it:
the real SchedulerManager over a real FilterScheduler, and a dump of every table to
prove that a refused payload changed nothing."""
from __future__ import annotations

import oslo_messaging
import sqlalchemy as sa
from oslo_config import cfg

from db import models
from scheduler import rpc
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.manager import SchedulerManager

PCI_ALIAS = ('{"name": "nic", "vendor_id": "8086", "product_id": "154c", '
             '"device_type": "type-VF"}')


class Direct:
    """Calls the endpoint as the dispatcher would, with the context Berth's own
    tools send (``[scheduler] caller_roles``), and re-raises Berth's errors
    (``expected_exceptions`` wraps them for oslo.messaging)."""

    def __init__(self, endpoint: SchedulerManager) -> None:
        self.endpoint = endpoint

    def __getattr__(self, name):
        method = getattr(self.endpoint, name)

        def call(*args, **kwargs):
            try:
                return method(rpc.new_context(), *args, **kwargs)
            except oslo_messaging.ExpectedException as e:
                raise e.exc_info[1] from None
        return call


def configure(conf: cfg.ConfigOpts = cfg.CONF) -> cfg.ConfigOpts:
    conf([], project="berth")
    conf.set_override("alias", [PCI_ALIAS], group="pci")
    return conf


def unconfigure(conf: cfg.ConfigOpts = cfg.CONF) -> None:
    conf.clear_override("alias", group="pci")


def manager(db, conf: cfg.ConfigOpts = cfg.CONF) -> Direct:
    scheduler = FilterScheduler(HostManager(db, conf), conf)
    return Direct(SchedulerManager(db, scheduler, conf, backend="threading"))


def dump(db) -> dict[str, list[tuple]]:
    """Every row of every table, timestamps included, in a stable order."""
    out = {}
    with db.reader_connection() as conn:
        for table in models.Base.metadata.sorted_tables:
            rows = conn.execute(sa.select(table)).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out
