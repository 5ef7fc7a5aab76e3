"""Pools derived from devices, in canonical order."""
from __future__ import annotations

from pci.device import PciDevice
from pci.pools import PciPool, PoolKey, free_count, pools_from_devices, sort_pools


def test_pools_count_available_devices_by_key():
    devs = [
        PciDevice("0000:81:02.1", "8086", "154c", "type-VF", "0000:81:00.0", 1, "physnet1"),
        PciDevice("0000:81:02.2", "8086", "154c", "type-VF", "0000:81:00.0", 1, "physnet1"),
        PciDevice("0000:81:02.3", "8086", "154c", "type-VF", "0000:81:00.0", 1, "physnet1",
                  "claimed", "i1"),
        PciDevice("0000:81:00.0", "8086", "1572", "type-PF", None, 1, None, "unclaimable"),
        PciDevice("0000:03:00.0", "10de", "1eb8", "type-PCI", None, None),
        PciDevice("0000:04:00.0", "10de", "1eb8", "type-PCI", None, 0),
    ]
    assert pools_from_devices(devs) == (
        PciPool(PoolKey("10de", "1eb8", "type-PCI", None, None), 1),
        PciPool(PoolKey("10de", "1eb8", "type-PCI", 0, None), 1),
        PciPool(PoolKey("8086", "154c", "type-VF", 1, "physnet1"), 2),
    )
    assert free_count(pools_from_devices(devs)) == 4


def test_sort_handles_none_and_is_stable_across_inputs():
    a = PciPool(PoolKey("8086", "154c", "type-VF", None, "p2"), 1)
    b = PciPool(PoolKey("8086", "154c", "type-VF", 0, None), 1)
    c = PciPool(PoolKey("8086", "154c", "type-VF", 0, "p1"), 1)
    assert sort_pools([c, b, a]) == sort_pools([a, c, b]) == (a, b, c)


def test_tags_are_part_of_the_pool_key():
    vf = ("8086", "154c", "type-VF", "0000:81:00.0", 0, "physnet1")
    devs = [PciDevice("0000:81:02.1", *vf),
            PciDevice("0000:81:02.2", *vf, tags=(("trusted", "true"),)),
            PciDevice("0000:81:02.3", *vf, tags=(("trusted", "true"),)),
            PciDevice("0000:81:02.4", *vf, tags=(("trusted", "True"),))]
    plain = PoolKey("8086", "154c", "type-VF", 0, "physnet1")
    trusted = PoolKey("8086", "154c", "type-VF", 0, "physnet1", (("trusted", "true"),))
    upper = PoolKey("8086", "154c", "type-VF", 0, "physnet1", (("trusted", "True"),))
    # Untagged first; tag values are kept as given (matching ignores their case).
    assert pools_from_devices(devs) == (PciPool(plain, 1), PciPool(upper, 1),
                                        PciPool(trusted, 2))
    assert plain != trusted and hash(plain) != hash(trusted)
    assert trusted.tag_values == upper.tag_values == {"trusted": "true"}
