"""Matching PCI requests to a host's pools: NUMA policies, several requests, reasons."""
from __future__ import annotations

import itertools
import random

import pytest

from pci.errors import PciDoesNotFit, PciError
from pci.matching import apply_requests, explain, supports_requests
from pci.pools import PciPool, PoolKey
from pci.request import PciRequest

VF = {"vendor_id": "8086", "product_id": "154c"}
PF = {"vendor_id": "8086", "product_id": "1572", "dev_type": "type-PF"}
GPU = {"vendor_id": "10de", "product_id": "1eb8"}


def vf(numa, count, physnet=None):
    return PciPool(PoolKey("8086", "154c", "type-VF", numa, physnet), count)


def pf(numa, count):
    return PciPool(PoolKey("8086", "1572", "type-PF", numa, None), count)


def gpu(numa, count):
    return PciPool(PoolKey("10de", "1eb8", "type-PCI", numa, None), count)


def req(count, spec=VF, policy="legacy", alias="nic"):
    return PciRequest(count, (spec,), alias, policy, f"r-{alias}")


def fits(pools, requests, cells=None, socket_of=None):
    ok = supports_requests(pools, requests, cells, socket_of)
    assert (explain(pools, requests, cells, socket_of) is None) == ok
    if ok:
        apply_requests(pools, requests, cells, socket_of)
    else:
        with pytest.raises(PciDoesNotFit):
            apply_requests(pools, requests, cells, socket_of)
    return ok


class TestSingleRequest:
    def test_no_requests_always_fit(self):
        assert supports_requests((), ())
        assert apply_requests((vf(0, 1),), ()) == ((vf(0, 1),), ())
        assert explain((), ()) is None

    def test_count_across_pools(self):
        pools = (vf(0, 1), vf(1, 1))
        assert fits(pools, [req(2)])
        assert not fits(pools, [req(3)])

    def test_spec_fields(self):
        pools = (vf(0, 2, "physnet1"), gpu(0, 1))
        assert fits(pools, [req(2, {**VF, "physical_network": "physnet1"})])
        assert not fits(pools, [req(1, {**VF, "physical_network": "physnet2"})])
        assert fits(pools, [req(1, {"vendor_id": "10de"})])
        assert not fits(pools, [req(1, {**VF, "dev_type": "type-PCI"})])

    def test_alternative_specs(self):
        pools = (vf(0, 1), gpu(0, 1))
        either = PciRequest(2, (VF, GPU), "any", "legacy", "r")
        assert fits(pools, [either])

    def test_pf_only_when_asked_by_type(self):
        pools = (pf(0, 2),)
        assert not fits(pools, [req(1, {"vendor_id": "8086", "product_id": "1572"})])
        assert fits(pools, [req(1, PF)])

    def test_pure(self):
        pools = (vf(0, 2), gpu(1, 1))
        before = pools
        new, picks = apply_requests(pools, [req(1), req(1, GPU, alias="gpu")])
        assert pools == before and pools[0].count == 2
        assert new == (vf(0, 1),)
        assert picks == ((0, vf(0, 2).key, 1), (1, gpu(1, 1).key, 1))


class TestNumaPolicies:
    pools = (vf(0, 1), vf(1, 2), vf(None, 1))

    @pytest.mark.parametrize("policy", ["required", "legacy", "preferred", "socket"])
    def test_no_instance_numa_means_no_restriction(self, policy):
        assert fits(self.pools, [req(4, policy=policy)], None)

    def test_required(self):
        assert fits(self.pools, [req(2, policy="required")], {1})
        assert not fits(self.pools, [req(3, policy="required")], {1})
        assert not fits(self.pools, [req(2, policy="required")], {0})
        assert fits(self.pools, [req(3, policy="required")], {0, 1})
        # Unknown NUMA node is not good enough.
        assert not fits((vf(None, 1),), [req(1, policy="required")], {0})

    def test_legacy_accepts_unknown_numa(self):
        assert fits(self.pools, [req(2, policy="legacy")], {0})
        assert not fits(self.pools, [req(3, policy="legacy")], {0})
        assert fits(self.pools, [req(3, policy="legacy")], {1})

    def test_preferred_falls_back_anywhere(self):
        assert fits(self.pools, [req(4, policy="preferred")], {0})
        assert not fits(self.pools, [req(5, policy="preferred")], {0})

    def test_preferred_uses_affine_pools_first(self):
        _, picks = apply_requests(self.pools, [req(2, policy="preferred")], {1})
        assert picks == ((0, vf(1, 2).key, 2),)
        _, picks = apply_requests(self.pools, [req(2, policy="preferred")], {0})
        assert {key.numa_node for _, key, _ in picks} >= {0}

    def test_preferred_gives_way_to_a_required_request(self):
        pools = (vf(0, 1), vf(1, 1))
        reqs = [req(1, policy="preferred", alias="a"), req(1, policy="required", alias="b")]
        _, picks = apply_requests(pools, reqs, {0})
        assert picks == ((0, vf(1, 1).key, 1), (1, vf(0, 1).key, 1))

    def test_socket(self):
        pools = (vf(2, 1), vf(3, 1), vf(None, 1))
        socket_of = {0: 0, 1: 0, 2: 1, 3: 1}
        assert fits(pools, [req(2, policy="socket")], {3}, socket_of)
        assert not fits(pools, [req(3, policy="socket")], {3}, socket_of)
        assert not fits(pools, [req(1, policy="socket")], {0, 1}, socket_of)
        assert fits(pools, [req(2, policy="socket")], {0, 2}, socket_of)

    def test_socket_needs_socket_info(self):
        pools = (vf(0, 1),)
        assert not fits(pools, [req(1, policy="socket")], {0}, None)
        assert "socket" in explain(pools, [req(1, policy="socket")], {0})


