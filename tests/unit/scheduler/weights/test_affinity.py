import pytest
from oslo_config import cfg

from scheduler.weights.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from tests.unit.scheduler import fakes

GROUP_HOSTS = {"h1": 2, "h2": 1}


def _spec(policy):
    return fakes.fake_spec(instance_group={"uuid": "g1", "policy": policy})


def _weights(weigher_cls, spec):
    w = weigher_cls(cfg.CONF)
    ctx = fakes.ctx(group_hosts=GROUP_HOSTS)
    return [fakes.weigh(w, fakes.fake_host(h), spec, ctx) for h in ("h1", "h2", "h3")]


def test_soft_affinity_counts_members():
    assert _weights(ServerGroupSoftAffinityWeigher, _spec("soft-affinity")) == [2, 1, 0]


def test_soft_anti_affinity_counts_members_negatively():
    assert _weights(ServerGroupSoftAntiAffinityWeigher, _spec("soft-anti-affinity")) == \
        [-2, -1, 0]


@pytest.mark.parametrize("weigher_cls", [ServerGroupSoftAffinityWeigher,
                                         ServerGroupSoftAntiAffinityWeigher])
@pytest.mark.parametrize("policy", [None, "affinity", "anti-affinity"])
def test_zero_for_other_requests(weigher_cls, policy):
    spec = fakes.fake_spec() if policy is None else _spec(policy)
    assert _weights(weigher_cls, spec) == [0, 0, 0]


def test_soft_affinity_ignores_soft_anti_affinity_group():
    assert _weights(ServerGroupSoftAffinityWeigher, _spec("soft-anti-affinity")) == [0, 0, 0]
    assert _weights(ServerGroupSoftAntiAffinityWeigher, _spec("soft-affinity")) == [0, 0, 0]


def test_multipliers():
    aff = ServerGroupSoftAffinityWeigher(cfg.CONF)
    anti = ServerGroupSoftAntiAffinityWeigher(cfg.CONF)
    assert fakes.multiplier(aff, fakes.fake_host()) == 1.0
    assert fakes.multiplier(anti, fakes.fake_host()) == 1.0
    with fakes.config("filter_scheduler", soft_affinity_weight_multiplier=3.0,
                      soft_anti_affinity_weight_multiplier=4.0):
        assert fakes.multiplier(aff, fakes.fake_host()) == 3.0
        assert fakes.multiplier(anti, fakes.fake_host()) == 4.0
    host = fakes.fake_host(aggregates=[{"soft_affinity_weight_multiplier": "7",
                                        "soft_anti_affinity_weight_multiplier": "8"}])
    assert fakes.multiplier(aff, host) == 7.0
    assert fakes.multiplier(anti, host) == 8.0


def test_negative_multiplier_rejected():
    with pytest.raises(ValueError):
        cfg.CONF.set_override("soft_affinity_weight_multiplier", -1.0, group="filter_scheduler")


@pytest.mark.parametrize("weigher_cls,policy,want", [
    (ServerGroupSoftAffinityWeigher, "soft-affinity", [2.0, 2.0, 1.0, 0.0]),
    (ServerGroupSoftAntiAffinityWeigher, "soft-anti-affinity", [-2.0, -2.0, -1.0, 0.0]),
    (ServerGroupSoftAffinityWeigher, "soft-anti-affinity", [0.0] * 4),
    (ServerGroupSoftAntiAffinityWeigher, "anti-affinity", [0.0] * 4),
])
def test_vector_form(weigher_cls, policy, want):
    hosts = [fakes.fake_host("h1", "n1a"), fakes.fake_host("h1", "n1b"),
             fakes.fake_host("h2"), fakes.fake_host("h3")]
    ctx = fakes.ctx(group_hosts={**GROUP_HOSTS, "gone": 4})
    assert fakes.weigh_vector(weigher_cls(cfg.CONF), hosts, _spec(policy), ctx) == want
