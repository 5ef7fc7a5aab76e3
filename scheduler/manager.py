"""The scheduler's RPC endpoint (API version 1.4; doc/source/reference/rpc-api.rst).

``SchedulerManager`` is made of the endpoint areas of ``scheduler.endpoints``
(placement, moves, hosts, aggregates), each method wrapped by
``scheduler.endpoints.rpc_method``: payloads are checked on arrival
(``scheduler.validation``), replies are plain JSON values, Berth's own errors
reach the caller as the same types.
"""
from __future__ import annotations

import os
import time

import oslo_messaging
from oslo_config import cfg

from scheduler import metrics, policy
from scheduler.endpoints.aggregates import AggregatesEndpoint
from scheduler.endpoints.hosts import HostsEndpoint
from scheduler.endpoints.moves import MovesEndpoint
from scheduler.endpoints.placement import PlacementEndpoint

RPC_API_VERSION = "1.4"


class SchedulerManager(PlacementEndpoint, MovesEndpoint, HostsEndpoint, AggregatesEndpoint):
    """RPC endpoint: validates, then hands off to the scheduler and the DB modules.

    ``scheduler`` is a ``FilterScheduler`` (or anything with its
    ``select_destinations`` / ``release`` / ``reschedule``); ``db`` is the
    worker's own ``Database``.
    """

    target = oslo_messaging.Target(version=RPC_API_VERSION)

    def __init__(self, db, scheduler, conf: cfg.ConfigOpts = cfg.CONF,
                 backend: str = "threading", worker: int = 0) -> None:
        self.db = db
        self.scheduler = scheduler
        self.conf = conf
        self.backend = backend
        self.worker = worker
        self.policy = policy.Policy(conf)
        self._started = time.monotonic()

    def ping(self, ctxt, **kwargs) -> dict:
        """Liveness and identity of the worker that answered."""
        if kwargs:
            from scheduler.endpoints.rpc_method import reply
            from scheduler.exception import InvalidRequest

            raise reply(InvalidRequest(field="arguments",
                                       reason="ping takes no arguments")) from None
        return {"host": self.conf.host, "pid": os.getpid(), "worker": self.worker,
                "backend": self.backend, "version": RPC_API_VERSION,
                "release": metrics.release(),
                "uptime_s": round(time.monotonic() - self._started, 3)}
