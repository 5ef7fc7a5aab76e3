"""What an RPC message must be before a method of the scheduler runs, and the
typed answer to one that is not.

A broker user can publish any bytes on a topic it may write to. oslo.messaging
answers a message it cannot dispatch with the Python exception and its
traceback (files, lines, the server's paths), or not at all when it cannot
parse the message (the caller waits out its timeout). Here, in two layers:

* :func:`read_message` (the broker consumer's callback, ``scheduler.broker``):
  a body larger than ``[scheduler] max_message_bytes``, not UTF-8 JSON, nested
  beyond the parser, with an integer beyond 4,300 digits, of an envelope
  version other than 2.0, or whose message is not an object, is refused;
* :class:`CheckedDispatcher` (oslo.messaging's RPC dispatcher): the message's
  method, arguments, version, namespace and client timeout, and the request
  context's ids and roles, are checked before the method is looked up; an
  unknown method or version is refused, and anything unexpected in the
  dispatch is logged with its traceback and answered ``InternalError``.

A plain call of a method the driver answers at once (``ping``:
:func:`answer_at_once`) is answered in the thread that reads the broker,
ahead of every queued request.

Each refusal is an ``InvalidRequest`` naming the field (``message``,
``oslo.version``, ``method``, ``args``, ``version``, ``context.roles`` ...),
sent to the message's reply queue when one can be read — from the parsed
message, or from the raw text when it does not parse — and otherwise dropped
with a WARNING.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import oslo_messaging
from oslo_config import cfg
from oslo_log import log as logging
from oslo_messaging import _utils as messaging_utils
from oslo_messaging.rpc import dispatcher as rpc_dispatcher

from scheduler import exception, validation
from scheduler.call_monitor import CallMonitor
from scheduler.endpoints.rpc_method import reply

LOG = logging.getLogger(__name__)

envelope_opts = [
    cfg.IntOpt("max_message_bytes",
               default=4 * 1024 * 1024, min=1024,
               help="Largest RPC message (bytes, as it arrives from the broker) a "
                    "worker reads; a larger one is refused with InvalidRequest "
                    "(field 'message') before it is parsed. The largest calls Berth's "
                    "own clients make (report_pci_devices with 4,096 devices, "
                    "aggregate_add_host with 10,000 hosts) are well under 4 MiB."),
]
cfg.CONF.register_opts(envelope_opts, group="scheduler")
LIST_OPTS = [("scheduler", envelope_opts)]

#: The envelope version oslo.messaging writes and this server reads.
ENVELOPE_VERSION = "2.0"
_METHOD = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
_VERSION = re.compile(r"\d{1,4}\.\d{1,4}\Z")
# The reply address of a message that does not parse: the keys as written in
# the message, or escaped (once or more) inside the envelope's string.
_REPLY_Q = re.compile(r'\\*"_reply_q\\*"\s*:\s*\\*"(reply_[\w.\-]{1,250})\\*"', re.ASCII)
_MSG_ID = re.compile(r'\\*"_msg_id\\*"\s*:\s*\\*"([\w\-]{1,64})\\*"', re.ASCII)

#: Request-context keys and the kind of value each must have.
_CONTEXT_TEXT = ("user_id", "project_id", "domain_id", "user_domain_id", "project_domain_id",
                 "request_id", "global_request_id", "user_name", "project_name",
                 "user_domain_name", "project_domain_name", "auth_token", "system_scope",
                 "user", "tenant", "domain", "user_domain", "project_domain",
                 "resource_uuid")
_CONTEXT_FLAGS = ("is_admin", "read_only", "show_deleted", "is_admin_project")
_MAX_ROLES = 100


class Message(dict):
    """A message as the listener takes it (``impl_rabbit.RabbitMessage``'s
    interface), with the error to answer when it was refused."""

    def __init__(self, data: dict, raw, refusal: exception.BerthError | None = None) -> None:
        super().__init__(data)
        self._raw_message = raw
        self.refusal = refusal

    def acknowledge(self) -> None:
        self._raw_message.ack()

    def requeue(self) -> None:
        self._raw_message.requeue()


def read_message(raw, conf: cfg.ConfigOpts = cfg.CONF) -> Message | None:
    """The message a raw broker message carries, or one that carries its
    refusal; None when it is refused and has no reply queue to answer."""
    body = raw.body
    data: Any = None
    try:
        if len(body) > conf.scheduler.max_message_bytes:
            raise exception.InvalidRequest(
                field="message", reason=f"larger than {conf.scheduler.max_message_bytes} "
                                        f"bytes ([scheduler] max_message_bytes)")
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        outer = _json(text, "message")
        if not isinstance(outer, dict) or not isinstance(outer.get("oslo.message"), str):
            raise exception.InvalidRequest(
                field="message", reason="expected an oslo.messaging envelope (an object "
                                        "with oslo.version and oslo.message)")
        data = _json(outer["oslo.message"], "oslo.message")
        if not isinstance(data, dict):
            raise validation.expected("oslo.message", "an object", data)
        _check_envelope_version(outer.get("oslo.version"))
        return Message(data, raw)
    except UnicodeDecodeError:
        error = exception.InvalidRequest(field="message", reason="not UTF-8 text")
    except exception.InvalidRequest as e:
        error = e
    return _refused(raw, error, data if isinstance(data, dict) else None)


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise exception.InvalidRequest(field=field, reason="nested too deep") from None
    except ValueError as e:     # not JSON, or an integer of more than 4,300 digits
        raise exception.InvalidRequest(
            field=field, reason=f"not a JSON document ({str(e)[:120]})") from None


def _check_envelope_version(version: Any) -> None:
    if not (isinstance(version, str) and _VERSION.match(version)
            and messaging_utils.version_is_compatible(ENVELOPE_VERSION, version)):
        raise validation.expected("oslo.version", f"envelope version {ENVELOPE_VERSION}",
                                  version)


def _refused(raw, error: exception.InvalidRequest, data: dict | None) -> Message | None:
    """A message that answers ``error`` to the raw message's reply queue."""
    reply_q, msg_id = _reply_address(raw.body, data)
    LOG.warning("Refused a message%s: %s", f" (reply queue {reply_q})" if reply_q else
                " without a reply queue", error)
    if reply_q is None or msg_id is None:
        raw.ack()
        return None
    return Message({"_reply_q": reply_q, "_msg_id": msg_id}, raw, refusal=error)


