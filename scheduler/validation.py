"""Typed checks of the values that come in from outside: RPC payloads (the
endpoints, ``RequestSpec``), fleet files and host reports (``scheduler.fleet``)
and the command-line tools that read them.

Each check takes the value and the field it came from, and returns the clean
value or raises ``InvalidRequest`` naming the field. A reason reads
``expected <what>, got <value>`` (the value shown as JSON would write it, cut
to 60 characters) or says what is wrong (``unknown key``, ``more than 1000
entries``). The ranges of what is stored come from ``db.limits``.

The value of an RPC payload has passed ``scheduler.rpc.check_json`` before
(plain, finite, bounded JSON); a fleet file has passed ``fleet``'s own walk.
"""
from __future__ import annotations

import difflib
import math
import re
import uuid as uuidlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

from db import limits
from db.errors import InvalidRequest

#: Longest string a request's free-text fields take (names, ids, zones).
MAX_STR = 255
#: Most entries of a list or keys of a mapping a request field takes.
MAX_LIST = 1000


def show(value: Any) -> str:
    """``value`` as an error message quotes it: strings quoted, ``null``,
    ``true``/``false``; cut to 60 characters."""
    if limits.is_int(value) and abs(value) > limits.MAX_BIGINT:
        # str() of a huge integer is slow, and refused beyond 4,300 digits
        return f"an integer of {value.bit_length()} bits"
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def invalid(field: str, reason: str) -> InvalidRequest:
    """The error for ``field``, saying ``reason``."""
    return InvalidRequest(field=field, reason=reason)


def expected(field: str, what: str, got: Any) -> InvalidRequest:
    """The error for ``field``: ``expected <what>, got <got>``."""
    return InvalidRequest(field=field, reason=f"expected {what}, got {show(got)}")


def limited(check: Callable[..., Any], value: Any, field: str, *args: Any) -> Any:
    """A ``db.limits`` check of ``value``, its LimitError named by ``field``."""
    try:
        return check(value, *args)
    except limits.LimitError as e:
        raise expected(field, e.expected, value) from None


def optional(check: Callable[..., Any], value: Any, field: str, *args: Any) -> Any:
    """None for None, else ``check(value, field, *args)``."""
    return None if value is None else check(value, field, *args)


# -- scalars ------------------------------------------------------------------------------

def integer(value: Any, field: str, minimum: int = 0,
            maximum: int = limits.MAX_BIGINT) -> int:
    """An integer (not a boolean) in [minimum, maximum]."""
    if not limits.is_int(value) or value < minimum:
        raise expected(field, f"an integer >= {minimum}" if minimum <= 0
                       else f"an integer > {minimum - 1}", value)
    if value > maximum:
        raise expected(field, f"an integer <= {maximum}", value)
    return value


def ratio(value: Any, field: str) -> float:
    """An allocation ratio (``db.limits.check_ratio``)."""
    return limited(limits.check_ratio, value, field)


def finite(value: Any, field: str) -> float:
    """A finite number within ``db.limits.MAX_FLOAT``."""
    return limited(limits.check_float, value, field)


