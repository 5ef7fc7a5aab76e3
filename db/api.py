"""Database access: one ``Database`` per connection URL, sessions via oslo.db.

Every transaction goes through ``oslo_db.sqlalchemy.enginefacade`` so that
connection pooling, MySQL SQL modes and error translation are oslo.db's. Write
paths are wrapped with :func:`retry_on_deadlock` (deadlocks and lost connections
are retried; the wrapped function must be a whole transaction, so a retry never
doubles a claim).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence

from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_db import options as db_options
from oslo_db.sqlalchemy import enginefacade
from sqlalchemy import event as sa_event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

DEFAULT_STATE_PATH = os.path.join(os.path.expanduser("~"), ".local", "share", "berth")

state_opts = [
    cfg.StrOpt("state_path",
               default=DEFAULT_STATE_PATH,
               sample_default="~/.local/share/berth",
               help="Directory where Berth keeps local state: the embedded SQLite "
                    "database by default. Created on first use."),
]

DEFAULT_CONNECTION = "sqlite:///$state_path/berth.sqlite"

cfg.CONF.register_opts(state_opts)

# How long a call may wait for a database that does not answer, so that an
# outage reaches callers as a typed error in bounded time (issue 17).
wait_opts = [
    cfg.IntOpt("connect_timeout", default=3, min=1, max=600,
               help="Seconds to wait for a MySQL/MariaDB connection to be set up "
                    "(PyMySQL's connect_timeout; a server that accepts the TCP "
                    "connection but does not answer, e.g. stopped or overloaded, "
                    "counts as down after this)."),
    cfg.IntOpt("read_timeout", default=30, min=1, max=3600,
               help="Seconds to wait for a MySQL/MariaDB server's answer before the "
                    "connection counts as lost (PyMySQL's read_timeout; also bounds "
                    "the greeting of a server that accepted the TCP connection but "
                    "hangs). Keep it above the slowest legitimate query: the first "
                    "full load of the host cache, about 10 s at 100,000 hosts."),
    cfg.FloatOpt("retry_budget", default=5.0, min=0.0, max=600.0,
                 help="Seconds a write (claim, release, report) keeps retrying "
                      "deadlocks and lost connections before it gives up and the "
                      "caller gets ServiceUnavailable (0: one retry at most)."),
    cfg.IntOpt("wsrep_sync_wait", default=1, min=0, max=15,
               help="Galera (MariaDB Galera Cluster): the session value of "
                    "wsrep_sync_wait on the connections whose reads decide an answer "
                    "(claims, releases, confirms, reschedules and moves, the re-read "
                    "of a host after a claim conflict, the host cache's refresh). 1: "
                    "each of their reads first waits until this node has applied "
                    "every write the cluster committed before it, so a daemon on one "
                    "node sees what a daemon on another node just wrote (a confirm "
                    "finds the claim, a release finds the allocation). 0: off (reads "
                    "may lag behind other nodes). Without Galera the variable is "
                    "ignored (MariaDB with wsrep off) or absent (MySQL: then it is not "
                    "set, with one WARNING)."),
]
cfg.CONF.register_opts(wait_opts, group="database")


def set_defaults(conf: cfg.ConfigOpts = cfg.CONF) -> None:
    """Register oslo.db's [database] options with Berth's embedded default
    (also on the option objects, which is what oslo-config-generator reads)."""
    db_options.set_defaults(conf, connection=DEFAULT_CONNECTION)
    cfg.set_defaults(db_options.database_opts, connection=DEFAULT_CONNECTION)


set_defaults(cfg.CONF)


def list_opts():
    """Options of the ``berth.db`` namespace (oslo-config-generator)."""
    return [("DEFAULT", state_opts), ("database", wait_opts)]


#: Bound parameters per IN list: well under SQLite's and MySQL's limits.
IN_CHUNK = 500


def chunks(values: Sequence, size: int | None = None) -> Iterator[Sequence]:
    """``values`` in slices of at most ``size`` (default ``IN_CHUNK``, read at
    call time) for IN lists."""
    size = size or IN_CHUNK
    for i in range(0, len(values), size):
        yield values[i:i + size]


#: PyMySQL's TLS arguments that SQLAlchemy gathers from a MySQL URL into one
#: ``ssl`` mapping, and the two that PyMySQL takes only as arguments of their own.
_SSL_MAPPED = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_capath", "ssl_cipher",
               "ssl_check_hostname")
_SSL_VERIFY = ("ssl_verify_cert", "ssl_verify_identity")


def check_tls_arguments(url: str) -> None:
    """Refuse a MySQL URL whose TLS arguments would not do what they say:
    ``ssl_verify_cert`` or ``ssl_verify_identity`` next to ``ssl_ca``,
    ``ssl_cert``... make PyMySQL rebuild its TLS settings without what
    SQLAlchemy passed in its ``ssl`` mapping (the CA, the client certificate),
    so the server is checked against the wrong CAs, or not at all. The error
    names ``database.connection`` and never shows the URL (it holds a password).
    """
    from sqlalchemy.engine import make_url

    from db.errors import InvalidRequest

    try:
        query = make_url(url).query
    except sa_exc.ArgumentError:
        return          # not a URL: oslo.db says so
    verify = [k for k in _SSL_VERIFY if k in query]
    mapped = [k for k in _SSL_MAPPED if k in query]
    if verify and mapped:
        raise InvalidRequest(
            field="database.connection",
            reason=f"{verify[0]} cannot be combined with {', '.join(mapped)}: through "
                   f"SQLAlchemy it makes PyMySQL drop {mapped[0]}. ssl_ca alone verifies "
                   "the server's certificate and its host name; add "
                   "ssl_check_hostname=false to verify the certificate only")


def close_quietly(conn: Connection) -> None:
    """Close a connection that may already be gone."""
    try:
        conn.close()
    except Exception:       # the connection may be gone already
        pass


#: MySQL client errors of a connection the server dropped, and the error of a
#: Galera node that left the cluster's primary component (1047: "WSREP has not
#: yet prepared node for application use"): either way the connection is useless.
_LOST_CONNECTION = {2006, 2013, 2055, 1047}


class _LostConnectionReset(logging.Filter):
    """The pool rolls a connection back when it is returned; when the database
    stopped meanwhile that rollback fails and SQLAlchemy logs an ERROR with a
    traceback, though the connection is simply thrown away. In an outage that
    is expected: one WARNING line instead (the outage itself is said by the
    scheduler). Any other reset failure stays an ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno >= logging.ERROR and exc is not None and \
                str(record.msg).startswith("Exception during reset") and \
                getattr(exc, "args", (None,))[0] in _LOST_CONNECTION:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "Could not roll back a pooled connection the database dropped " \
                         "(%s); it is discarded"
            record.args = (exc,)
            record.exc_info = record.exc_text = None
        return True


