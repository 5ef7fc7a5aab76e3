"""AvailabilityZoneFilter: the host is in the requested availability zone.

A host's zone comes from its aggregates' ``availability_zone`` metadata (a host
in several zoned aggregates is in each of them; a value may list zones
separated by commas), else the default zone. No zone requested: every host passes.
"""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter


def host_zones(host) -> frozenset[str]:
    """Every zone ``host`` is in."""
    zones = {host.availability_zone} if host.availability_zone else set()
    for agg in host.aggregates:
        value = agg.metadata.get("availability_zone")
        if value:
            zones.update(z.strip() for z in value.split(","))
    return frozenset(zones)


class AvailabilityZoneFilter(BaseHostFilter):
    """Removes hosts outside the requested availability zone."""

    # A host's zone does not change between the instances of one request.
    run_filter_once_per_request = True

    def prepare(self, request):
        return request.spec.availability_zone or SKIP

    def class_key(self, host):
        return host_zones(host)

    def memo_key(self, zone: str):
        return zone

    def host_passes(self, host, zone: str) -> str | None:
        if zone in host_zones(host):
            return None
        return f"not in {zone}"
