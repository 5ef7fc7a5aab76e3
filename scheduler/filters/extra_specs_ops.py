"""Matching a host value against an extra-spec requirement (Nova's operator syntax).

A requirement is ``"<op> operand"`` or a plain string:

=========  ==============================================================
``=``      numeric, value >= operand (``= 4``: "at least 4")
``==``     numeric equality; ``!=``, ``>=``, ``<=`` likewise
``s==``    string equality; ``s!=``, ``s<``, ``s<=``, ``s>``, ``s>=`` likewise
``<in>``   the operand is a substring of the value
``<all-in>``  every operand word is a substring of the value
``<or>``   ``<or> a <or> b``: the value equals one of the alternatives
(none)     the value equals the whole requirement string
=========  ==============================================================

A missing value (``None``) never satisfies an operator; a value or operand that
is not a number never satisfies a numeric operator. ``compile_requirement``
parses once and returns a predicate, so a filter pays the parsing once per
request rather than once per host.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Predicate = Callable[[str | None], bool]

_NUMERIC_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
}
_STRING_OPS: dict[str, Callable[[str, str], bool]] = {
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
}
OPERATORS = frozenset(_NUMERIC_OPS) | frozenset(_STRING_OPS) | {"<in>", "<all-in>", "<or>"}


def _never(value: str | None) -> bool:
    return False


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _numeric(compare: Callable[[float, float], bool], operand: str) -> Predicate:
    wanted = _to_float(operand)
    if wanted is None:
        return _never

    def check(value: str | None) -> bool:
        if value is None:
            return False
        got = _to_float(value)
        return got is not None and compare(got, wanted)
    return check


def _string(compare: Callable[[str, str], bool], operand: str) -> Predicate:
    def check(value: str | None) -> bool:
        return value is not None and compare(value, operand)
    return check


def _one_of(choices: frozenset[str]) -> Predicate:
    def check(value: str | None) -> bool:
        return value in choices
    return check


def _contains_all(words: tuple[str, ...]) -> Predicate:
    def check(value: str | None) -> bool:
        return value is not None and all(w in value for w in words)
    return check


def _equals(req: str) -> Predicate:
    def check(value: str | None) -> bool:
        return value == req
    return check


def compile_requirement(req: str) -> Predicate:
    """Parse ``req`` once; the result tells whether a host value satisfies it."""
    words = req.split()
    op = words[0] if words else None
    if op not in OPERATORS:
        return _equals(req)
    operands = words[1:]
    if op == "<or>":
        # "<or> a <or> b <or> c": every other word is an alternative.
        return _one_of(frozenset(operands[0::2]))
    if not operands:
        return _never
    if op == "<all-in>":
        return _contains_all(tuple(operands))
    if op == "<in>":
        return _contains_all((operands[0],))
    if op in _NUMERIC_OPS:
        return _numeric(_NUMERIC_OPS[op], operands[0])
    return _string(_STRING_OPS[op], operands[0])


def numeric_requirement(req: str) -> tuple[Callable[[Any, float], Any], float | None] | None:
    """``(compare, operand)`` when ``req`` is a numeric operator (``operand`` None:
    not a number, so nothing satisfies it), else None. ``compare`` works on
    numbers and on numpy arrays alike."""
    words = req.split()
    if len(words) < 2 or words[0] not in _NUMERIC_OPS:
        return None
    return _NUMERIC_OPS[words[0]], _to_float(words[1])


def match(value: str | None, req: str) -> bool:
    """Whether ``value`` satisfies the requirement ``req`` (parses every call)."""
    return compile_requirement(req)(value)
