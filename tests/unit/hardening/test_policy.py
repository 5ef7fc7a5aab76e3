"""Issue 15, part 1: oslo.policy rules over the request context — the matrix of
allowed and refused callers (``[scheduler] enforce_policy``, on by default), the
context Berth's own tools send, answers that do not tell another project
whether or where an instance runs, and the generated sample kept current."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg
from oslo_context.context import RequestContext

from scheduler import exception, rpc
from tests.unit.hardening import inproc

HOST = {"host": "c1", "vcpus": 8, "memory_mb": 8192, "local_gb": 100}
SPEC = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}


class Caller:
    """The endpoint called with one request context."""

    def __init__(self, endpoint, **context):
        self.endpoint = endpoint
        self.ctxt = rpc.new_context(**context)

    def __getattr__(self, name):
        method = getattr(self.endpoint, name)

        def call(*args, **kwargs):
            try:
                return method(self.ctxt, *args, **kwargs)
            except oslo_messaging.ExpectedException as e:
                raise e.exc_info[1] from None
        return call


@pytest.fixture
def world(sqlite_db):
    conf = inproc.configure()
    endpoint = inproc.manager(sqlite_db, conf).endpoint
    service = Caller(endpoint, roles=["service"], project_id="svc")
    service.report_compute_node(HOST)
    yield endpoint, sqlite_db
    conf.clear_override("policy_file", group="oslo_policy")
    for name in ("caller_roles", "caller_project_id"):
        conf.clear_override(name, group="scheduler")
    inproc.unconfigure(conf)


def _place(endpoint, project):
    caller = Caller(endpoint, project_id=project, roles=["member"])
    return caller.select_destinations(dict(SPEC, project_id=project))[0][0]["instance_uuid"]


ADMIN_CALLS = [("report_compute_node", (HOST,)), ("report_pci_devices", ("c1", [])),
               ("aggregate_create", ("agg",)), ("aggregate_list", ()),
               ("list_hosts", ()), ("show_host", ("c1",))]


@pytest.mark.parametrize("method, args", ADMIN_CALLS)
def test_admin_calls_need_admin_or_service(world, method, args):
    endpoint, db = world
    before = inproc.dump(db)
    for context in ({"roles": []}, {"project_id": "a", "roles": ["member"]},
                    {"project_id": "a", "roles": ["reader"]}):
        with pytest.raises(exception.Forbidden) as caught:
            getattr(Caller(endpoint, **context), method)(*args)
        assert caught.value.rule == f"berth:{method}"
    assert inproc.dump(db) == before
    for role in ("admin", "service"):
        try:
            getattr(Caller(endpoint, project_id="ops", roles=[role]), method)(*args)
        except exception.Conflict:      # allowed, and the aggregate exists already
            assert method == "aggregate_create"


def test_any_project_may_place(world):
    endpoint, _ = world
    assert _place(endpoint, "a")
    assert Caller(endpoint).select_destinations(SPEC, dry_run=True)


def test_release_and_reschedule_only_for_the_owner(world):
    """Another project's instance is answered as one that holds nothing: release
    False, reschedule and confirm as for an unknown UUID, so the caller learns
    neither whether nor where it runs; nothing changes."""
    endpoint, db = world
    mine, theirs = _place(endpoint, "a"), _place(endpoint, "b")
    nobody = str(uuid.uuid4())
    a = Caller(endpoint, project_id="a", roles=["member"])
    before = inproc.dump(db)
    assert a.release(theirs) is False and a.release(nobody) is False
    answers = []
    for instance in (theirs, nobody):
        with pytest.raises(exception.NotFound) as caught:
            a.reschedule(instance, "c1")
        answers.append(caught.value.message.replace(instance, "UUID"))
    assert answers[0] == answers[1] == "Allocation UUID not found."
    assert a.confirm([theirs]) == {"confirmed": [], "unknown": [theirs]}
    assert a.confirm([theirs, mine]) == {"confirmed": [], "unknown": [theirs]}  # all or none
    assert inproc.dump(db) == before
    assert a.release(mine) is True
    assert a.release(mine) is True       # released already: remembered as the caller's
    admin = Caller(endpoint, project_id="ops", roles=["admin"])
    assert admin.release(theirs) is True
    # released, but another project's: still answered as for nothing held
    assert a.release(theirs) is False


def test_a_refusal_on_the_callers_own_project_is_forbidden(world, tmp_path):
    """Hidden is only for other projects' instances: a rule that refuses the
    caller its own instances says so (Forbidden naming the rule)."""
    endpoint, _ = world
    mine = _place(endpoint, "a")
    path = tmp_path / "policy.yaml"
    path.write_text('"berth:release": "rule:admin_or_service"\n')
    cfg.CONF.set_override("policy_file", str(path), group="oslo_policy")
    endpoint.policy = type(endpoint.policy)(cfg.CONF)
    with pytest.raises(exception.Forbidden) as caught:
        Caller(endpoint, project_id="a", roles=["member"]).release(mine)
    assert caught.value.rule == "berth:release" and mine not in str(caught.value)


def test_policy_file_overrides_a_default(world, tmp_path):
    endpoint, _ = world
    path = tmp_path / "policy.yaml"
    path.write_text('"berth:list_hosts": ""\n')
    cfg.CONF.set_override("policy_file", str(path), group="oslo_policy")
    endpoint.policy = type(endpoint.policy)(cfg.CONF)
    member = {"project_id": "a", "roles": ["member"]}
    assert [h["host"] for h in Caller(endpoint, **member).list_hosts()] == ["c1"]
    with pytest.raises(exception.Forbidden):
        Caller(endpoint, **member).aggregate_list()


def test_enforcement_is_on_by_default_and_berths_tools_send_their_role(world):
    """A context without roles (what a foreign client that sends none gets) is
    refused the admin calls; Berth's own tools send [scheduler] caller_roles
    (service by default), which an operator may narrow."""
    endpoint, _ = world
    assert cfg.CONF.scheduler.enforce_policy is True
    with pytest.raises(exception.Forbidden):
        Caller(endpoint, roles=[]).list_hosts()
    ctxt = rpc.new_context()
    assert ctxt.roles == ["service"] and ctxt.project_id is None
    assert [h["host"] for h in Caller(endpoint).list_hosts()] == ["c1"]
    cfg.CONF.set_override("caller_roles", ["member"], group="scheduler")
    cfg.CONF.set_override("caller_project_id", "a", group="scheduler")
    tool = Caller(endpoint)
    assert (tool.ctxt.roles, tool.ctxt.project_id) == (["member"], "a")
    with pytest.raises(exception.Forbidden):
        tool.list_hosts()
    assert tool.release(_place(endpoint, "a")) is True


def test_enforcement_off_trusts_every_caller(sqlite_db):
    conf = inproc.configure()
    conf.set_override("enforce_policy", False, group="scheduler")
    try:
        endpoint = inproc.manager(sqlite_db, conf).endpoint
        assert Caller(endpoint, roles=[]).report_compute_node(HOST)["host"] == "c1"
    finally:
        conf.clear_override("enforce_policy", group="scheduler")
        inproc.unconfigure(conf)


def test_policy_sample_is_current(tmp_path):
    out = tmp_path / "policy.yaml.sample"
    tool = os.path.join(os.path.dirname(sys.executable), "oslopolicy-sample-generator")
    subprocess.run([tool, "--namespace", "berth", "--output-file", str(out)],
                   check=True, capture_output=True)
    with open("etc/berth/policy.yaml.sample") as f:
        assert out.read_text() == f.read(), "run tox -e genpolicy"


def test_rules_apply_on_a_configuration_never_parsed():
    """Berth embedded in a program that never parses a config (no policy file
    to look for) still enforces the default rules instead of failing every
    call with oslo.config's NotInitializedError."""
    from scheduler import policy

    conf = cfg.ConfigOpts()
    conf.register_opts(policy.policy_opts, group="scheduler")
    rules = policy.Policy(conf)
    service = RequestContext(roles=["service"])
    member = RequestContext(roles=["member"], project_id="a")
    assert rules.allows(service, "list_hosts")
    assert not rules.allows(member, "list_hosts")
    assert rules.allows(member, "release", {"project_id": "a"})
    assert not rules.allows(member, "release", {"project_id": "b"})


def test_a_decision_is_remembered_for_a_moment(world, monkeypatch):
    """The same question (rule, credentials, target) is asked of oslo.policy
    once per DECISION_TTL (which is when the enforcer would read a changed
    policy file); another target or another caller is asked on its own."""
    from scheduler import policy

    rules = policy.Policy(cfg.CONF)
    asked = []
    enforcer = rules._get()
    real = enforcer.enforce
    monkeypatch.setattr(enforcer, "enforce",
                        lambda *a, **kw: asked.append(a[0]) or real(*a, **kw))
    member = RequestContext(roles=["member"], project_id="a")
    for _ in range(3):
        assert not rules.allows(member, "list_hosts")
        assert rules.allows(member, "release", {"project_id": "a"})
    assert not rules.allows(member, "release", {"project_id": "b"})
    assert not rules.allows(RequestContext(roles=["member"], project_id="b"),
                            "release", {"project_id": "a"})
    assert asked == ["berth:list_hosts", "berth:release", "berth:release",
                     "berth:release"]
    monkeypatch.setattr(policy, "DECISION_TTL", 0.0)
    assert not rules.allows(member, "list_hosts")
    assert asked[-1] == "berth:list_hosts" and len(asked) == 5
