"""Fixed Core statements of the hot write paths, run as their dialect's SQL.

``Connection.execute`` of a Core statement does, on every call, what only
depends on the statement and the dialect: the statement's cache key, the
compiled-cache lookup, the execution context of a compiled statement and the
parameters' processing by name. For the few statements every claim runs, a
``Precompiled`` does that once per dialect (the engine's, so its server's
settings are in the string) and hands the string and the values in the
order the string takes them to ``Connection.exec_driver_sql``. That keeps the
engine's events: oslo.db's error translation (``handle_error``: duplicate
entries, deadlocks, lost connections) and the cursor events see the same
statement as before.

The values are given as a tuple in the order of ``names``; each goes through
its column's or bound parameter's type processing, as ``execute`` does it
(dates as SQLite stores them, booleans checked); a value its type refuses is
handed to ``execute``, which refuses it as it always did. A statement that
needs more than its SQL string and values (Python-side column defaults,
parameters computed or rendered at execution, expanding IN lists, result
columns converted as they are read) is refused when it is compiled.

``execute_batch`` sends several of them as one string, in one round trip, on
a connection of an engine that takes several statements at once (MySQL's
multi statements: ``accept_batches``).
"""
from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, CursorResult, Dialect, Engine
from sqlalchemy.sql import ClauseElement


class _Form:
    """A statement as one dialect runs it: its SQL string and how to turn the
    caller's values into that string's parameters."""

    def __init__(self, statement: ClauseElement, names: tuple[str, ...], many: bool,
                 dialect: Dialect) -> None:
        if len(set(names)) != len(names):
            raise ValueError(f"{statement}: a name given twice in {names}")
        converted = [c.name for c in statement.exported_columns
                     if c.type.dialect_impl(dialect).result_processor(dialect, None)]
        if converted:
            raise ValueError(f"{statement}: {converted} are converted as they are read; "
                             f"driver SQL would return them raw")
        compiled = statement.compile(dialect=dialect, column_keys=sorted(names),
                                     for_executemany=many)
        if compiled.insert_prefetch or compiled.update_prefetch:
            raise ValueError(f"{statement}: columns with Python-side defaults are left "
                             f"to execute(); give them values")
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError(f"{statement}: parameters rendered at execution")
        if getattr(compiled, "escaped_bind_names", None):
            # a name the string spells otherwise ("a.b" as a_b): the values
            # would be handed over under the wrong key
            raise ValueError(f"{statement}: parameter names the dialect escapes: "
                             f"{sorted(compiled.escaped_bind_names)}")
        # the parameters as named in the string (a bind's key may be anonymous)
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        unknown = set(names) - set(binds)
        missing = {name for name, bind in binds.items()
                   if name not in names and (bind.required or bind.callable is not None)}
        if unknown or missing:
            raise ValueError(f"{statement}: names {sorted(unknown)} not in it, "
                             f"{sorted(missing)} not given")
        self.sql = compiled.string

        def processor(name: str) -> Callable | None:
            type_ = binds[name].type
            return type_.dialect_impl(dialect).bind_processor(dialect)

        self._processors = tuple((i, proc) for i, name in enumerate(names)
                                 if (proc := processor(name)) is not None)
        constants = {}
        for name, bind in binds.items():
            if name not in names:
                proc = processor(name)
                value = bind.effective_value
                constants[name] = value if proc is None else proc(value)
        if dialect.positional:
            # the caller's values, then the constants: each position of the
            # string picks its value by index (a name may take several)
            index = {name: i for i, name in enumerate(names)}
            index.update({name: len(names) + i for i, name in enumerate(constants)})
            order = [index[name] for name in compiled.positiontup]
            self._constants: Any = tuple(constants.values())
            if len(order) == 1:
                only = order[0]
                self._arrange = lambda values: (values[only],)
            else:
                self._arrange = operator.itemgetter(*order)
        else:
            self._constants = constants
            self._arrange = None
        self._names = names

    def parameters(self, values: Sequence) -> tuple | dict:
        """The string's parameters for ``values`` (in the order of the names)."""
        if len(values) != len(self._names):
            raise ValueError(f"{len(self._names)} values expected, got {len(values)}")
        if self._processors:
            values = list(values)
            for i, proc in self._processors:
                values[i] = proc(values[i])
        if self._arrange is not None:
            return self._arrange(tuple(values) + self._constants)
        params = dict(zip(self._names, values, strict=True))
        if self._constants:
            params.update(self._constants)
        return params