for _name in ("sqlalchemy.pool.impl.QueuePool", "sqlalchemy.pool.base"):
    logging.getLogger(_name).addFilter(_LostConnectionReset())


def _drop_quietly(conn: Connection) -> None:
    """Throw a connection away without talking to the server."""
    try:
        conn.invalidate()
        conn.close()
    except Exception:
        pass


#: Tries of a retried operation at most, and the sleeps between them (doubling).
#: A cap on the tries; ``[database] retry_budget`` is the bound that usually
#: ends them (with the default 5 s, after the 8th). Galera's certification
#: failures on a few hot inventory rows can take more than six tries to get
#: through under load (seen in tests/chaos/test_galera.py at load 15).
MAX_TRIES = 12
FIRST_SLEEP, MAX_SLEEP = 0.05, 1.0

#: Called with the operation's name whenever a retried operation meets a
#: deadlock or a lost connection (the scheduler counts them in its metrics).
retry_listeners: list = []


#: Galera's answer when the node has left the cluster's primary component
#: (partitioned, or frozen long enough to be evicted): nothing was written,
#: and another node (or this one, once it rejoins) takes the same statement.
_NOT_PRIMARY = (1180, "Primary Component")


@sa_event.listens_for(Engine, "handle_error")
def _galera_not_primary(ctx) -> None:
    """A write refused by a Galera node without quorum is a lost connection for
    the retries and the callers (oslo.db already counts error 1047, a node not
    ready for statements, as one), not an unexpected error: it runs before
    oslo.db's own handler (class-level listeners first), which then raises
    DBConnectionError for it."""
    args = getattr(ctx.original_exception, "args", ())
    if len(args) >= 2 and args[0] == _NOT_PRIMARY[0] and _NOT_PRIMARY[1] in str(args[1]):
        ctx.is_disconnect = True


def retry_on_deadlock(fn):
    """Run ``fn`` (a whole transaction) again on deadlocks and lost connections,
    up to MAX_TRIES times and no longer than ``[database] retry_budget``
    seconds (then the last error is raised)."""
    @functools.wraps(fn)
    def attempt(*args, **kwargs):
        started = time.monotonic()
        sleep = FIRST_SLEEP
        for tries in range(1, MAX_TRIES + 1):
            try:
                return fn(*args, **kwargs)
            except (db_exc.DBDeadlock, db_exc.DBConnectionError):
                for listener in retry_listeners:
                    listener(fn.__name__)
                spent = time.monotonic() - started
                if tries == MAX_TRIES or (tries > 1 and
                                          spent + sleep > cfg.CONF.database.retry_budget):
                    raise
            time.sleep(sleep)
            sleep = min(sleep * 2, MAX_SLEEP)
    return attempt


