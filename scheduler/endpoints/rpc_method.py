"""The wrapper every RPC method of the scheduler runs in (``@rpc_method``).

Berth's own errors (``InvalidRequest``, ``NoValidHost``, ``NotFound``,
``Conflict`` ...) are expected outcomes: oslo.messaging sends them to the caller
as the same types and logs them at DEBUG, not as server tracebacks. A database
that does not answer is one of them (``ServiceUnavailable``, logged once per
outage), and so are lock conflicts that outlast ``[database] retry_budget``
(``ServiceUnavailable``, a WARNING without traceback). Anything else is a
fault: logged with its traceback, answered with an ``InternalError`` that
names the request id and nothing else.
"""
from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import oslo_messaging
import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_log import log as logging
from oslo_serialization import jsonutils

from scheduler import exception, metrics
from scheduler.rpc import ALLOWED_REMOTE_EXMODS

LOG = logging.getLogger(__name__)

#: Methods whose policy target is not the caller's project: they authorize
#: themselves (``scheduler.endpoints.scoping``: select_destinations against the
#: request's project, release and reschedule against the instance's).
AUTHORIZED_INSIDE = frozenset({"select_destinations", "release", "reschedule"})


def wire_error(error: exception.BerthError) -> exception.BerthError:
    """The same error as a type of a module the client may rebuild
    (``scheduler.rpc.ALLOWED_REMOTE_EXMODS``; e.g. ``fleet.InvalidFleet`` travels
    as InvalidRequest)."""
    for cls in type(error).__mro__:
        if cls.__module__ in ALLOWED_REMOTE_EXMODS:
            if cls is type(error):
                return error
            return cls(error.message, **error.kwargs)
    return exception.BerthError(error.message)


def reply(error: exception.BerthError) -> oslo_messaging.ExpectedException:
    """``error`` as an expected exception without its traceback (nor the
    exceptions it was raised from or during): oslo.messaging sends the
    formatted traceback of what it is given, and the caller must not see the
    server's files and lines."""
    error = error.with_traceback(None)
    # oslo.messaging formats the chain too: an error raised while handling
    # another (the retry path's) would carry that one's traceback
    error.__cause__ = error.__context__ = None
    error.__suppress_context__ = True
    wrapped = oslo_messaging.ExpectedException()
    wrapped.exc_info = (type(error), error, None)
    return wrapped


def primitive(value: Any) -> Any:
    """Plain JSON values for a reply (datetimes become ISO strings)."""
    return jsonutils.to_primitive(value, convert_instances=True, convert_datetime=True)


def _unreachable(error: Exception) -> bool:
    """Whether a database error means "the database does not answer" (an
    expected condition) rather than a fault of the statement."""
    if isinstance(error, db_exc.DBConnectionError):
        return True
    text = str(error)
    return "database is locked" in text or "Lost connection" in text \
        or "server has gone away" in text


class Outage:
    """One WARNING when the database stops answering, one INFO when it is back;
    in between, each refused call logs at DEBUG only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.last_failed = 0.0
        self.refused = 0

    def failed(self, error: Exception) -> None:
        with self._lock:
            self.refused += 1
            self.last_failed = time.monotonic()
            first = self.since is None
            if first:
                self.since = self.last_failed
        if first:
            LOG.warning("Database unavailable (%s): calls fail with ServiceUnavailable "
                        "until it answers again", type(error).__name__)
        else:
            LOG.debug("Database still unavailable: %s", error)

    def answered(self, started: float) -> None:
        """A call that started at ``started`` (``time.monotonic``) succeeded. One
        that started before the last refused call proves nothing (it may have
        done its database work before the outage began)."""
        if self.since is None or started <= self.last_failed:
            return
        with self._lock:
            since, refused = self.since, self.refused
            self.since, self.refused = None, 0
        if since is not None:
            LOG.info("Database answers again after %.1f s (%d calls refused meanwhile)",
                     time.monotonic() - since, refused)


#: The database outage of this worker, as its calls see it.
OUTAGE = Outage()


def _internal(name: str, ctxt) -> exception.BerthError:
    """Log the exception being handled; the InternalError the caller gets."""
    request_id = getattr(ctxt, "request_id", None)
    LOG.exception("Unexpected error in %s (request %s)", name, request_id)
    return exception.InternalError(method=name, request_id=request_id)


def rpc_method(method: Callable) -> Callable:
    """Make ``method`` (of an endpoint with a ``policy``) an RPC method: its
    arguments bound first (a missing or unknown one is InvalidRequest), the
    caller authorized for it (``berth:<method>``, but see AUTHORIZED_INSIDE),
    its errors answered as described in this module, every call counted by
    result and timed (``scheduler.metrics``). Marks it ``rpc_method`` for
    ``scheduler.endpoints.topics``."""
    name = method.__name__
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, ctxt, *args, **kwargs):
        started = time.perf_counter()
        began = time.monotonic()
        try:
            signature.bind(self, ctxt, *args, **kwargs)
        except TypeError as e:      # a missing or unknown argument is the caller's error
            error = exception.InvalidRequest(field="arguments", reason=str(e))
            metrics.count_request(name, error, time.perf_counter() - started)
            raise reply(error) from None
        error: BaseException | None = None
        try:
            if name not in AUTHORIZED_INSIDE:
                self.policy.authorize(ctxt, name)
            result = method(self, ctxt, *args, **kwargs)
        except exception.BerthError as e:
            error = wire_error(e)
        except (db_exc.DBError, sa.exc.SQLAlchemyError) as e:
            if _unreachable(e):
                OUTAGE.failed(e)
                error = exception.ServiceUnavailable(reason="the database does not answer")
            elif isinstance(e, db_exc.DBDeadlock):
                # lock conflicts (Galera certification, lock wait timeouts)
                # that outlasted [database] retry_budget: rolled back, nothing
                # done; the database answers, it is busy
                LOG.warning("%s gave up after lock conflicts outlasted [database] "
                            "retry_budget (request %s): %s", name,
                            getattr(ctxt, "request_id", None), str(e).splitlines()[0][:200])
                error = exception.ServiceUnavailable(
                    reason="the database is busy with conflicting writes; nothing was "
                           "done, send the call again")
            else:
                error = _internal(name, ctxt)
        except Exception:
            error = _internal(name, ctxt)
        except BaseException as e:  # the call killed (eventlet Timeout, GreenletExit)
            metrics.count_request(name, e, time.perf_counter() - started)
            raise
        else:
            metrics.count_request(name, None, time.perf_counter() - started)
        if error is not None:
            metrics.count_request(name, error, time.perf_counter() - started)
            raise reply(error) from None
        OUTAGE.answered(began)
        return result

    wrapper.rpc_method = True
    return wrapper
