"""JsonFilter: the ``query`` scheduler hint, a small JSON expression over the host.

A query is a list ``[operator, operand, ...]``; an operand is a nested query,
a ``$variable``, or a literal string, number or boolean::

    ["and", [">=", "$free_ram_mb", 1024], ["in", "$hypervisor_type", "QEMU", "KVM"],
            ["not", ["=", "$stats.tier", "bronze"]]]

Operators: ``=``, ``<``, ``>``, ``<=``, ``>=`` (the first operand against each
of the others), ``in`` (the first operand equals one of the others), ``not``
(one operand), ``and``, ``or``. A ``$variable`` names a host value — the
names ComputeCapabilitiesFilter knows (``free_ram_mb``, ``free_disk_mb``,
``vcpus_used``, ``num_instances``, ``hypervisor_type``, ``host_ip``, ``stats``,
``metrics``, ``cpu_info``…) — and walks into dicts with dots
(``$stats.tier``, ``$cpu_info.vendor``; a metric whose name has dots is
looked up whole first: ``$metrics.cpu.percent``). A host lacking a value
makes the comparisons reading it false (in ``and``/``or``/``not`` it counts as
false). Numbers compare with numbers (a numeric string on the host compares
as a number), strings with strings; other pairs are unequal and unordered.
The hint may be the JSON text (as Nova's clients send it) or the list itself;
an empty query passes every host.

The query is parsed and checked once, when the request is validated
(``RequestSpec.from_primitive``): a malformed query is an ``InvalidRequest``
naming the position, and its size is bounded (``MAX_QUERY_CHARS`` of JSON,
``MAX_QUERY_NODES`` operators and operands, ``MAX_QUERY_DEPTH`` levels), so
evaluating it costs at most a few hundred steps. Numeric host values with a
host column (free RAM and disk, vCPUs, usage counts, ratios) are compared over
all hosts at once; the others are gathered once per request and compared host
by host.
"""
from __future__ import annotations

import dataclasses
import json
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from scheduler.exception import InvalidRequest
from scheduler.filters import SKIP, BaseHostFilter
from scheduler.filters.compute_capabilities import HOST_ATTRIBUTES

FIELD = "scheduler_hints.query"
MAX_QUERY_CHARS = 8192
MAX_QUERY_NODES = 256
MAX_QUERY_DEPTH = 16

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "<": operator.lt, ">": operator.gt, "<=": operator.le,
    ">=": operator.ge,
}
_LOGICAL = ("not", "and", "or")
OPERATORS = (*_COMPARISONS, "in", *_LOGICAL)