class Precompiled:
    """A Core statement compiled once per dialect, executed with values given
    in the order of ``names`` (its bound parameters, or for an INSERT the
    columns it writes). ``many``: it is executed with many rows at once."""

    def __init__(self, statement: ClauseElement, names: Iterable[str],
                 many: bool = False) -> None:
        self.statement = statement
        self.names = tuple(names)
        self.many = many
        self._forms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._last: tuple[Dialect | None, _Form | None] = (None, None)

    def _form(self, dialect: Dialect) -> _Form:
        last_dialect, form = self._last
        if last_dialect is dialect:
            return form
        form = self._forms.get(dialect)
        if form is None:
            form = self._forms[dialect] = _Form(self.statement, self.names, self.many,
                                                dialect)
        self._last = (dialect, form)
        return form

    def sql(self, dialect: Dialect) -> str:
        """The statement as ``dialect`` runs it."""
        return self._form(dialect).sql

    def parameters(self, dialect: Dialect, values: Sequence) -> tuple | dict:
        """The parameters of ``sql(dialect)`` for ``values`` (a value its
        type refuses raises here)."""
        return self._form(dialect).parameters(values)

    def execute(self, conn: Connection, values: Sequence) -> CursorResult:
        """Run it once with ``values`` (in the order of ``names``)."""
        form = self._form(conn.dialect)
        try:
            params = form.parameters(values)
        except Exception:
            # a value its type refuses: ``execute`` refuses it as it always did
            return conn.execute(self.statement, dict(zip(self.names, values, strict=True)))
        return conn.exec_driver_sql(form.sql, params)

    def executemany(self, conn: Connection, rows: Sequence[Sequence]) -> CursorResult:
        """Run it with each of ``rows`` (at least one), as one executemany."""
        form = self._form(conn.dialect)
        try:
            params = [form.parameters(row) for row in rows]
        except Exception:
            return conn.execute(self.statement, [dict(zip(self.names, row, strict=True))
                                                for row in rows])
        return conn.exec_driver_sql(form.sql, params)


#: The execution option that makes a statement string a batch: the list its
#: statements' row counts are appended to, one by one as they are read.
_BATCH_COUNTS = "berth_batch_counts"


def _read_every_result(cursor, statement, context) -> bool:
    """Execute a batch and read all its results before SQLAlchemy looks at
    the cursor: an error of any statement is raised here, inside the
    execution, where SQLAlchemy and oslo.db translate it and drop a lost
    connection, and nothing is left unread on the connection (the server
    stops a batch at its first error: no result follows it)."""
    counts = context.execution_options.get(_BATCH_COUNTS)
    if counts is None:
        return False
    cursor.execute(statement)
    counts.append(cursor.rowcount)
    while cursor.nextset():
        counts.append(cursor.rowcount)
    return True


#: The engines whose connections take batches (``accept_batches``).
_BATCH_ENGINES: weakref.WeakSet = weakref.WeakSet()


def accept_batches(engine: Engine) -> None:
    """Let ``execute_batch`` run on ``engine``'s connections (which must take
    several statements in one string: PyMySQL's ``CLIENT.MULTI_STATEMENTS``)."""
    sa_event.listen(engine, "do_execute_no_params", _read_every_result)
    _BATCH_ENGINES.add(engine)


def takes_batches(conn: Connection) -> bool:
    """Whether ``execute_batch`` can run on ``conn``."""
    return conn.engine in _BATCH_ENGINES


def execute_batch(conn: Connection, parts: Sequence[tuple[Precompiled, Sequence]],
                  counts: list[int]) -> None:
    """Run each (statement, values) of ``parts`` in order, sent as one string
    in one round trip (``conn``'s engine ``accept_batches``); ``counts`` gets
    each statement's row count (matched rows), and when one fails the counts
    of those before it.

    Each statement's values are bound into it by the driver (PyMySQL's
    ``mogrify``: what its ``execute`` does to every statement, the server
    taking no parameters apart), then the bound statements are joined: the
    batch is sent without parameters. A value its type refuses raises before
    anything is sent."""
    dialect = conn.dialect
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        sql = ";\n".join(cursor.mogrify(statement.sql(dialect),
                                         statement.parameters(dialect, values))
                          for statement, values in parts)
    finally:
        cursor.close()
    conn.exec_driver_sql(sql, execution_options={"no_parameters": True,
                                                 _BATCH_COUNTS: counts})
    if len(counts) != len(parts):
        # the results were not read (the engine does not ``accept_batches``):
        # the caller would decide on counts it does not have
        raise RuntimeError(f"a batch of {len(parts)} statements read {len(counts)} "
                           f"results: its engine does not take batches")