class TestSeveralRequests:
    def test_two_aliases_cannot_share_one_device(self):
        pools = (vf(0, 1),)
        any_vf = PciRequest(1, ({"vendor_id": "8086"},), "nic2", "legacy", "r2")
        assert fits(pools, [req(1)])
        assert fits(pools, [any_vf])
        assert not fits(pools, [req(1), any_vf])
        assert explain(pools, [req(1), any_vf]) == \
            "alias nic + alias nic2: need 2 matching devices together, 1 free"

    def test_order_does_not_matter(self):
        # The broad request comes first; a greedy pass would take the GPU for it.
        pools = (vf(0, 1), gpu(0, 1))
        broad = PciRequest(1, (VF, GPU), "any", "legacy", "r1")
        narrow = req(1, GPU, alias="gpu")
        assert fits(pools, [broad, narrow])
        new, picks = apply_requests(pools, [broad, narrow])
        assert new == ()
        assert sorted((r, k.vendor_id) for r, k, _ in picks) == [(0, "8086"), (1, "10de")]

    def test_numa_interplay(self):
        pools = (vf(0, 1), vf(1, 1))
        reqs = [req(1, policy="legacy", alias="a"), req(1, policy="required", alias="b")]
        assert fits(pools, reqs, {0, 1})
        assert not fits(pools, reqs, {0})

    def test_many_requests_use_the_assignment(self):
        pools = tuple(vf(n, 1) for n in range(8))
        reqs = [req(1, alias=f"a{i}") for i in range(8)]
        assert fits(pools, reqs)
        assert not fits(pools, reqs + [req(1, alias="extra")])
        assert "9 pci requests" in explain(pools, reqs + [req(1, alias="extra")])


class TestExplain:
    def test_not_enough_matching(self):
        assert explain((vf(0, 1),), [req(2)]) == "alias nic: need 2 matching devices, 1 free"
        assert explain((), [req(1, GPU, alias="gpu")]) == \
            "alias gpu: need 1 matching device, 0 free"

    def test_numa(self):
        assert explain((vf(1, 2),), [req(1, policy="required")], {0}) == (
            "alias nic: need 1 matching device on the instance's NUMA cells "
            "(numa_policy required), 0 free there")

    def test_without_alias(self):
        request = PciRequest(1, (GPU,), None, "legacy", "r")
        assert explain((), [request]) == "pci request 10de:1eb8: need 1 matching device, 0 free"

    def test_same_text_for_same_failure(self):
        a = explain((vf(0, 1),), [req(2)])
        b = explain((vf(1, 1), gpu(0, 4)), [req(2)])
        assert a == b

    def test_does_not_fit_is_a_pci_error(self):
        with pytest.raises(PciError) as exc:
            apply_requests((vf(0, 1),), [req(2)])
        assert exc.value.field == "pci_requests"
        assert exc.value.reason == "alias nic: need 2 matching devices, 1 free"


def _brute_force(pools, requests, cells, socket_of):
    """Every way to hand out individual devices: the slow truth."""
    from pci.matching import _candidates, _Numa

    cands = _candidates(pools, requests, _Numa(cells, socket_of))
    slots = [r for r, q in enumerate(requests) for _ in range(q.count)]
    devices = [i for i, p in enumerate(pools) for _ in range(p.count)]
    if len(slots) > len(devices):
        return False
    for chosen in itertools.permutations(range(len(devices)), len(slots)):
        if all(devices[d] in cands[r] for r, d in zip(slots, chosen, strict=True)):
            return True
    return False


