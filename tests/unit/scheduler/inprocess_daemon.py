"""A scheduler service and its client on the in-process transport, for tests
of the RPC path without a broker."""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from oslo_config import cfg

from scheduler import rpc
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService


@contextlib.contextmanager
def serving(db, scheduler, **api_kw) -> Iterator[tuple[SchedulerService, SchedulerAPI]]:
    """(service, client) on a topic of their own; stopped on exit."""
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    cfg.CONF.set_override("topic", "test_" + uuid.uuid4().hex[:8], group="scheduler")
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=scheduler, db=db)
    service.start()
    try:
        yield service, SchedulerAPI(cfg.CONF, transport=transport, timeout=10, **api_kw)
    finally:
        service.stop(5)
        transport.cleanup()
        cfg.CONF.clear_override("topic", group="scheduler")
