"""The RabbitMQ topology Berth uses, and the driver that keeps it confinable.

With broker permissions as the trust boundary, a restricted user (a compute
API) must be able to publish compute calls and read its own replies, and
nothing else: no exchange it may configure or delete, no queue of another
user it may read. Four things of the stock oslo.messaging rabbit driver
stand in the way, and :class:`BerthRabbitDriver` changes them:

* a publisher declares the exchange it publishes to, which needs the
  *configure* right on the control exchange, and that right also deletes it.
  Here a publisher only checks that the exchange exists (a passive declare,
  which needs no right): the daemon, which consumes, declares it;
* reply queues are named ``reply_<uuid>`` whoever made them, so a user's
  permissions cannot tell its own from another's. Here they are named
  ``reply_<broker user>.<uuid>``, so a user may be given
  ``^reply_<user>\\.`` and no other queue;
* a message the daemon cannot read (too large, not JSON, another envelope
  version) is dropped without a word, and the caller waits out its timeout.
  Here it is refused with a typed error to its reply queue when one can be
  read (``scheduler.envelope``);
* a daemon sends a reply to whatever queue the request names (through the
  default exchange, which reaches every queue). Here only to a reply queue
  (``reply_...``): a request naming the admin topic's queue as its reply
  queue gets no reply rather than a message in that queue.

The admin topic lives on an exchange of its own (:func:`exchange_of`):
whatever exchange a restricted user declares under its reply prefix, and
binds into the control exchange, reaches only the compute topic it may
publish to anyway.

:class:`RouteCheck` is the daemon's side: every ``broker_check_interval``
seconds it checks that each of its routes still carries messages to a
consumer (exchange there, binding there, queue consumed); when one does not
(an operator deleted the exchange, a queue was purged away), the worker is
not ready and re-declares what it serves.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import kombu
import oslo_messaging
from oslo_config import cfg
from oslo_log import log as logging
from oslo_messaging import transport as msg_transport
from oslo_messaging._drivers import amqp as rpc_amqp
from oslo_messaging._drivers import amqpdriver, impl_rabbit
from oslo_messaging._drivers import base as driver_base
from oslo_messaging._drivers import common as rpc_common
from oslo_utils import timeutils

LOG = logging.getLogger(__name__)

#: Reply queues start so; a daemon replies to no other queue.
REPLY_PREFIX = "reply_"

broker_opts = [
    cfg.FloatOpt("broker_check_interval",
                 default=10.0, min=0.2,
                 help="Seconds between a worker's checks that each exchange, binding "
                      "and queue it serves is still there and consumed (a ping "
                      "published with the mandatory flag, and the queue's consumer "
                      "count). A route found missing makes the worker not ready "
                      "(/readyz) and re-declares what it serves; it is ready again "
                      "after the next check that passes."),
]

LIST_OPTS = [("scheduler", broker_opts)]

cfg.CONF.register_opts(broker_opts, group="scheduler")


def admin_exchange(conf: cfg.ConfigOpts) -> str:
    """The exchange of the admin topic: ``admin_`` + the control exchange's name.
    A prefix, not a suffix, so that a permission regex written for the control
    exchange (``^berth.*``) does not grant the admin exchange too."""
    return f"admin_{conf.control_exchange}"


def exchange_of(conf: cfg.ConfigOpts, admin: bool) -> str | None:
    """The exchange a topic lives on: the admin topic (when ``[scheduler]
    admin_topic`` is set) on :func:`admin_exchange`, everything else on the
    control exchange (None: the transport's default, which is it)."""
    from scheduler import rpc

    if admin and rpc.admin_topic(conf) is not None:
        return admin_exchange(conf)
    return None


def reply_prefix(url: oslo_messaging.TransportURL) -> str:
    """``reply_<user>.`` for the transport's broker user (``reply_`` without one)."""
    user = next((h.username for h in url.hosts if h.username), None)
    return f"{REPLY_PREFIX}{user}." if user else REPLY_PREFIX


class BerthConnection(impl_rabbit.Connection):
    """oslo.messaging's rabbit connection, publishing without the configure right
    and replying only to reply queues."""

    def topic_send(self, exchange_name, topic, msg, timeout=None, retry=None,
                   transport_options=None):
        exchange = kombu.entity.Exchange(name=exchange_name, type="topic",
                                         durable=self.durable,
                                         auto_delete=self.amqp_auto_delete, passive=True)
        try:
            self._ensure_publishing(self._publish_to_existing, exchange, msg,
                                    routing_key=topic, timeout=timeout, retry=retry,
                                    transport_options=transport_options)
        except rpc_amqp.AMQPDestinationNotFound:
            raise oslo_messaging.MessageDeliveryFailure(
                f"exchange {exchange_name!r} does not exist on the broker: no scheduler "
                f"serves it (yet), or the transport URL names another vhost") from None

    def _publish_to_existing(self, exchange, msg, routing_key=None, timeout=None,
                             transport_options=None):
        """Check once per channel that the exchange exists (a passive declare),
        then publish (``_publish`` declares nothing for a passive exchange)."""
        if exchange.name not in self._declared_exchanges:
            try:
                exchange(self.channel).declare(passive=True)
            except self.connection.channel_errors as exc:
                # 404 from RabbitMQ; the in-process transport says NOT_FOUND only
                # (py-amqp reopens the channel the broker closed)
                if getattr(exc, "code", None) == 404 or "NOT_FOUND" in str(exc):
                    raise rpc_amqp.AMQPDestinationNotFound(str(exc)) from None
                raise
            self._declared_exchanges.add(exchange.name)
        self._publish(exchange, msg, routing_key=routing_key, timeout=timeout,
                      transport_options=transport_options)

    def __init__(self, conf, url, purpose, retry=None):
        self._conf = conf
        super().__init__(conf, url, purpose, retry=retry)

    def declare_consumer(self, consumer):
        """Consume with a callback that checks each message before the listener
        takes it (``scheduler.envelope.read_message``)."""
        from scheduler import envelope

        consumer._callback = envelope.consumer_callback(consumer, self._conf)
        return super().declare_consumer(consumer)

    def direct_send(self, msg_id, msg):
        if not isinstance(msg_id, str) or not msg_id.startswith(REPLY_PREFIX):
            LOG.warning("Not replying to %s: not a reply queue (a reply queue's name "
                        "starts with %r)", printable(repr(msg_id)[:80]), REPLY_PREFIX)
            return
        super().direct_send(msg_id, msg)

    def check_routes(self, routes: Iterable[tuple[str, str, str]],
                     timeout: float) -> list[str]:
        """For each (exchange, routing key, queue): whether a message published
        there reaches the queue and the queue has a consumer. Returns what is
        wrong (empty: every route works). Publishes a ``ping`` cast with the
        mandatory flag, which a consumer answers like any ping cast."""
        problems = []
        with self._connection_lock:
            self.connection.ensure_connection(max_retries=1, timeout=timeout)
            for exchange, key, queue in routes:
                problem = self._check_route(exchange, key, queue, timeout)
                if problem:
                    problems.append(problem)
        return problems

    def _check_route(self, exchange: str, key: str, queue: str, timeout: float) -> str:
        chan = self.connection.channel()
        returned: list[str] = []
        chan.events["basic_return"].add(
            lambda exc, *args: returned.append(str(getattr(exc, "reply_text", exc))))
        try:
            try:
                chan.exchange_declare(exchange, "topic", passive=True)
            except self.connection.channel_errors:
                return f"exchange {exchange!r} is missing"
            chan = self._reopen(chan)
            try:
                _, _, consumers = chan.queue_declare(queue, passive=True)
            except self.connection.channel_errors:
                return f"queue {queue!r} is missing"
            if not consumers:
                return f"queue {queue!r} has no consumer"
            body = json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(
                {"method": "ping", "args": {}, "version": "1.0",
                 rpc_amqp.UNIQUE_ID: uuid.uuid4().hex})})
            import amqp

            chan.basic_publish_confirm(
                amqp.Message(body, content_type="application/json",
                             content_encoding="utf-8"),
                exchange=exchange, routing_key=key, mandatory=True,
                confirm_timeout=timeout)
            if returned:
                return (f"routing key {key!r} of exchange {exchange!r} reaches no queue "
                        f"({returned[0]})")
            return ""
        finally:
            try:
                chan.close()
            except Exception:  # noqa: S110  (closed by the broker already)
                pass

    def restore_bindings(self, routes: Iterable[tuple[str, str, str]]) -> None:
        """Declare each route's exchange (as oslo.messaging's consumers declare
        it) and bind its queue again: what a deleted exchange took away. The
        queues and their consumers are left as they are, so no message taken
        meanwhile changes hands."""
        with self._connection_lock:
            chan = self.connection.channel()
            try:
                for exchange, key, queue in routes:
                    chan.exchange_declare(exchange, "topic", durable=self.durable,
                                          auto_delete=self.amqp_auto_delete)
                    chan.queue_bind(queue, exchange, key)
            finally:
                try:
                    chan.close()
                except Exception:  # noqa: S110  (closed by the broker already)
                    pass

    def _reopen(self, chan):
        """The channel, or a new one when the broker closed it (a 404 closes it)."""
        if getattr(chan, "is_open", True):
            return chan
        new = self.connection.channel()
        new.events["basic_return"] = chan.events["basic_return"]
        return new


