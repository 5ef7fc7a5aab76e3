"""oslo.messaging plumbing shared by the daemon and its clients.

One place decides the transport defaults (local RabbitMQ, exchange ``berth``),
which exception modules may be rebuilt on the client, and how the request
context travels (a plain dict on the wire, an oslo.context on each side).
"""
from __future__ import annotations

import math
import re
import socket
import warnings
from typing import Any

import oslo_messaging
from oslo_config import cfg
from oslo_context import context as oslo_context

DEFAULT_TRANSPORT_URL = "rabbit://guest:guest@127.0.0.1:5672/"
IN_PROCESS_TRANSPORT_URL = "kombu+memory:////"
CONTROL_EXCHANGE = "berth"

# Errors raised by the daemon that the client rebuilds as the same types.
ALLOWED_REMOTE_EXMODS = ["scheduler.exception", "db.errors"]



def set_defaults() -> None:
    """Berth's defaults for oslo.messaging's own [DEFAULT] options: the local
    RabbitMQ and the exchange "berth". Also the ``oslo.config.opts.defaults``
    hook of the ``berth.scheduler`` namespace, so the generated sample shows
    them. (oslo.messaging offers a public setter for the exchange only.)"""
    oslo_messaging.set_transport_defaults(control_exchange=CONTROL_EXCHANGE)
    cfg.set_defaults(oslo_messaging.transport._transport_opts,
                     transport_url=DEFAULT_TRANSPORT_URL)


set_defaults()
# Registered now (oslo.messaging would on first use) so they can be overridden
# and read before a transport exists; the same objects, so no duplicate.
cfg.CONF.register_opts(oslo_messaging.transport._transport_opts)

server_opts = [
    cfg.StrOpt("host",
               default=socket.gethostname(),
               sample_default="<hostname>",
               help="Name of this scheduler host: its RPC server name, shown by "
                    "'berth ping'. Must be unique among the scheduler hosts of a "
                    "deployment."),
]

rpc_opts = [
    cfg.StrOpt("topic",
               default="scheduler",
               help="Message-bus topic the scheduler listens on and clients send to. "
                    "Every scheduler process of one deployment must use the same "
                    "topic; give separate deployments sharing a broker separate "
                    "topics (or separate [DEFAULT] control_exchange)."),
    cfg.StrOpt("admin_topic",
               help="Topic of the operator and agent calls (report_compute_node, "
                    "report_pci_devices, heartbeat, aggregate_*, list_hosts, "
                    "show_host, capacity); the compute-API calls "
                    "(select_destinations, confirm, release, reschedule, moves) stay "
                    "on [scheduler] topic, and each topic refuses the other's calls "
                    "(ping is served on both). The admin topic lives on an exchange "
                    "of its own, the control exchange's name with an admin prefix "
                    "(admin_berth for berth). Unset: every call on [scheduler] topic. Set it, "
                    "and give the compute API's broker user no write permission on "
                    "that exchange, to keep compute APIs away from admin calls (the "
                    "security page of the admin guide has the whole recipe). Clients "
                    "and daemons must "
                    "agree."),
    cfg.StrOpt("rpc_version_cap",
               help="Highest scheduler RPC API version clients send, e.g. '1.0'. "
                    "Set it to the oldest scheduler still running during a rolling "
                    "upgrade; unset means the client's newest version."),
    cfg.IntOpt("long_rpc_timeout",
               default=1800, min=1,
               help="Seconds a client waits for select_destinations, which can be "
                    "slow on a large fleet. The daemon sends a heartbeat every "
                    "[DEFAULT] rpc_response_timeout seconds while it works, so a "
                    "dead scheduler is still noticed quickly."),
    cfg.IntOpt("select_retries",
               default=1, min=0,
               help="How often the client library sends select_destinations again, "
                    "with the same instance UUIDs, after the call timed out or its "
                    "reply was lost. Safe: the scheduler recognises a retry of a "
                    "request it placed already and returns those placements instead "
                    "of claiming twice. The client picks the instance UUIDs when the "
                    "caller gives none, so that a retry can name them."),
]

caller_opts = [
    cfg.ListOpt("caller_roles", default=["service"],
                help="Roles of the request context this process's calls carry when "
                     "the caller gives none (berth, berth-agent, a compute API that "
                     "uses scheduler.rpcapi without its own contexts), read by the "
                     "daemon's policy rules ([scheduler] enforce_policy): admin or "
                     "service may do everything; give an operator's berth 'admin', "
                     "a tool that should only place and release its own project's "
                     "instances e.g. 'member' with caller_project_id. A caller that "
                     "acts for a user passes the user's context instead."),
    cfg.FloatOpt("busy_retry_timeout", default=30.0, min=0.0,
                 help="Seconds the client library (berth, berth-agent, "
                      "scheduler.rpcapi) keeps sending a call again, with a growing "
                      "pause, while the scheduler answers that it is busy "
                      "(ServiceUnavailable from its admission control: the call did "
                      "nothing). 0: give the busy answer to the caller at once."),
    cfg.StrOpt("caller_project_id",
               help="Project of the request context this process's calls carry when "
                    "the caller gives none (see caller_roles). Unset: none."),
]