def boolean(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise expected(field, "true or false", value)
    return value


#: A UTF-16 surrogate code point: in a str only when it came alone (not text).
_SURROGATE = re.compile("[\ud800-\udfff]")


def text(value: Any, field: str, max_len: int = MAX_STR) -> str:
    """Any Unicode string of at most ``max_len`` characters (ids, flavor and
    zone names of a request: matched, never stored as names)."""
    if not isinstance(value, str):
        raise expected(field, "a string", value)
    if len(value) > max_len:
        raise invalid(field, f"longer than {max_len} characters")
    if not value.isascii() and _SURROGATE.search(value):
        raise invalid(field, "holds a lone surrogate (not Unicode text)")
    return value


def name(value: Any, field: str, max_len: int = limits.MAX_NAME) -> str:
    """A host, node, aggregate or zone name, or a metadata key: non-blank, at
    most ``max_len`` characters, no control characters (``db.limits``)."""
    return limited(limits.check_name, value, field, max_len)


def note(value: Any, field: str) -> str:
    """A stored free text (a disabled reason): may be empty (``db.limits``)."""
    return limited(limits.check_text, value, field)


def scalar_text(value: Any, field: str, max_len: int = limits.MAX_NAME, *,
                control: bool = False) -> str:
    """A value that is a string: numbers and booleans are taken as the text they
    stand for (``true``, ``2.0``); at most ``max_len`` characters, without
    control characters unless ``control``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise expected(field, "a finite number", value)
    if isinstance(value, str | int | float):
        out = str(value)
        if len(out) <= max_len and (control or not limits.has_control(out)):
            return out
    raise expected(field, f"a string, number or boolean of at most {max_len} characters"
                          + ("" if control else " without control characters"), value)


def uuid(value: Any, field: str) -> str:
    """A UUID in any form ``uuid.UUID`` reads, returned in the canonical one."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            return str(uuidlib.UUID(value))
        except ValueError:
            pass
    raise expected(field, "a UUID", value)


# -- collections --------------------------------------------------------------------------

def mapping(value: Any, field: str, max_keys: int | None = None) -> dict:
    """A JSON object / YAML mapping of at most ``max_keys`` keys."""
    if not isinstance(value, dict):
        raise expected(field, "a mapping", value)
    if max_keys is not None and len(value) > max_keys:
        raise invalid(field, f"more than {max_keys} keys")
    return value


def name_keys(value: dict, field: str) -> dict:
    """``value`` whose keys are strings without control characters (a mapping
    that is stored: stats, metrics, topologies)."""
    for key in value:
        if not isinstance(key, str):
            raise expected(field, "a mapping with string keys", value)
        if limits.has_control(key):
            raise expected(field, "keys without control characters", key)
    return value


def known_keys(data: Mapping, known: Collection[str], field: str = "") -> None:
    """Refuse the first key of ``data`` not in ``known``: the error names
    ``field.key`` (a key that is empty or not text by its repr, so the field
    never reads ``''``) and the known key it is closest to, or all of them."""
    extra = sorted((k for k in data if k not in known), key=repr)
    if not extra:
        return
    key = extra[0] if isinstance(extra[0], str) and extra[0] else repr(extra[0])
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"did you mean {close[0]}?" if close else "known keys: " + ", ".join(sorted(known))
    raise invalid(f"{field}.{key}" if field else key, f"unknown key ({hint})")


def sequence(value: Any, field: str, max_items: int | None = None,
             what: str = "a list") -> list | tuple:
    """A list of at most ``max_items`` entries."""
    if not isinstance(value, list | tuple):
        raise expected(field, what, value)
    if max_items is not None and len(value) > max_items:
        raise invalid(field, f"more than {max_items} entries")
    return value


def strings(value: Any, field: str, max_items: int = MAX_LIST,
            max_len: int = MAX_STR) -> tuple[str, ...]:
    """A list of strings (:func:`text`); None is none, one string a list of one
    (as Nova sends some hints)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    return tuple(text(v, f"{field}[{i}]", max_len) for i, v in
                 enumerate(sequence(value, field, max_items, "a list of strings")))


def uuids(value: Any, field: str, max_items: int = MAX_LIST, *,
          distinct: bool = True) -> list[str]:
    """A list of UUIDs (:func:`uuid`), canonical; ``distinct``: none twice."""
    out = [uuid(v, f"{field}[{i}]") for i, v in enumerate(sequence(value, field, max_items))]
    if distinct and len(set(out)) != len(out):
        raise invalid(field, "duplicate UUIDs")
    return out


def names(value: Any, field: str, max_items: int | None = None) -> list[str]:
    """A list of names (:func:`name`)."""
    return [name(v, f"{field}[{i}]") for i, v in enumerate(sequence(value, field, max_items))]


def text_mapping(value: Any, field: str, max_keys: int = MAX_LIST,
                 max_len: int = 4096) -> dict[str, str]:
    """Properties a request matches on (flavor extra specs, image properties):
    string keys, :func:`scalar_text` values of at most ``max_len`` characters;
    None is none."""
    return {text(k, field): scalar_text(v, f"{field}.{k}", max_len, control=True)
            for k, v in (optional(mapping, value, field, max_keys) or {}).items()}


def metadata(value: Any, field: str, *, max_keys: int | None = None,
             deletions: bool = False) -> dict[str, str | None]:
    """Aggregate metadata: name -> :func:`scalar_text`, held to the ranges of the
    keys the scheduler reads as numbers (``db.limits.check_metadata_value``).
    With ``deletions`` a None value stands for "delete this key"."""
    out: dict[str, str | None] = {}
    for key, raw in mapping(value, field, max_keys).items():
        where = f"{field}.{key}"
        name(key, where)
        if raw is None and deletions:
            out[key] = None
            continue
        out[key] = _metadata_value(key, scalar_text(raw, where), where)
    return out


def _metadata_value(key: str, value: str, field: str) -> str:
    """An aggregate metadata value (text): a key the scheduler reads as a
    number holds one in range (``db.limits.check_metadata_value``)."""
    try:
        return limits.check_metadata_value(key, value)
    except limits.LimitError as e:
        raise expected(field, e.expected, value) from None