#: Seconds a client's reply thread, or a server's listener, waits in one read of
#: its queues. A message ends the wait as soon as it arrives, so this bounds only
#: how long stopping waits for the read.
READ_WAIT_SECONDS = 0.2


class ReplyWaiter(amqpdriver.ReplyWaiter):
    """A client's reply thread, reading its reply queue in waits of
    :data:`READ_WAIT_SECONDS`.

    oslo.messaging's reply thread reads with a timeout of 1 ms after each
    message, doubled after each empty read (1, 2, 4, ... ms): a slow reply
    costs a series of empty reads, each a pass through kombu's retry
    wrappers, and under load that was more of the client's CPU than the call
    itself (figures: the 2026-12-05 "idle reads" performance report). The
    short timeouts serve nothing here: this thread acknowledges each reply as
    it reads it, and a read returns on the first message."""

    def poll(self):
        while not self._thread_exit_event.is_set():
            try:
                self.conn.consume(timeout=READ_WAIT_SECONDS)
            except rpc_common.Timeout:
                continue
            except Exception:
                LOG.exception("Reading the reply queue failed; reading again")


class RpcListener(amqpdriver.RpcAMQPListener):
    """A server's listener, reading its queues in waits of
    :data:`READ_WAIT_SECONDS` (oslo.messaging's reads with 1, 2, 4, ... ms
    after each message, as its reply thread does: empty reads between
    requests). An RPC listener acknowledges each request as it reads it, so
    the short reads served no acknowledgement either."""

    @driver_base.batch_poll_helper
    def poll(self, timeout=None):
        watch = timeutils.StopWatch(duration=timeout).start()
        while not self._shutdown.is_set():
            self._message_operations_handler.process()
            if self.incoming:
                return self.incoming.pop(0)
            left = watch.leftover(return_none=True)
            wait = READ_WAIT_SECONDS if left is None else min(left, READ_WAIT_SECONDS)
            if wait <= 0:
                return None
            try:
                self.conn.consume(timeout=wait)
            except rpc_common.Timeout:
                pass
        # stopped: hand over what was read meanwhile, then let stop() return
        self._message_operations_handler.process()
        if self.incoming:
            return self.incoming.pop(0)
        self._shutoff.set()
        return None


