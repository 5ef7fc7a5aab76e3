from oslo_config import cfg

from pci.pools import PciPool, PoolKey
from scheduler.filters.pci_passthrough import PciPassthroughFilter
from tests.unit.scheduler import fakes


def _host(physnet, count=2):
    key = PoolKey("8086", "154c", "type-VF", None, physnet)
    return fakes.fake_host(pci_pools=(PciPool(key, count),))


def _spec(physnet):
    return fakes.fake_spec(pci_requests=[{"count": 1, "spec": [
        {"vendor_id": "8086", "product_id": "154c", "physical_network": physnet}]}])


def test_physical_network_is_compared_case_insensitively():
    hosts = [_host("physnet2"), _host("PhysNet2"), _host("physnet3"), _host(None)]
    flt = PciPassthroughFilter(cfg.CONF)
    assert fakes.filter_vector(flt, hosts, _spec("PHYSNET2")) == [True, True, False, False]
    assert fakes.filter_vector(flt, hosts, _spec("physnet2")) == [True, True, False, False]


def test_wrong_physical_network_reason_names_the_request():
    reason = fakes.passes(PciPassthroughFilter(cfg.CONF), _host("physnet3"), _spec("PHYSNET2"))
    assert reason is not None and "0 free" in reason