class _Missing:
    """A ``$variable`` the host lacks."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


@dataclasses.dataclass(frozen=True, slots=True)
class Variable:
    attribute: str
    path: tuple[str, ...]

    def value(self, host) -> Any:
        value = getattr(host, self.attribute, None)
        path = self.path
        if path and isinstance(value, dict):
            whole = ".".join(path)
            if whole in value:               # metric names contain dots
                return value[whole]
        for name in path:
            if not isinstance(value, dict) or name not in value:
                return MISSING
            value = value[name]
        return MISSING if value is None else value


@dataclasses.dataclass(frozen=True, slots=True)
class Expression:
    op: str
    operands: tuple


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """A checked query: the expression and its canonical text."""

    expression: Expression
    text: str


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _invalid(where: str, reason: str) -> InvalidRequest:
    return InvalidRequest(field=FIELD + where, reason=reason)


def parse_query(raw: Any) -> Query | None:
    """Check the ``query`` hint; None for an empty query. Raises InvalidRequest
    naming the position of the first problem."""
    if raw is None or raw == "" or raw == []:
        return None
    if isinstance(raw, str):
        if len(raw) > MAX_QUERY_CHARS:
            raise _invalid("", f"longer than {MAX_QUERY_CHARS} characters")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise _invalid("", f"not valid JSON: {e}") from None
        if data is None or data == []:
            return None
    else:
        data = raw
    counter = [0]
    expression = _expression(data, "", 1, counter)
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    if len(text) > MAX_QUERY_CHARS:
        raise _invalid("", f"longer than {MAX_QUERY_CHARS} characters")
    return Query(expression, text)


def _count(counter: list[int]) -> None:
    counter[0] += 1
    if counter[0] > MAX_QUERY_NODES:
        raise _invalid("", f"more than {MAX_QUERY_NODES} operators and operands")


def _expression(data: Any, where: str, depth: int, counter: list[int]) -> Expression:
    if not isinstance(data, list | tuple):
        raise _invalid(where, f"expected a list [operator, operand, ...], got {_short(data)}")
    if depth > MAX_QUERY_DEPTH:
        raise _invalid(where, f"nested deeper than {MAX_QUERY_DEPTH} levels")
    if not data:
        raise _invalid(where, "empty expression")
    _count(counter)
    op = data[0]
    if not isinstance(op, str) or op not in OPERATORS:
        raise _invalid(f"{where}[0]", f"unknown operator {_short(op)}; expected one of "
                                      f"{', '.join(OPERATORS)}")
    args = data[1:]
    if op == "not" and len(args) != 1:
        raise _invalid(where, f"'not' takes one operand, got {len(args)}")
    if op in ("and", "or") and not args:
        raise _invalid(where, f"{op!r} needs at least one operand")
    if op not in _LOGICAL and len(args) < 2:
        raise _invalid(where, f"{op!r} needs at least two operands, got {len(args)}")
    operands = []
    for i, arg in enumerate(args, start=1):
        at = f"{where}[{i}]"
        if isinstance(arg, list | tuple):
            operands.append(_expression(arg, at, depth + 1, counter))
            continue
        _count(counter)
        operands.append(_operand(arg, at))
    return Expression(op, tuple(operands))


def _operand(arg: Any, where: str) -> Any:
    if isinstance(arg, str):
        if not arg.startswith("$"):
            return arg
        name, *path = arg[1:].split(".")
        attribute = HOST_ATTRIBUTES.get(name)
        if attribute is None:
            raise _invalid(where, f"unknown variable {_short(arg)}; known: "
                                  f"{', '.join('$' + k for k in sorted(HOST_ATTRIBUTES))}")
        if any(not p for p in path):
            raise _invalid(where, f"empty name in variable {arg!r}")
        return Variable(attribute, tuple(path))
    if isinstance(arg, bool):
        return arg
    if isinstance(arg, int):
        if abs(arg) > 2 ** 63 - 1:
            raise _invalid(where, "integers must be within a signed 64-bit integer")
        return arg
    if isinstance(arg, float):
        if not math.isfinite(arg):
            raise _invalid(where, "numbers must be finite")
        return arg
    raise _invalid(where, f"expected a nested query, a $variable, a string, a number or "
                          f"a boolean, got {_short(arg)}")


# -- evaluation -----------------------------------------------------------------------

def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _compare(compare: Callable[[Any, Any], bool], a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return compare is operator.eq and type(a) is type(b) and a == b
    if isinstance(a, int | float) or isinstance(b, int | float):
        x, y = _number(a), _number(b)
        return x is not None and y is not None and compare(x, y)
    if isinstance(a, str) and isinstance(b, str):
        return compare(a, b)
    return compare is operator.eq and a == b


def _truth(value: Any) -> bool:
    return value is not MISSING and bool(value)


def evaluate(expression: Expression, host) -> Any:
    """The query's value on ``host`` (true: the host passes)."""
    op = expression.op
    values = [evaluate(o, host) if isinstance(o, Expression)
              else o.value(host) if isinstance(o, Variable) else o
              for o in expression.operands]
    if op == "and":
        return all(_truth(v) for v in values)
    if op == "or":
        return any(_truth(v) for v in values)
    if op == "not":
        return not _truth(values[0])
    first, rest = values[0], values[1:]
    if op == "in":
        return any(_compare(operator.eq, first, v) for v in rest)
    compare = _COMPARISONS[op]
    return all(_compare(compare, first, v) for v in rest)


# -- the same evaluation over the host columns ----------------------------------------

#: Host values that are always numbers and have a column holding exactly them.
_COLUMNS: dict[str, Callable[[Any], np.ndarray]] = {
    "free_ram_mb": lambda c: c.free_ram,
    "free_disk_mb": lambda c: c.free_disk,
    "vcpus": lambda c: c.vcpus,
    "vcpus_used": lambda c: c.vcpus_used,
    "free_vcpus": lambda c: c.vcpus_usable - c.vcpus_used,
    "memory_mb_used": lambda c: c.memory_used,
    "disk_mb_used": lambda c: c.disk_used,
    "local_gb": lambda c: c.disk_total / 1024,
    "num_instances": lambda c: c.num_instances,
    "num_io_ops": lambda c: c.num_io_ops,
    "failed_builds": lambda c: c.failed_builds,
    "cpu_allocation_ratio": lambda c: c.cpu_ratio,
    "ram_allocation_ratio": lambda c: c.ram_ratio,
    "disk_allocation_ratio": lambda c: c.disk_ratio,
}
_NUMPY_OPS: dict[str, Callable] = {"=": np.equal, "<": np.less, ">": np.greater,
                                   "<=": np.less_equal, ">=": np.greater_equal}

