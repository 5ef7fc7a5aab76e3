import numpy as np
from oslo_config import cfg

from pci.pools import PciPool, PoolKey
from scheduler.host_columns import HostColumns
from scheduler.weights.pci import PCIWeigher
from tests.unit.scheduler import fakes

_KEY = PoolKey("8086", "154c", "type-VF", 0, None)


def test_no_free_device_anywhere_is_one_weight_then_a_device_counts():
    """A request asking no device: one number while no row has a free device
    (it adds nothing); once a row is rewritten with devices, it weighs less."""
    w = PCIWeigher(cfg.CONF)
    hosts = [fakes.fake_host(f"h{i}") for i in range(3)]
    cols = HostColumns(hosts)
    assert w.weigh_vector(cols, 0) == 0.0
    hosts[2].pci_pools = (PciPool(_KEY, 4),)
    cols.update(2, hosts[2])
    assert list(w.weigh_vector(cols, 0)) == [0.0, 0.0, -4.0]


def test_devices_left_after_the_request():
    w = PCIWeigher(cfg.CONF)
    hosts = [fakes.fake_host("h0"), fakes.fake_host("h1", pci_pools=(PciPool(_KEY, 3),))]
    assert np.array_equal(w.weigh_vector(HostColumns(hosts), 1), [-0.0, -2.0])
