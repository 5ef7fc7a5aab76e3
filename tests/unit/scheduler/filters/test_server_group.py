import pytest
from oslo_config import cfg

from scheduler.filters.server_group import (
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
)
from tests.unit.scheduler import fakes


def _spec(policy=None, **rules):
    if policy is None:
        return fakes.fake_spec()
    return fakes.fake_spec(instance_group={"uuid": "g1", "policy": policy, "rules": rules})


@pytest.mark.parametrize("filter_cls", [ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter])
def test_no_group_passes(filter_cls):
    ctx = fakes.ctx(group_hosts={"host1": 3})
    assert fakes.passes(filter_cls(cfg.CONF), fakes.fake_host("host1"), _spec(), ctx) is None


@pytest.mark.parametrize("filter_cls,policy", [
    (ServerGroupAffinityFilter, "anti-affinity"),
    (ServerGroupAffinityFilter, "soft-affinity"),
    (ServerGroupAntiAffinityFilter, "affinity"),
    (ServerGroupAntiAffinityFilter, "soft-anti-affinity"),
])
def test_other_policies_pass(filter_cls, policy):
    ctx = fakes.ctx(group_hosts={"host1": 3, "host2": 1})
    for host in ("host1", "host3"):
        assert fakes.passes(filter_cls(cfg.CONF), fakes.fake_host(host), _spec(policy),
                                                ctx) is None


def test_affinity_first_member_goes_anywhere():
    filt = ServerGroupAffinityFilter(cfg.CONF)
    assert fakes.passes(filt, fakes.fake_host("host1"), _spec("affinity"), fakes.ctx()) is None


def test_affinity_follows_the_members():
    filt = ServerGroupAffinityFilter(cfg.CONF)
    ctx = fakes.ctx(group_hosts={"host2": 1})
    assert fakes.passes(filt, fakes.fake_host("host2"), _spec("affinity"), ctx) is None
    assert fakes.passes(filt, fakes.fake_host("host1"), _spec("affinity"), ctx) == \
        "not a host of affinity group g1"


def test_affinity_ignores_zero_counts():
    filt = ServerGroupAffinityFilter(cfg.CONF)
    ctx = fakes.ctx(group_hosts={"host2": 0})
    assert fakes.passes(filt, fakes.fake_host("host1"), _spec("affinity"), ctx) is None


def test_anti_affinity_one_per_host_by_default():
    filt = ServerGroupAntiAffinityFilter(cfg.CONF)
    ctx = fakes.ctx(group_hosts={"host1": 1})
    assert fakes.passes(filt, fakes.fake_host("host2"), _spec("anti-affinity"), ctx) is None
    assert fakes.passes(filt, fakes.fake_host("host1"), _spec("anti-affinity"), ctx) == \
        "anti-affinity group g1: max 1 member(s) per host"


def test_anti_affinity_max_server_per_host():
    filt = ServerGroupAntiAffinityFilter(cfg.CONF)
    spec = _spec("anti-affinity", max_server_per_host=2)
    assert fakes.passes(filt, fakes.fake_host("host1"), spec,
                            fakes.ctx(group_hosts={"host1": 1})) is None
    assert fakes.passes(filt, fakes.fake_host("host1"), spec,
                            fakes.ctx(group_hosts={"host1": 2})) == \
        "anti-affinity group g1: max 2 member(s) per host"


def test_evaluated_per_instance():
    assert not ServerGroupAffinityFilter.run_filter_once_per_request
    assert not ServerGroupAntiAffinityFilter.run_filter_once_per_request


def _hosts():
    # host1 has two nodes: both carry the host's members.
    return [fakes.fake_host("host1", "n1a"), fakes.fake_host("host1", "n1b"),
            fakes.fake_host("host2"), fakes.fake_host("host3")]


@pytest.mark.parametrize("filter_cls,policy", [
    (ServerGroupAffinityFilter, "affinity"),
    (ServerGroupAntiAffinityFilter, "anti-affinity"),
])
def test_noop_without_their_policy(filter_cls, policy):
    filt = filter_cls(cfg.CONF)
    members = fakes.ctx(group_hosts={"host1": 1})
    assert fakes.skips(filt, _spec(), members)
    assert fakes.skips(filt, _spec("soft-" + policy), members)
    assert not fakes.skips(filt, _spec(policy), members)
    # Without members there is nothing to refuse.
    assert fakes.skips(filt, _spec(policy))


@pytest.mark.parametrize("group_hosts,want", [
    ({}, [True] * 4),
    ({"host2": 0}, [True] * 4),
    ({"host1": 1, "host3": 0, "gone": 2}, [True, True, False, False]),
])
def test_affinity_vector(group_hosts, want):
    filt = ServerGroupAffinityFilter(cfg.CONF)
    assert fakes.filter_vector(filt, _hosts(), _spec("affinity"),
                               fakes.ctx(group_hosts=group_hosts)) == want


@pytest.mark.parametrize("rules,group_hosts,want", [
    ({}, {}, [True] * 4),
    ({}, {"host1": 1, "host2": 0, "gone": 1}, [False, False, True, True]),
    ({"max_server_per_host": 2}, {"host1": 1, "host2": 2}, [True, True, False, True]),
])
def test_anti_affinity_vector(rules, group_hosts, want):
    filt = ServerGroupAntiAffinityFilter(cfg.CONF)
    assert fakes.filter_vector(filt, _hosts(), _spec("anti-affinity", **rules),
                               fakes.ctx(group_hosts=group_hosts)) == want
