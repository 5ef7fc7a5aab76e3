import pytest
from oslo_config import cfg

from scheduler import exception, testing
from scheduler.weights.image_props import ImagePropertiesWeigher
from tests.unit.scheduler import fakes

UBUNTU = frozenset({("os_distro", "ubuntu"), ("hw_machine_type", "q35")})
WINDOWS = frozenset({("os_distro", "windows"), ("hw_machine_type", "q35")})


def _host(name, *images):
    host = fakes.fake_host(name)
    host.instance_images = {f"{name}-{i}": props for i, props in enumerate(images)}
    return host


HOSTS = [_host("empty"), _host("u1", UBUNTU), _host("u2", UBUNTU, UBUNTU),
         _host("w1", WINDOWS), _host("mixed", UBUNTU, WINDOWS)]


def _weights(props, setting=()):
    with fakes.config("filter_scheduler", image_props_weight_setting=list(setting)):
        return fakes.weigh_vector(ImagePropertiesWeigher(cfg.CONF), HOSTS,
                                  fakes.fake_spec(image={"properties": props}))


def test_counts_shared_properties_per_instance():
    props = {"os_distro": "ubuntu", "hw_machine_type": "q35"}
    assert _weights(props) == [0.0, 2.0, 4.0, 1.0, 3.0]


def test_setting_weighs_listed_properties_only():
    props = {"os_distro": "ubuntu", "hw_machine_type": "q35"}
    assert _weights(props, ["os_distro=10"]) == [0.0, 10.0, 20.0, 0.0, 10.0]
    assert _weights(props, ["os_distro=10", "hw_machine_type=0.5"]) == \
        [0.0, 10.5, 21.0, 0.5, 11.0]


def test_skips_without_properties_or_listed_ones():
    w = ImagePropertiesWeigher(cfg.CONF)
    assert fakes.skips(w, fakes.fake_spec())
    with fakes.config("filter_scheduler", image_props_weight_setting=["os_distro=1"]):
        assert fakes.skips(w, fakes.fake_spec(image={"properties": {"hw_rng": "true"}}))


def test_multiplier_default_off_and_aggregate_override():
    w = ImagePropertiesWeigher(cfg.CONF)
    assert fakes.multiplier(w, fakes.fake_host()) == 0.0
    host = fakes.fake_host(aggregates=[{"image_props_weight_multiplier": "-1.5"}])
    assert fakes.multiplier(w, host) == -1.5


def test_bad_setting_fails_at_start_up():
    with fakes.config("filter_scheduler", image_props_weight_setting=["os_distro"]):
        with pytest.raises(exception.InvalidRequest) as err:
            ImagePropertiesWeigher(cfg.CONF)
    assert err.value.field == "filter_scheduler.image_props_weight_setting"


def test_conformance():
    w = ImagePropertiesWeigher(cfg.CONF)
    requests = [testing.request(fakes.fake_spec(image={"properties": p})) for p in (
        {"os_distro": "windows"}, {"hw_machine_type": "q35", "os_distro": "ubuntu"}, {})]
    testing.check_weigher(w, HOSTS, requests)


def test_the_scheduler_keeps_instances_images(sqlite_db):
    """Placed instances' image properties reach the weigher, and survive a reload."""
    from db import hosts as db_hosts
    from scheduler import fleet as fleet_mod
    from scheduler.filter_scheduler import FilterScheduler, load_weighers
    from scheduler.host_manager import HostManager

    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [
        {"host": h, "vcpus": 8, "memory_mb": 8192, "local_gb": 50} for h in ("a", "b")]}))
    with fakes.config("filter_scheduler", image_props_weight_multiplier=1.0):
        s = FilterScheduler(HostManager(sqlite_db, cfg.CONF), cfg.CONF, filters=[],
                            weighers=load_weighers(["ImagePropertiesWeigher"], cfg.CONF))
        assert s.host_manager.load_instance_images

        def boot(distro, **kw):
            spec = s.parse_request({"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1},
                                    "image": {"properties": {"os_distro": distro}}, **kw})
            return [sel[0].host for sel in s.select_destinations(spec)]

        first = boot("ubuntu", force_hosts=["b"])
        assert first == ["b"]
        assert boot("ubuntu") == ["b"]                 # packs with its kind
        assert boot("ubuntu", num_instances=2) == ["b", "b"]
        fresh = HostManager(sqlite_db, cfg.CONF, load_instance_images=True)
        fresh.refresh()
        b = next(h for h in fresh.host_states() if h.host == "b")
        assert sorted(b.instance_images.values()) == [frozenset({("os_distro", "ubuntu")})] * 4