class BerthRabbitDriver(impl_rabbit.RabbitDriver):
    """The rabbit driver with :class:`BerthConnection` and per-user reply queues."""

    def __init__(self, conf, url, default_exchange=None, allowed_remote_exmods=None):
        super().__init__(conf, url, default_exchange, allowed_remote_exmods)
        self._connection_pool.connection_cls = BerthConnection
        self._reply_prefix = reply_prefix(url)
        #: method -> callable: calls answered as soon as they are read
        #: (``scheduler.envelope.answer_at_once``), e.g. ping.
        self.at_once: dict[str, Callable[[], object]] = {}

    def _get_reply_queue_name(self) -> str:
        return self._reply_prefix + uuid.uuid4().hex

    def listen(self, target, batch_size, batch_timeout):
        """A server's consumers (the target's topic, its server's topic, its
        fanout) read by one :class:`RpcListener`."""
        conn = self._get_connection(rpc_common.PURPOSE_LISTEN)
        listener = RpcListener(self, conn)
        exchange = self._get_exchange(target)
        for topic in (target.topic, f"{target.topic}.{target.server}"):
            conn.declare_topic_consumer(exchange_name=exchange, topic=topic,
                                        callback=listener)
        conn.declare_fanout_consumer(target.topic, listener)
        return driver_base.PollStyleListenerAdapter(listener, batch_size, batch_timeout)

    def _get_reply_q(self) -> str:
        """This transport's reply queue, made (with :class:`ReplyWaiter`
        reading it) by its first call."""
        with self._reply_q_lock:
            if self._reply_q is None:
                name = self._get_reply_queue_name()
                conn = self._get_connection(rpc_common.PURPOSE_LISTEN)
                self._waiter = ReplyWaiter(name, conn, self._allowed_remote_exmods)
                self._reply_q, self._reply_q_conn = name, conn
            return self._reply_q

    def check_routes(self, routes: Iterable[tuple[str, str, str]],
                     timeout: float = 5.0) -> list[str]:
        """See :meth:`BerthConnection.check_routes`."""
        with self._get_connection(rpc_common.PURPOSE_SEND, retry=0) as conn:
            return conn.connection.check_routes(routes, timeout)

    def restore_bindings(self, routes: Iterable[tuple[str, str, str]]) -> None:
        """See :meth:`BerthConnection.restore_bindings`."""
        with self._get_connection(rpc_common.PURPOSE_SEND, retry=0) as conn:
            conn.connection.restore_bindings(routes)