# A value over the rows: ("num", float array), ("obj", object array), ("bool", bool
# array) or ("lit", one Python value for every row).


def _rows(node: Any, cols, gathered: dict) -> tuple[str, Any]:
    if isinstance(node, Expression):
        return "bool", evaluate_rows(node, cols, gathered)
    if isinstance(node, Variable):
        column = _COLUMNS.get(node.attribute)
        if column is not None and not node.path:
            return "num", column(cols)
        values = gathered.get(node)
        if values is None:
            values = gathered[node] = np.empty(cols.n, dtype=object)
            values[:] = [node.value(h) for h in cols.hosts]
        return "obj", values
    return "lit", node


def _objects(kind: str, value: Any, n: int) -> list:
    if kind == "lit":
        return [value] * n
    return value.tolist()


def _compare_rows(op: str, a: tuple[str, Any], b: tuple[str, Any], n: int) -> np.ndarray:
    (ka, va), (kb, vb) = a, b
    if ka == "num" and kb == "num":
        return _NUMPY_OPS[op](va, vb)
    if {ka, kb} == {"num", "lit"}:
        literal = vb if kb == "lit" else va
        number = _number(literal) if not isinstance(literal, bool) else None
        if number is None:
            return np.zeros(n, dtype=bool)
        return _NUMPY_OPS[op](va, number) if kb == "lit" else _NUMPY_OPS[op](number, vb)
    compare = _COMPARISONS[op]
    if "lit" in (ka, kb):
        # Hosts mostly share values (one hypervisor type, a few tiers): compare
        # each distinct value once.
        literal = vb if kb == "lit" else va
        values = _objects(ka, va, n) if kb == "lit" else _objects(kb, vb, n)
        if kb == "lit":
            def one(x):
                return _compare(compare, x, literal)
        else:
            def one(x):
                return _compare(compare, literal, x)
        return _each_distinct(one, values, n)
    return np.fromiter((_compare(compare, x, y) for x, y in
                        zip(_objects(ka, va, n), _objects(kb, vb, n), strict=True)),
                       dtype=bool, count=n)


def _each_distinct(fn: Callable[[Any], bool], values: list, n: int) -> np.ndarray:
    """``fn`` of every value, computed once per distinct hashable value."""
    seen: dict = {}
    out = np.empty(n, dtype=bool)
    for i, x in enumerate(values):
        try:
            r = seen.get((type(x), x))
            if r is None:
                r = seen[(type(x), x)] = fn(x)
        except TypeError:             # unhashable (a dict or a list)
            r = fn(x)
        out[i] = r
    return out


def _truth_rows(value: tuple[str, Any], n: int) -> np.ndarray:
    kind, v = value
    if kind == "bool":
        return v
    if kind == "num":
        return v != 0
    if kind == "lit":
        return np.full(n, _truth(v), dtype=bool)
    return _each_distinct(_truth, v.tolist(), n)


def evaluate_rows(expression: Expression, cols, gathered: dict | None = None) -> np.ndarray:
    """``evaluate`` on every row of ``cols`` at once: true where the host passes.
    Numeric host values come from their columns; others are gathered once."""
    if gathered is None:
        gathered = {}
    n = cols.n
    values = [_rows(o, cols, gathered) for o in expression.operands]
    op = expression.op
    if op in _LOGICAL:
        truths = [_truth_rows(v, n) for v in values]
        if op == "not":
            return ~truths[0]
        return np.logical_and.reduce(truths) if op == "and" else np.logical_or.reduce(truths)
    first, rest = values[0], values[1:]
    if op == "in":
        return np.logical_or.reduce([_compare_rows("=", first, v, n) for v in rest])
    return np.logical_and.reduce([_compare_rows(op, first, v, n) for v in rest])


class JsonFilter(BaseHostFilter):
    """Removes hosts on which the request's ``query`` hint is false: numeric host
    values are compared as columns over all hosts at once, others gathered
    per host. ``host_passes`` is the same rule host by host (the conformance
    check compares both)."""

    # Queries may read usage, which earlier instances of the request change.
    run_filter_once_per_request = False

    def prepare(self, request):
        query = request.spec.scheduler_hints.query
        return SKIP if query is None else query

    def refusals(self, cols, query: Query):
        return [(_reason(query), ~evaluate_rows(query.expression, cols))]

    def host_passes(self, host, query: Query) -> str | None:
        if _truth(evaluate(query.expression, host)):
            return None
        return _reason(query)


def _reason(query: Query) -> str:
    text = query.text if len(query.text) <= 120 else query.text[:117] + "..."
    return f"query {text} is false"