def _reply_address(body: bytes | str, data: dict | None) -> tuple[str | None, str | None]:
    if data is not None:
        reply_q, msg_id = data.get("_reply_q"), data.get("_msg_id")
        if isinstance(reply_q, str) and isinstance(msg_id, str):
            return reply_q, msg_id
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    reply_q, msg_id = _REPLY_Q.search(text), _MSG_ID.search(text)
    return (reply_q.group(1) if reply_q else None), (msg_id.group(1) if msg_id else None)


def consumer_callback(consumer, conf: cfg.ConfigOpts = cfg.CONF) -> Callable:
    """The callback of an oslo.messaging rabbit ``Consumer``: its own, reading
    the message with :func:`read_message`, and answering a call its driver
    answers at once (:func:`answer_at_once`) before it reaches the listener."""
    def on_message(raw) -> None:
        to_python = getattr(consumer.queue.channel, "message_to_python", None)
        if to_python:
            raw = to_python(raw)
        try:
            message = read_message(raw, conf)
            if message is not None and not answer_at_once(consumer.callback, message):
                consumer.callback(message)
        except Exception:
            LOG.exception("Failed to take a message; dropping it")
            raw.reject()
    return on_message


def answer_at_once(listener, message: Message) -> bool:
    """Answer a plain call of a method the listener's driver answers at once
    (``at_once``: method -> callable returning the reply, e.g. ``ping``) here,
    in the thread that reads the broker, ahead of every queued request; False
    for any other message (the listener takes it)."""
    from oslo_messaging._drivers import amqp as rpc_amqp
    from oslo_messaging._drivers import common as rpc_common

    from scheduler.manager import RPC_API_VERSION

    driver = getattr(listener, "driver", None)
    method = message.get("method")
    answer = getattr(driver, "at_once", {}).get(method) if isinstance(method, str) else None
    if answer is None or message.refusal is not None or message.get("args") \
            or message.get("namespace") is not None:
        return False
    reply_q, msg_id = message.get("_reply_q"), message.get("_msg_id")
    if not (isinstance(reply_q, str) and isinstance(msg_id, str)):
        return False
    ctxt = {k[9:]: v for k, v in message.items()
            if isinstance(k, str) and k.startswith("_context_")}
    ctxt["client_timeout"] = message.get("_timeout")
    try:
        check_call(message, ctxt)
        if not messaging_utils.version_is_compatible(RPC_API_VERSION,
                                                     message.get("version", "1.0")):
            return False
    except exception.InvalidRequest:
        return False        # the dispatcher says why
    message.acknowledge()
    reply = {"result": answer(), "failure": None, "ending": True, "_msg_id": msg_id}
    rpc_amqp._add_unique_id(reply)
    with driver._get_connection(rpc_common.PURPOSE_SEND) as conn:
        conn.direct_send(reply_q, rpc_common.serialize_msg(reply))
    return True


