import pytest
from oslo_config import cfg

from scheduler import testing
from scheduler.filters.isolated_hosts import IsolatedHostsFilter
from tests.unit.scheduler import fakes, reference

HOSTS = ("iso1", "plain1", "iso2", "plain2")


def _answers(image_id, **options):
    spec = fakes.fake_spec(image={"id": image_id}) if image_id else fakes.fake_spec()
    hosts = [fakes.fake_host(h) for h in HOSTS]
    options.setdefault("isolated_hosts", ["iso1", "iso2"])
    with fakes.config("filter_scheduler", **options):
        flt = IsolatedHostsFilter(cfg.CONF)
        req = testing.request(spec)
        testing.check_filter(flt, hosts, [req], reference=reference.filter_rule(flt))
        return testing.answers(flt, hosts, req)


ISO = "image img1 is isolated: not an isolated host"
HOST = "isolated host: the image is not an isolated image"


@pytest.mark.parametrize("restrict,image,want", [
    # Nova's truth table.
    (True, "img1", [None, ISO, None, ISO]),
    (True, "img2", [HOST, None, HOST, None]),
    (True, None, [HOST, None, HOST, None]),
    (False, "img1", [None, ISO, None, ISO]),
    (False, "img2", [None] * 4),
    (False, None, [None] * 4),
])
def test_isolation(restrict, image, want):
    assert _answers(image, isolated_images=["img1"],
                    restrict_isolated_hosts_to_isolated_images=restrict) == want


def test_no_isolated_images_keeps_isolated_hosts_empty_by_default():
    assert _answers("img9") == [HOST, None, HOST, None]
    assert _answers("img9", restrict_isolated_hosts_to_isolated_images=False) == [None] * 4


def test_nothing_configured_skips():
    assert fakes.skips(IsolatedHostsFilter(cfg.CONF), fakes.fake_spec(image={"id": "x"}))


def test_isolated_image_without_isolated_hosts_fits_nowhere():
    assert _answers("img1", isolated_images=["img1"], isolated_hosts=[]) == [ISO] * 4


def test_vector_form_only_and_once_per_request():
    flt = IsolatedHostsFilter(cfg.CONF)
    assert flt.has_vector and not flt.has_per_host
    assert IsolatedHostsFilter.run_filter_once_per_request
