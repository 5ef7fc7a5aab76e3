"""SimpleCIDRAffinityFilter: place near a given IP address.

Scheduler hints read: ``build_near_host_ip`` (an IPv4 or IPv6 address) and
``cidr`` (the prefix length as ``/N``; default ``/24``). Hosts whose
``host_ip`` is in that network pass; hosts without an address, or with one of
the other family, fail. Without ``build_near_host_ip`` every host passes. The
hints are checked when the request is validated: a malformed address or
prefix is an ``InvalidRequest`` naming the hint.
"""
from __future__ import annotations

import ipaddress
import re

from scheduler.exception import InvalidRequest
from scheduler.filters import SKIP, BaseHostFilter

DEFAULT_CIDR = "/24"
_CIDR = re.compile(r"^/(\d{1,3})$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_near(near_ip, cidr) -> Network | None:
    """The network of the ``build_near_host_ip`` and ``cidr`` hints, or None when
    no address is given. Raises InvalidRequest naming the hint."""
    if cidr is not None:
        if not isinstance(cidr, str) or not _CIDR.match(cidr.strip()):
            raise InvalidRequest(field="scheduler_hints.cidr",
                                 reason=f"expected a prefix length like '/24', got {cidr!r}")
    if near_ip is None or near_ip == "":
        return None
    if not isinstance(near_ip, str):
        raise InvalidRequest(field="scheduler_hints.build_near_host_ip",
                             reason=f"expected an IP address, got {near_ip!r}")
    try:
        address = ipaddress.ip_address(near_ip.strip())
    except ValueError:
        raise InvalidRequest(field="scheduler_hints.build_near_host_ip",
                             reason=f"not an IP address: {near_ip!r}") from None
    prefix = int(_CIDR.match((cidr or DEFAULT_CIDR).strip()).group(1))
    if prefix > address.max_prefixlen:
        raise InvalidRequest(field="scheduler_hints.cidr",
                             reason=f"/{prefix} is longer than an IPv{address.version} "
                                    f"address (/{address.max_prefixlen})")
    return ipaddress.ip_network(f"{address}/{prefix}", strict=False)


def host_address(host) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The host's ``host_ip``, or None when it has none (or not a valid one)."""
    if not host.host_ip:
        return None
    try:
        return ipaddress.ip_address(host.host_ip.strip())
    except ValueError:
        return None


class SimpleCIDRAffinityFilter(BaseHostFilter):
    """Removes hosts whose IP address is outside the hinted network; the answer
    for an address is remembered per network."""

    # A host's address does not change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        network = request.spec.scheduler_hints.near_network
        return SKIP if network is None else network

    def class_key(self, host):
        return host.host_ip

    def memo_key(self, network: Network):
        return str(network)

    def host_passes(self, host, network: Network) -> str | None:
        address = host_address(host)
        if address is None or address.version != network.version or address not in network:
            return f"host IP not in {network}"
        return None
