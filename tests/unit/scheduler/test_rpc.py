"""The payload guard and the context serializer shared by daemon and client."""
from __future__ import annotations

import pytest
from oslo_context import context as oslo_context

from scheduler import rpc
from scheduler.exception import InvalidRequest


@pytest.mark.parametrize("value", [
    None, True, 1, 1.5, "x", [], {}, {"a": [1, {"b": None}]}, 2 ** 62,
])
def test_check_json_accepts_plain_json(value):
    rpc.check_json(value, "f")


@pytest.mark.parametrize("value, field, reason", [
    (float("nan"), "f", "finite"),
    ({"a": [float("inf")]}, "f.a[0]", "finite"),
    ({"a": {1: "x"}}, "f.a", "keys must be strings"),
    ({"a": object()}, "f.a", "not a JSON value"),
    ({"a": {1, 2}}, "f.a", "not a JSON value"),
    (b"bytes", "f", "not a JSON value"),
    (2 ** 70, "f", "out of range"),
    ("x" * 70000, "f", "longer than"),
    (list(range(20000)), "f", "more than"),
])
def test_check_json_refuses_by_field(value, field, reason):
    with pytest.raises(InvalidRequest) as e:
        rpc.check_json(value, "f")
    assert e.value.field == field
    assert reason in e.value.reason


def test_check_json_refuses_deep_nesting():
    value: list = []
    for _ in range(40):
        value = [value]
    with pytest.raises(InvalidRequest, match="nested deeper"):
        rpc.check_json(value, "f")


def test_context_round_trip():
    s = rpc.ContextSerializer()
    ctxt = rpc.new_context(project_id="p1")
    back = s.deserialize_context(s.serialize_context(ctxt))
    assert isinstance(back, oslo_context.RequestContext)
    assert back.project_id == "p1"
    assert back.request_id == ctxt.request_id


def test_hostile_context_does_not_break_the_call():
    s = rpc.ContextSerializer()
    assert isinstance(s.deserialize_context("junk"), oslo_context.RequestContext)
    assert isinstance(s.deserialize_context({"roles": 5, "is_admin": "x"}),
                      oslo_context.RequestContext)
    assert s.serialize_context(None) == {}


def _reference_check_json(value, field, *, max_depth=16, max_items=10000, max_str=65536):
    """The payload guard's rule spelt plainly (the path built at every step):
    ``rpc.check_json`` must refuse exactly what this refuses, naming the same
    field for the same reason."""
    import math
    import re

    surrogate = re.compile("[\ud800-\udfff]")
    budget = [max_items]

    def walk(v, path, depth):
        budget[0] -= 1
        if budget[0] < 0:
            raise InvalidRequest(field=field, reason=f"more than {max_items} values")
        if depth > max_depth:
            raise InvalidRequest(field=path, reason=f"nested deeper than {max_depth}")
        if v is None or isinstance(v, bool | int):
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2 ** 63:
                raise InvalidRequest(field=path, reason="integer out of range")
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidRequest(field=path, reason="must be a finite number")
            return
        if isinstance(v, str):
            if len(v) > max_str:
                raise InvalidRequest(field=path, reason=f"longer than {max_str} characters")
            if surrogate.search(v):
                raise InvalidRequest(field=path, reason=rpc._NOT_TEXT)
            return
        if isinstance(v, list | tuple):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]", depth + 1)
            return
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise InvalidRequest(field=path, reason="keys must be strings")
                if surrogate.search(k):
                    raise InvalidRequest(field=path, reason=rpc._NOT_TEXT)
                walk(item, f"{path}.{k}", depth + 1)
            return
        raise InvalidRequest(field=path, reason=f"{type(v).__name__} is not a JSON value")

    walk(value, field, 0)


def _outcome(check, value, **limits):
    try:
        check(value, "f", **limits)
    except InvalidRequest as e:
        return e.field, e.reason
    return None


def _random_value(rng, depth=0):
    """A JSON-like value, now and then with something that may not travel."""
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    leaves = [None, True, False, 0, -7, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), 1.5,
              float("nan"), float("-inf"), "", "x", "é", "a\ud800", "y" * 40,
              Level.HIGH, b"b", object(), {1, 2}]
    pick = rng.random()
    if depth > 20 or pick < 0.5:
        return rng.choice(leaves)
    if pick < 0.7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick < 0.75:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    keys = ["a", "b", "flavor", "é", 1, "k\udc00", None]
    items = {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return collections.OrderedDict(items) if pick > 0.95 else items


def test_check_json_refuses_what_the_plain_rule_refuses():
    """The same outcome (accepted, or the same field and reason) as the rule
    spelt plainly, over random documents, with the limits met on the way."""
    import random

    rng = random.Random(4)
    limits = [{}, {"max_depth": 3}, {"max_items": 12}, {"max_items": 3}, {"max_str": 2}]
    for _ in range(3000):
        value = _random_value(rng)
        for lim in limits:
            assert _outcome(rpc.check_json, value, **lim) == \
                _outcome(_reference_check_json, value, **lim), (value, lim)