@pytest.mark.parametrize("hall_max", [6, 0])
def test_agrees_with_brute_force(monkeypatch, hall_max):
    """Hall's condition and the augmenting-path assignment both match the truth."""
    from pci import matching

    monkeypatch.setattr(matching, "_HALL_MAX_REQUESTS", hall_max)
    rng = random.Random(4)
    outcomes = set()
    keys = [("8086", "154c", "type-VF"), ("8086", "1572", "type-PF"), ("10de", "1eb8",
                                                                         "type-PCI")]
    specs = [VF, PF, GPU, {"vendor_id": "8086"}, {"vendor_id": "8086", "dev_type": "type-PF"}]
    socket_of = {0: 0, 1: 0, 2: 1}
    for _ in range(400):
        pools = tuple(PciPool(PoolKey(*rng.choice(keys), rng.choice([None, 0, 1, 2]), None),
                              rng.randint(1, 2)) for _ in range(rng.randint(0, 3)))
        requests = [PciRequest(rng.randint(1, 2),
                               tuple(rng.sample(specs, rng.randint(1, 2))), f"a{i}",
                               rng.choice(["required", "legacy", "preferred", "socket"]), "r")
                    for i in range(rng.randint(1, 3))]
        cells = rng.choice([None, {0}, {1}, {0, 2}])
        truth = _brute_force(pools, requests, cells, socket_of)
        assert supports_requests(pools, requests, cells, socket_of) == truth
        outcomes.add(truth)
        if truth:
            new, picks = apply_requests(pools, requests, cells, socket_of)
            assert sum(n for *_, n in picks) == sum(r.count for r in requests)
            assert sum(p.count for p in new) == sum(p.count for p in pools) - sum(
                r.count for r in requests)
            for r, q in enumerate(requests):
                assert sum(n for i, _, n in picks if i == r) == q.count
    assert outcomes == {True, False}


def test_match_memo_is_invisible():
    a, b = req(1), req(1)
    assert supports_requests((vf(0, 1),), [a])
    assert a == b and a.to_primitive() == b.to_primitive() and "_match" not in repr(a)
    assert hash(vf(0, 1).key) == hash(PoolKey("8086", "154c", "type-VF", 0, None))


def tagged_vf(numa, count, **tags):
    return PciPool(PoolKey("8086", "154c", "type-VF", numa, "physnet1",
                           tuple(sorted(tags.items()))), count)


class TestTags:
    TRUSTED = {**VF, "trusted": "true"}

    def test_a_tag_in_the_spec_needs_the_tag_on_the_device(self):
        plain, trusted = tagged_vf(0, 3), tagged_vf(0, 1, trusted="true")
        assert fits((plain, trusted), [req(1, self.TRUSTED)])
        assert not fits((plain,), [req(1, self.TRUSTED)])           # untagged: no
        assert not fits((tagged_vf(0, 5, trusted="false"),), [req(1, self.TRUSTED)])
        assert not fits((plain, trusted), [req(2, self.TRUSTED)])
        assert explain((plain, trusted), [req(2, self.TRUSTED)]) == \
            "alias nic: need 2 matching devices, 1 free"
        _, picks = apply_requests((plain, trusted), [req(1, self.TRUSTED)])
        assert picks == ((0, trusted.key, 1),)

    def test_values_compare_case_insensitively(self):
        assert fits((tagged_vf(0, 1, trusted="True"),), [req(1, self.TRUSTED)])
        assert fits((tagged_vf(0, 1, trusted="true"),), [req(1, {**VF, "trusted": "TRUE"})])

    def test_a_spec_without_tags_takes_tagged_devices_too(self):
        assert fits((tagged_vf(0, 2, trusted="true", kind="nic"),), [req(2)])

    def test_every_tag_of_the_spec_must_match(self):
        pool = tagged_vf(0, 1, trusted="true", kind="nic")
        assert fits((pool,), [req(1, {**self.TRUSTED, "kind": "nic"})])
        assert not fits((pool,), [req(1, {**self.TRUSTED, "kind": "fpga"})])

    def test_remote_managed_devices_only_when_asked(self):
        smartnic = tagged_vf(0, 2, remote_managed="true")
        assert not fits((smartnic,), [req(1)])
        assert not fits((smartnic,), [req(1, {**VF, "remote_managed": "false"})])
        assert fits((smartnic,), [req(1, {**VF, "remote_managed": "true"})])
        # ... and a spec asking for them gets no plain device.
        assert not fits((vf(0, 2),), [req(1, {**VF, "remote_managed": "true"})])
        assert fits((tagged_vf(0, 1, remote_managed="false"),), [req(1)])

    def test_tagged_and_untagged_requests_share_a_host(self):
        pools = (tagged_vf(0, 1), tagged_vf(0, 1, trusted="true"))
        _, picks = apply_requests(pools, [req(1, alias="any"), req(1, self.TRUSTED, alias="t")])
        # The untagged request must leave the only trusted VF to the trusted one.
        assert sorted((r, k.tags) for r, k, _ in picks) == [(0, ()),
                                                            (1, (("trusted", "true"),))]