def get_transport(conf: cfg.ConfigOpts, url: str | None,
                  allowed_remote_exmods: list[str]) -> oslo_messaging.Transport:
    """An RPC transport; RabbitMQ URLs get :class:`BerthRabbitDriver`."""
    conf.register_opts(msg_transport._transport_opts)
    parsed = oslo_messaging.TransportURL.parse(conf, url)
    if parsed.transport.split("+")[0] not in ("rabbit", "kombu"):
        return oslo_messaging.get_rpc_transport(
            conf, url=url, allowed_remote_exmods=allowed_remote_exmods)
    driver = BerthRabbitDriver(conf, parsed, default_exchange=conf.control_exchange,
                               allowed_remote_exmods=allowed_remote_exmods)
    return msg_transport.RPCTransport(driver)


def routes(conf: cfg.ConfigOpts, served: Iterable[tuple[str, str | None]],
           server: str) -> list[tuple[str, str, str]]:
    """(exchange, routing key, queue) of each topic served: the shared queue
    and this server's own."""
    out = []
    for topic, exchange in served:
        exchange = exchange or conf.control_exchange
        out += [(exchange, topic, topic), (exchange, f"{topic}.{server}", f"{topic}.{server}")]
    return out


class RouteCheck:
    """A worker's periodic check of its broker routes, in a thread of its own;
    ``redeclare`` is called when a route is missing. ``status`` is "ok",
    "not checked", or what is wrong."""

    def __init__(self, conf: cfg.ConfigOpts, transport, routes_of: Callable[[], list],
                 redeclare: Callable[[], None]) -> None:
        self.conf = conf
        self.driver = getattr(transport, "_driver", None)
        self.routes_of = routes_of
        self.redeclare = redeclare
        self.status = "not checked"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """Only a real broker is checked (not the in-process transports)."""
        driver = self.driver
        return isinstance(driver, BerthRabbitDriver) and not str(
            getattr(driver, "_url", "")).startswith(("kombu+memory", "memory"))

    def start(self) -> None:
        if not self.enabled:
            self.status = "ok"
            return
        self._thread = threading.Thread(target=self._run, name="route-check", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        interval = self.conf.scheduler.broker_check_interval
        # The first check once the consumers had time to start consuming.
        wait = min(interval, 1.0)
        while not self._stop.wait(wait):
            try:
                self.check_once()
            except Exception:
                LOG.exception("Checking the broker routes failed")
            wait = interval

    def _restore(self, timeout: float) -> bool:
        """Declare the exchanges and bindings again; whether every route works
        then (else the servers are started again)."""
        try:
            self.driver.restore_bindings(self.routes_of())
            problems = self.driver.check_routes(self.routes_of(), timeout)
        except Exception as e:          # noqa: BLE001 - the full re-declaration follows
            LOG.warning("Declaring the broker's exchanges and bindings again failed "
                        "(%s)", printable(str(e).splitlines()[0][:200] if str(e) else
                                          type(e).__name__))
            return False
        self.status = "; ".join(problems) or "ok"
        return not problems

    def check_once(self) -> str:
        timeout = max(1.0, min(5.0, self.conf.scheduler.broker_check_interval))
        try:
            problems = self.driver.check_routes(self.routes_of(), timeout)
        except Exception as e:       # no connection: the driver reconnects by itself
            text = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            self.status = f"unreachable ({printable(text)})"
            return self.status
        previous, self.status = self.status, "; ".join(problems) or "ok"
        if not problems:
            return self.status
        # A consumer may be between two connections (the driver reconnects by
        # itself): only a missing consumer seen twice running is re-declared.
        if all(p.endswith("has no consumer") for p in problems) and previous != self.status:
            LOG.warning("Broker routes: %s", self.status)
            return self.status
        LOG.warning("Broker routes missing (%s): declaring them again", self.status)
        t0 = time.monotonic()
        if all(_binding_lost(p) for p in problems) and self._restore(timeout):
            LOG.info("Broker routes declared again in %.2f s (exchanges and bindings; "
                     "the consumers kept)", time.monotonic() - t0)
            return self.status
        try:
            self.redeclare()
        except Exception as e:
            LOG.error("Declaring the broker routes again failed: %s", printable(str(e)))
        else:
            LOG.info("Broker routes declared again in %.2f s", time.monotonic() - t0)
        return self.status


def _binding_lost(problem: str) -> bool:
    """Whether a route's problem is only that its exchange or its binding is
    gone (the queue and its consumer are there): declared again in place,
    without new consumers."""
    return problem.startswith("exchange ") or " reaches no queue " in problem


def printable(text: str) -> str:
    """``text`` with control, line-separator and bidi characters escaped, for a
    log line or a terminal."""
    from db.limits import escape_controls

    return escape_controls(text)
