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