def _with_multi_statements(url: str) -> str:
    """A MySQL URL whose connections take several statements in one string
    (PyMySQL's ``client_flag``, added to any flag the URL names)."""
    from pymysql.constants import CLIENT
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    flags = int(parsed.query.get("client_flag", 0)) | CLIENT.MULTI_STATEMENTS
    return parsed.update_query_dict({"client_flag": str(flags)}).render_as_string(
        hide_password=False)


class _Ctx:
    """A throwaway holder enginefacade attaches its per-transaction state to."""



def _unknown_variable(error: Exception) -> bool:
    """Whether a refused ``SET SESSION wsrep_sync_wait`` means the server
    has no such setting (MySQL: 1193; 1231: a value it does not take), not
    that it cannot take it now."""
    orig = getattr(error, "orig", None) or getattr(error, "inner_exception", None)
    orig = getattr(orig, "orig", orig)
    args = getattr(orig, "args", ())
    return bool(args) and args[0] in (1193, 1231)

class Database:
    """Sessions and connections for one database URL.

    ``with db.writer() as session:`` is one transaction that commits on exit
    and rolls back on error; ``db.reader()`` is the read-only counterpart.
    ``db.writer_connection()`` / ``db.reader_connection()`` give Core connections
    for the hot paths (bulk loads, compare-and-swap updates).
    """

    #: Kept-open claim connections left idle at most (more are opened while
    #: more claims run at once, and closed when they finish). A worker under
    #: load runs a dozen or more claims, releases and confirms at once; fewer
    #: kept meant a new connection (TCP, authentication, PyMySQL's TLS context)
    #: for most of them, about a tenth of the worker's CPU at 16 clients.
    KEPT_IDLE = 16

    def __init__(self, connection: str, **engine_kw) -> None:
        self.url = connection
        self._kept: collections.deque = collections.deque()
        self._recycle = float(engine_kw.get("connection_recycle_time") or 3600)
        if connection.startswith("sqlite:///") and not connection.startswith("sqlite:////:"):
            path = connection[len("sqlite:///"):]
            if path and path != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._tc = enginefacade.transaction_context()
        self._kept_engine: Engine | None = None
        if connection.startswith("mysql"):
            check_tls_arguments(connection)
            for name in ("connect_timeout", "read_timeout"):
                if f"{name}=" not in connection:
                    connection += ("&" if "?" in connection else "?") + \
                        f"{name}={getattr(cfg.CONF.database, name)}"
        self.connect_url = connection       # with the timeouts (MySQL)
        # Galera's read-your-writes rule for the connections whose reads decide
        # answers (``causal_connect``); nothing to set on SQLite.
        self.sync_wait = cfg.CONF.database.wsrep_sync_wait \
            if connection.startswith("mysql") else 0
        kw = {"connection": connection, "sqlite_fk": True}
        kw.update(engine_kw)
        self._tc.configure(**kw)
        # The kept connections (``hot_writer``) of MySQL come from an engine of
        # their own whose connections take several statements in one string
        # (``kept_engine``): a claim sends its writes in one round trip. No
        # other connection takes them.
        self._kept_tc = None
        if connection.startswith("mysql"):
            self._kept_tc = enginefacade.transaction_context()
            self._kept_tc.configure(**dict(kw, connection=_with_multi_statements(connection)))
        # SQLite has one writer at a time and its busy wait blocks the whole
        # process: green threads of one process would wait on each other until
        # "database is locked". Writers of one process take turns here instead.
        self._write_lock = threading.Lock() if connection.startswith("sqlite") else None
        if self._write_lock is not None and ":memory:" not in connection:
            # Write-ahead logging: one sync per commit instead of a journal file
            # created, synced and deleted (about 0.25 vs 1 ms here), and readers
            # no longer wait for writers. The mode is stored in the file.
            raw = self.engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                raw.close()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts = cfg.CONF) -> Database:
        d = conf.database
        kw = {}
        if not d.connection.startswith("sqlite"):
            kw = {"max_pool_size": d.max_pool_size, "max_overflow": d.max_overflow,
                  "pool_timeout": d.pool_timeout,
                  "connection_recycle_time": d.connection_recycle_time,
                  "max_retries": d.max_retries, "retry_interval": d.retry_interval}
        return cls(d.connection, **kw)

    @contextlib.contextmanager
    def _serialised(self) -> Iterator[None]:
        if self._write_lock is None:
            yield
            return
        with self._write_lock:
            yield

    @contextlib.contextmanager
    def writer(self) -> Iterator[Session]:
        with self._serialised(), self._tc.writer.using(_Ctx()) as session:
            yield session

    @contextlib.contextmanager
    def reader(self) -> Iterator[Session]:
        with self._tc.reader.using(_Ctx()) as session:
            yield session

    @contextlib.contextmanager
    def writer_connection(self) -> Iterator[Connection]:
        with self._serialised(), self._tc.writer.connection.using(_Ctx()) as conn:
            yield conn

    @contextlib.contextmanager
    def hot_writer(self) -> Iterator[Connection]:
        """One short write transaction on a kept-open connection (claims).

        A pooled checkout costs two extra round trips per claim (oslo.db's
        ping on checkout and the pool's rollback on return), as much as the
        claim's own UPDATE and INSERT. Claim connections are therefore kept
        open between transactions: up to ``KEPT_IDLE`` idle, one per claim
        running at once, each replaced after ``connection_recycle_time``. A
        connection that failed at the database layer is closed, never reused;
        the caller's ``retry_on_deadlock`` then runs the whole transaction
        again on a fresh one.
        """
        with self._serialised():
            conn = self._take_kept()
            try:
                with conn.begin():
                    yield conn
            except (sa_exc.SQLAlchemyError, db_exc.DBError) as e:
                lost = isinstance(e, db_exc.DBConnectionError) or \
                    getattr(e, "connection_invalidated", False)
                (_drop_quietly if lost else close_quietly)(conn)
                if lost:
                    # the server went away or restarted: the idle ones are
                    # as dead (a retry must not go through each of them).
                    # Invalidated, not closed: closing rolls back first, which
                    # on a dead connection the pool logs as an ERROR.
                    while self._kept:
                        _drop_quietly(self._kept.pop())
                raise
            except BaseException:
                if conn.invalidated or conn.closed:
                    close_quietly(conn)
                else:
                    self._give_back(conn)
                raise
            self._give_back(conn)

    @contextlib.contextmanager
    def causal_reader(self) -> Iterator[Connection]:
        """One read transaction that sees every write committed before it,
        wherever it was committed: on Galera, a kept connection with
        ``wsrep_sync_wait`` (``[database] wsrep_sync_wait``); elsewhere any
        read is already that. For the reads that decide an answer after another
        daemon's write (is this instance placed? was it released? which move
        did it make?)."""
        if self._write_lock is not None:        # SQLite: one file, one truth
            with self.reader_connection() as conn:
                yield conn
            return
        with self.hot_writer() as conn:
            yield conn

    def causal_connect(self, engine: Engine | None = None) -> Connection:
        """A new connection of the engine (or of ``engine``) whose reads wait
        for the cluster's earlier writes (Galera: ``SET SESSION
        wsrep_sync_wait``, once for the connection's life). On a server
        without the variable (MySQL) it is not set again for this Database,
        with one WARNING."""
        conn = (engine or self.engine).connect()
        if self.sync_wait:
            try:
                conn.exec_driver_sql(f"SET SESSION wsrep_sync_wait = {int(self.sync_wait)}")
                conn.commit()
            except (sa_exc.DBAPIError, db_exc.DBError) as e:
                if isinstance(e, db_exc.DBConnectionError) or \
                        getattr(e, "connection_invalidated", False) or \
                        not _unknown_variable(e):
                    # lost, or refused for now (a Galera node not ready:
                    # 1047): this connection fails; the next one sets it
                    close_quietly(conn)
                    raise
                conn.rollback()
                self.sync_wait = 0
                logging.getLogger(__name__).warning(
                    "The database has no wsrep_sync_wait (%s): not a Galera node; "
                    "[database] wsrep_sync_wait is ignored", str(e).splitlines()[0][:200])
        return conn

    def _take_kept(self) -> Connection:
        now = time.monotonic()
        while True:
            try:
                conn = self._kept.pop()
            except IndexError:
                break
            if now - conn.info.get("berth_born", now) < self._recycle \
                    and not (conn.closed or conn.invalidated):
                return conn
            close_quietly(conn)
        conn = self.causal_connect(self.kept_engine)
        conn.info["berth_born"] = now
        return conn

    def _give_back(self, conn: Connection) -> None:
        if len(self._kept) < self.KEPT_IDLE:
            self._kept.append(conn)
        else:
            close_quietly(conn)

    @contextlib.contextmanager
    def reader_connection(self) -> Iterator[Connection]:
        with self._tc.reader.connection.using(_Ctx()) as conn:
            yield conn

    @property
    def engine(self) -> Engine:
        return self._tc.writer.get_engine()

    @property
    def kept_engine(self) -> Engine:
        """The engine of the kept connections (``hot_writer``); on MySQL its
        own, whose connections take batches (``db.precompiled``)."""
        if self._kept_tc is None:
            return self.engine
        if self._kept_engine is None:
            from db import precompiled

            engine = self._kept_tc.writer.get_engine()
            precompiled.accept_batches(engine)
            self._kept_engine = engine
        return self._kept_engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def dispose(self) -> None:
        while self._kept:
            close_quietly(self._kept.pop())
        self._tc.dispose_pool()
        if self._kept_tc is not None:
            self._kept_tc.dispose_pool()