LIST_OPTS = [("DEFAULT", server_opts), ("scheduler", rpc_opts + caller_opts)]

#: Who calls what: the compute API places and frees instances; operators and host
#: agents report hosts and edit aggregates. ``ping`` is served on both topics.
COMPUTE_METHODS = frozenset({"select_destinations", "confirm", "release", "reschedule",
                             "move_instance", "confirm_move", "revert_move", "ping"})
ADMIN_METHODS = frozenset({"report_compute_node", "report_pci_devices", "aggregate_create",
                           "aggregate_update", "aggregate_delete", "aggregate_add_host",
                           "aggregate_remove_host", "aggregate_set_metadata",
                           "aggregate_list", "list_hosts", "show_host", "heartbeat",
                           "capacity", "ping"})


def admin_topic(conf: cfg.ConfigOpts = cfg.CONF) -> str | None:
    """The separate topic of admin calls, or None when they share [scheduler] topic."""
    topic = conf.scheduler.admin_topic
    return topic if topic and topic != conf.scheduler.topic else None

cfg.CONF.register_opts(server_opts)
cfg.CONF.register_opts(rpc_opts + caller_opts, group="scheduler")


def broker_addresses(conf: cfg.ConfigOpts, url: str | None = None) -> list[tuple[str, int]]:
    """(host, port) of each RabbitMQ broker of ``url`` (default: ``[DEFAULT]
    transport_url``); none for other transports."""
    parsed = oslo_messaging.TransportURL.parse(conf, url or conf.transport_url)
    if parsed.transport not in ("rabbit", "kombu", "amqp"):
        return []
    default_port = 5672
    return [(h.hostname or "127.0.0.1", h.port or default_port) for h in parsed.hosts] \
        or [("127.0.0.1", default_port)]


class BrokerTLSError(ConnectionError):
    """A broker answered but the TLS handshake the rabbit driver would make with
    it failed: a configuration error (wrong CA, a host name the certificate does
    not carry, a port without TLS), which the driver would retry for ever."""


def check_broker_tls(conf: cfg.ConfigOpts, url: str | None = None,
                     timeout: float = 5.0) -> None:
    """With ``[oslo_messaging_rabbit] ssl`` and ``ssl_ca_file``: make the
    handshake the rabbit driver will make with each broker (that CA, the
    client certificate, the host name checked when the URL names one host)
    and raise BrokerTLSError saying why it failed. A broker that does not
    accept the TCP connection is left to the driver's retries."""
    import ssl

    import oslo_messaging.opts

    for group, opts in oslo_messaging.opts.list_opts():
        if group == "oslo_messaging_rabbit":
            conf.register_opts(opts, group=group)     # as the driver will
    rabbit = conf.oslo_messaging_rabbit
    if not rabbit.ssl or not rabbit.ssl_ca_file:
        return
    addresses = broker_addresses(conf, url)
    try:
        context = ssl.create_default_context(cafile=rabbit.ssl_ca_file)
        if rabbit.ssl_cert_file:
            context.load_cert_chain(rabbit.ssl_cert_file, rabbit.ssl_key_file or None)
    except (OSError, ssl.SSLError) as e:
        raise BrokerTLSError(f"[oslo_messaging_rabbit] ssl_ca_file, ssl_cert_file or "
                             f"ssl_key_file cannot be used: {e}") from None
    context.check_hostname = len(addresses) == 1      # as oslo.messaging does
    failed = []
    for host, port in addresses:
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError:
            continue
        try:
            with context.wrap_socket(sock, server_hostname=host):
                return
        except (OSError, ssl.SSLError) as e:
            failed.append(f"{host}:{port}: TLS handshake failed: {e}")
        finally:
            sock.close()
    if failed:
        raise BrokerTLSError("; ".join(failed) + " (see [oslo_messaging_rabbit] "
                             "ssl_ca_file and [DEFAULT] transport_url)")


def get_transport(conf: cfg.ConfigOpts = cfg.CONF,
                  url: str | None = None) -> oslo_messaging.Transport:
    """The RPC transport for ``url`` (default: ``[DEFAULT] transport_url``); on
    RabbitMQ, the driver that keeps restricted users confined (``scheduler.broker``)."""
    from scheduler import broker

    return broker.get_transport(conf, url, ALLOWED_REMOTE_EXMODS)


