"""A deliberately slow third-party filter, for the tests of request deadlines and
yield points (doc/source/admin/security.rst: a CPU-heavy request never stalls the
others of its worker for longer than the deadline).

A per-host filter (no classes, no vector form): a request whose flavor asks for
``test:burn_us`` has every host's ``host_passes`` burn that many microseconds of
CPU, then pass (``test:refuse``: refuse); ``test:sleep_us`` sleeps that long
instead (a green sleep under eventlet: a slow request that lets the worker's
other green threads run). Any other request skips it, so a cheap
request on the same scheduler stays cheap. The functional test registers it
under ``berth.scheduler.filters`` as a third party would: a distribution with an
entry point (:func:`write_distribution`).
"""
from __future__ import annotations

import os
import time

from scheduler.filters import SKIP, BaseHostFilter

ENTRY_POINT = "SlowTestFilter"


class SlowTestFilter(BaseHostFilter):
    """Burns ``test:burn_us`` microseconds of CPU per host asked."""

    def prepare(self, request):
        extra = request.spec.flavor.extra_specs
        burn, sleep = extra.get("test:burn_us"), extra.get("test:sleep_us")
        if burn is None and sleep is None:
            return SKIP
        return int(burn or 0) / 1e6, int(sleep or 0) / 1e6, extra.get("test:refuse") == "true"

    def host_passes(self, host, state):
        burn, sleep, refuse = state
        end = time.perf_counter() + burn
        while time.perf_counter() < end:
            pass
        if sleep:
            time.sleep(sleep)
        return "refused by the slow test filter" if refuse else None


def write_distribution(directory) -> str:
    """A ``*.dist-info`` in ``directory`` that registers :class:`SlowTestFilter`
    (put ``directory`` on the daemon's PYTHONPATH); returns ``directory``."""
    info = os.path.join(str(directory), "berth_slow_test_filter-1.0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: berth-slow-test-filter\nVersion: 1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[berth.scheduler.filters]\n{ENTRY_POINT} = {__name__}:SlowTestFilter\n")
    return str(directory)
