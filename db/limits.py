"""The ranges every value written to the database is held to
(doc/source/admin/security.rst), whichever way it comes in: a fleet file, a
host report, an aggregate RPC.

One module so that the three ways in cannot drift apart. The limits are chosen so
that no sum or product the scheduler computes from stored values can leave the
database's BIGINT range or a finite float:

- capacities (MB, GB): integers 0 .. ``MAX_CAPACITY`` (2**40), so
  ``local_gb * 1024 * ratio`` stays below 2**63; a host's vCPUs at most ``MAX_VCPUS``
  (2**20), so its usage at the largest ratio fits the INTEGER ``vcpus_used`` column;
  reserved amounts at most ``MAX_INT32`` (their columns are INTEGER);
- allocation ratios: finite floats in (0, ``MAX_RATIO``] (1000);
- other integers (versions, counters): 0 .. ``MAX_BIGINT`` (2**63 - 1);
- metrics and weight multipliers: finite floats with ``|x| <= MAX_FLOAT`` (1e15);
- names (hosts, nodes, aggregates, zones, metadata keys and values): non-blank
  strings of at most 255 characters without control characters (C0, DEL, C1),
  line or paragraph separators (U+2028, U+2029), bidirectional formatting
  characters (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) or lone
  surrogates, so a name can never forge a log line, a terminal escape or a line
  that reads differently from what it holds.

``escape_controls`` makes any other text (a log message, a value printed by a CLI)
safe the same way: each such character becomes a ``\\xNN`` or ``\\uNNNN`` escape.

The checks raise ``LimitError(expected)``; each caller turns it into its own typed
error naming the field (``InvalidRequest``, ``InvalidFleet``).
"""
from __future__ import annotations

import math
import re
from typing import Any

MAX_CAPACITY = 2 ** 40
MAX_VCPUS = 2 ** 20
MAX_INT32 = 2 ** 31 - 1
MAX_RATIO = 1000.0
MAX_BIGINT = 2 ** 63 - 1
MAX_FLOAT = 1e15
MAX_NAME = 255

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e"
                      "\u2066-\u2069\ud800-\udfff]")


class LimitError(ValueError):
    """A value outside its documented range; ``expected`` says what was expected."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(value: Any, minimum: int = 0, maximum: int = MAX_BIGINT) -> int:
    if not is_int(value) or not minimum <= value <= maximum:
        raise LimitError(f"an integer between {minimum} and {maximum}")
    return value


def check_capacity(value: Any, minimum: int = 0) -> int:
    """vCPUs, MB, GB: an integer in [minimum, MAX_CAPACITY]."""
    return check_int(value, minimum, MAX_CAPACITY)


def check_ratio(value: Any) -> float:
    """An allocation ratio: a finite number in (0, MAX_RATIO]."""
    if (is_int(value) or isinstance(value, float)) and math.isfinite(value) \
            and 0 < value <= MAX_RATIO:
        return float(value)
    raise LimitError(f"a number > 0 and <= {MAX_RATIO:g}")


def check_float(value: Any, bound: float = MAX_FLOAT) -> float:
    """A finite number with ``|value| <= bound``."""
    if (is_int(value) or isinstance(value, float)) and math.isfinite(value) \
            and abs(value) <= bound:
        return float(value)
    raise LimitError(f"a finite number between {-bound:g} and {bound:g}")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control, separator, bidi or surrogate character."""
    return _CONTROL.search(text) is not None


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xff else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with each character ``has_control`` refuses written as an escape."""
    return _CONTROL.sub(_escape, text)


def check_name(value: Any, max_len: int = MAX_NAME) -> str:
    """A host, node, aggregate or zone name, or a metadata key."""
    if not isinstance(value, str) or not value.strip() or len(value) > max_len \
            or has_control(value):
        raise LimitError(f"a non-empty string of at most {max_len} characters without "
                         f"control, line-separator or bidi characters")
    return value


def check_text(value: Any, max_len: int = MAX_NAME) -> str:
    """A free-text value stored as given (metadata values, reasons): may be empty."""
    if not isinstance(value, str) or len(value) > max_len or has_control(value):
        raise LimitError(f"a string of at most {max_len} characters without control, "
                         f"line-separator or bidi characters")
    return value


# -- aggregate metadata read as numbers ----------------------------------------------

_INT_METADATA = frozenset({"max_io_ops_per_host", "max_instances_per_host"})
_RATIO_METADATA = frozenset({"cpu_allocation_ratio", "ram_allocation_ratio",
                             "disk_allocation_ratio"})
_MULTIPLIER_SUFFIX = "_weight_multiplier"


def numeric_metadata_kind(key: str) -> str | None:
    """'ratio', 'int' or 'multiplier' for the metadata keys the scheduler reads as
    numbers, else None."""
    if key in _RATIO_METADATA:
        return "ratio"
    if key in _INT_METADATA:
        return "int"
    if key.endswith(_MULTIPLIER_SUFFIX):
        return "multiplier"
    return None


def check_metadata_value(key: str, value: str) -> str:
    """A metadata value (already a string); keys read as numbers must hold one in
    range, so no aggregate can feed inf, nan or 1e999 to a filter or weigher."""
    check_text(value)
    kind = numeric_metadata_kind(key)
    if kind is None:
        return value
    try:
        number = int(value) if kind == "int" else float(value)
    except ValueError:
        number = None
    if kind == "int":
        if number is None or not 0 <= number <= 2 ** 31 - 1:
            raise LimitError("an integer between 0 and 2147483647")
    elif kind == "ratio":
        if number is None:
            raise LimitError(f"a number > 0 and <= {MAX_RATIO:g}")
        check_ratio(number)
    else:
        if number is None:
            raise LimitError(f"a finite number between {-MAX_FLOAT:g} and {MAX_FLOAT:g}")
        check_float(number)
    return value
