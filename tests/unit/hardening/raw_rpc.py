"""A scheduler service on the in-process broker (kombu's memory transport), and a
raw AMQP client that sends it any message body — what a hostile broker user
can publish — and reads the raw reply."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

import kombu
from oslo_config import cfg

from scheduler import rpc
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.service import SchedulerService

MEMORY_URL = "memory://"


class RawService:
    """A SchedulerService on a topic of its own (real FilterScheduler, ``db``)."""

    def __init__(self, db, conf: cfg.ConfigOpts = cfg.CONF) -> None:
        self.conf = conf
        self.topic = "raw_" + uuid.uuid4().hex[:8]
        conf.set_override("topic", self.topic, group="scheduler")
        self.transport = rpc.get_transport(conf, url=rpc.IN_PROCESS_TRANSPORT_URL)
        scheduler = FilterScheduler(HostManager(db, conf), conf)
        self.service = SchedulerService(conf, backend="threading", transport=self.transport,
                                        scheduler=scheduler, db=db)
        self.service.start()
        self.connection = kombu.Connection(MEMORY_URL)

    def close(self) -> None:
        self.connection.release()
        self.service.stop(10)
        self.transport.cleanup()
        self.conf.clear_override("topic", group="scheduler")

    def send(self, body: str | bytes, connection=None) -> None:
        exchange = kombu.Exchange(self.conf.control_exchange, type="topic", durable=False)
        with (connection or self.connection).Producer() as producer:
            producer.publish(body, exchange=exchange, routing_key=self.topic,
                             content_type="application/json", content_encoding="utf-8")

    def call(self, body: str | bytes, reply_q: str, timeout: float = 10) -> dict | None:
        """Send ``body`` and wait for one message on ``reply_q``: the reply as
        the daemon sent it (``failure`` parsed), or None."""
        queue = kombu.Queue(reply_q, exchange=kombu.Exchange("", type="direct"),
                            routing_key=reply_q, auto_delete=True)
        got: list = []
        with kombu.Connection(MEMORY_URL) as connection, connection.Consumer(
                queue, callbacks=[lambda b, m: got.append(b)], accept=["json"]):
            self.send(body, connection)
            deadline = time.monotonic() + timeout
            while not got and time.monotonic() < deadline:
                try:
                    connection.drain_events(timeout=min(0.5, timeout))
                except TimeoutError:
                    pass
        if not got:
            return None
        reply = got[0]
        if isinstance(reply, dict) and "oslo.message" in reply:
            reply = json.loads(reply["oslo.message"])
        if isinstance(reply, dict) and reply.get("failure"):
            reply["failure"] = json.loads(reply["failure"])
        return reply


def message(method: Any = "ping", args: Any = None, *, version: Any = "1.0",
            reply_q: str | None = None, context: dict | None = None,
            **extra: Any) -> dict:
    """An oslo.messaging call message (before its envelope)."""
    msg: dict[str, Any] = {"method": method, "args": {} if args is None else args,
                           "version": version, "_unique_id": uuid.uuid4().hex,
                           "_msg_id": uuid.uuid4().hex, "_reply_q": reply_q,
                           "_timeout": None}
    for key, value in (context if context is not None else {"roles": ["service"]}).items():
        msg[f"_context_{key}"] = value
    msg.update(extra)
    return msg


def envelope(msg: Any, oslo_version: Any = "2.0") -> str:
    return json.dumps({"oslo.version": oslo_version, "oslo.message": json.dumps(msg)})


def reply_queue() -> str:
    return "reply_raw." + uuid.uuid4().hex