def get_server(transport: oslo_messaging.Transport, topic: str, server: str,
               endpoints: list, backend: str, exchange: str | None = None,
               admission=None) -> oslo_messaging.RPCServer:
    """An RPC server on ``topic`` / ``server`` (on ``exchange``, default the
    control exchange) with the chosen executor; its calls take turns of
    ``admission`` (``scheduler.admission.Admission``, shared by a worker's
    servers), if given.

    Messages are checked before dispatch, and every outcome answered with a
    value or one of Berth's errors (``scheduler.envelope.CheckedDispatcher``).
    The threading executor is oslo.messaging's default. Naming the eventlet one
    triggers a deprecation warning aimed at library users; the operator's choice
    is logged once by the service instead, so the warning is silenced here.
    """
    from oslo_messaging.rpc import server as rpc_server

    from scheduler.envelope import CheckedDispatcher

    target = oslo_messaging.Target(exchange=exchange, topic=topic, server=server)
    dispatcher = CheckedDispatcher(endpoints, ContextSerializer(),
                                   oslo_messaging.DefaultRPCAccessPolicy, admission)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return rpc_server.RPCServer(transport, target, dispatcher,
                                    "eventlet" if backend == "eventlet" else None)


def get_client(transport: oslo_messaging.Transport, topic: str, *,
               version_cap: str | None = None, timeout: float | None = None,
               retry: int | None = None, exchange: str | None = None
               ) -> oslo_messaging.RPCClient:
    target = oslo_messaging.Target(exchange=exchange, topic=topic, version="1.0")
    return oslo_messaging.get_rpc_client(
        transport, target, version_cap=version_cap, timeout=timeout, retry=retry,
        serializer=ContextSerializer())


def new_context(conf: cfg.ConfigOpts = cfg.CONF, **kw: Any) -> oslo_context.RequestContext:
    """A request context for a call made on this process's own behalf: the
    configured ``[scheduler] caller_roles`` and ``caller_project_id`` unless
    ``kw`` gives others; carries the request id into the daemon's logs."""
    kw.setdefault("roles", list(conf.scheduler.caller_roles))
    kw.setdefault("project_id", conf.scheduler.caller_project_id)
    return oslo_context.RequestContext(**kw)


class ContextSerializer(oslo_messaging.NoOpSerializer):
    """Payloads are plain JSON values; contexts travel as dicts."""

    def serialize_context(self, ctxt: Any) -> dict:
        if isinstance(ctxt, oslo_context.RequestContext):
            return ctxt.to_dict()
        return dict(ctxt or {})

    def deserialize_context(self, ctxt: Any) -> oslo_context.RequestContext:
        """The context as sent, with control characters escaped in its strings:
        its ids are printed in every log line of the request."""
        if not isinstance(ctxt, dict):
            ctxt = {}
        ctxt = {k: _escaped(v) for k, v in ctxt.items()}
        try:
            return oslo_context.RequestContext.from_dict(ctxt)
        except Exception:  # a hostile or foreign context must not kill the call
            return oslo_context.RequestContext()


def _escaped(value: Any) -> Any:
    from db.limits import escape_controls

    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, list):
        return [escape_controls(v) if isinstance(v, str) else v for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_TEXT = "holds a lone surrogate (not Unicode text)"


def check_json(value: Any, field: str, *, max_depth: int = 16,
               max_items: int = 10000, max_str: int = 65536) -> None:
    """Raise InvalidRequest unless ``value`` is plain, finite, bounded JSON.

    Guards every payload before the typed validation so that a huge list, a NaN,
    a non-string key, a lone surrogate (which no database column can store) or
    a deeply nested document is refused by name, cheaply. Every payload of
    every call passes here, on the client and in the daemon: the walk keeps
    the keys above the value it is at, and spells the field's path only to
    name it in a refusal.
    """
    from scheduler.exception import InvalidRequest

    trail: list[str | int] = []         # the keys and indexes from ``value`` down
    budget = max_items

    def refuse(reason: str, at: str | None = None) -> None:
        path = field + "".join(f"[{k}]" if type(k) is int else f".{k}" for k in trail)
        raise InvalidRequest(field=path if at is None else at, reason=reason)

    def walk(v: Any, depth: int) -> None:
        nonlocal budget
        budget -= 1
        if budget < 0:
            refuse(f"more than {max_items} values", at=field)
        if depth > max_depth:
            refuse(f"nested deeper than {max_depth}")
        # no class is two of these (their layouts conflict): the order only
        # puts the common ones first
        if isinstance(v, str):
            if len(v) > max_str:
                refuse(f"longer than {max_str} characters")
            if not v.isascii() and _SURROGATE.search(v):
                refuse(_NOT_TEXT)
        elif isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    refuse("keys must be strings")
                if not k.isascii() and _SURROGATE.search(k):
                    refuse(_NOT_TEXT)
                trail.append(k)
                walk(item, depth + 1)
                trail.pop()
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                trail.append(i)
                walk(item, depth + 1)
                trail.pop()
        elif v is None or isinstance(v, bool):
            pass
        elif isinstance(v, int):
            if abs(v) >= 2 ** 63:
                refuse("integer out of range")
        elif isinstance(v, float):
            if not math.isfinite(v):
                refuse("must be a finite number")
        else:
            refuse(f"{type(v).__name__} is not a JSON value")

    walk(value, 0)