# -- the dispatcher ------------------------------------------------------------------------

def check_call(message: dict, ctxt: dict) -> None:
    """Refuse a call whose method, arguments, version, namespace, client
    timeout or context is not of the kind oslo.messaging's clients send."""
    method = message.get("method")
    if not isinstance(method, str) or not _METHOD.match(method):
        raise exception.InvalidRequest(
            field="method", reason=f"unknown method {validation.show(method)}")
    args = message.get("args", {})
    if not isinstance(args, dict) or not all(isinstance(k, str) and k for k in args):
        raise validation.expected("args", "a mapping of argument names to values", args)
    version = message.get("version", "1.0")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise validation.expected("version", "an API version such as '1.2'", version)
    namespace = message.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise validation.expected("namespace", "a string", namespace)
    timeout = ctxt.get("client_timeout")
    if timeout is not None and not (
            isinstance(timeout, int | float) and not isinstance(timeout, bool)
            and math.isfinite(timeout) and timeout > 0):
        raise validation.expected("_timeout", "a number of seconds > 0", timeout)
    check_context(ctxt)


def check_context(ctxt: dict) -> None:
    """The request context's ids are strings (without lone surrogates), its
    flags booleans, its roles a list of strings."""
    for key in _CONTEXT_TEXT:
        value = ctxt.get(key)
        if value is not None and not (isinstance(value, str) and len(value) <= 4096
                                      and not _surrogate(value)):
            raise validation.expected(f"context.{key}", "a string", value)
    for key in _CONTEXT_FLAGS:
        value = ctxt.get(key)
        if value is not None and not isinstance(value, bool):
            raise validation.expected(f"context.{key}", "true or false", value)
    roles = ctxt.get("roles")
    if roles is not None and not (
            isinstance(roles, list) and len(roles) <= _MAX_ROLES
            and all(isinstance(r, str) and len(r) <= 255 and not _surrogate(r)
                    for r in roles)):
        raise validation.expected("context.roles", "a list of role names", roles)


def _surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


class CheckedDispatcher(rpc_dispatcher.RPCDispatcher):
    """oslo.messaging's RPC dispatcher whose every outcome is a value or one of
    Berth's errors, without a traceback (module docstring); each call takes a
    turn of ``admission`` (``scheduler.admission.Admission``) once checked."""

    def __init__(self, endpoints, serializer=None, access_policy=None,
                 admission=None) -> None:
        super().__init__(endpoints, serializer, access_policy)
        self.admission = admission
        # the call-monitor heartbeats of every call, from one thread
        self.monitor = CallMonitor()

    def dispatch(self, incoming):
        refusal = getattr(incoming.message, "refusal", None)
        try:
            if refusal is not None:
                raise refusal
            check_call(incoming.message, incoming.ctxt)
            with self.monitor.watching(incoming):
                if self.admission is None:
                    return super().dispatch(incoming)
                with self.admission.turn(incoming.message["method"], incoming.ctxt):
                    return super().dispatch(incoming)
        except oslo_messaging.ExpectedException:
            raise
        except exception.BerthError as e:
            error: exception.BerthError = e
        except rpc_dispatcher.NoSuchMethod as e:
            error = exception.InvalidRequest(
                field="method", reason=f"unknown method {validation.show(e.method)}")
        except rpc_dispatcher.UnsupportedVersion as e:
            from scheduler.manager import RPC_API_VERSION

            error = exception.InvalidRequest(
                field="version", reason=f"this server serves API {RPC_API_VERSION}; "
                                        f"{validation.show(e.version)} is not compatible")
        except Exception:
            LOG.exception("Unexpected error dispatching %s",
                          validation.show(incoming.message.get("method")))
            error = exception.InternalError(method=str(incoming.message.get("method"))[:64],
                                            request_id=None)
        raise reply(error) from None
