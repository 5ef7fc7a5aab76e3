"""A select that takes longer than the client's call-monitor timeout is kept
alive by the worker's heartbeats (scheduler.call_monitor), on a real broker,
with either concurrency backend; a quick one costs no thread."""
from __future__ import annotations

import time

import pytest

from tests import slow_filter
from tests.functional.daemon import Daemon, small_fleet

CONFIG = (f"[filter_scheduler]\nenabled_filters = ComputeFilter,RamFilter,"
          f"{slow_filter.ENTRY_POINT}\n")
#: 4 hosts x 1.2 s: a select of ~5 s, against a client that gives up after
#: 2 s without a heartbeat
SLOW = {"threading": {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                                 "extra_specs": {"test:burn_us": "1200000"}}},
        "eventlet": {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                                "extra_specs": {"test:sleep_us": "1200000"}}}}


@pytest.mark.parametrize("backend", ["eventlet", "threading"])
def test_a_select_longer_than_the_call_monitor_timeout_is_answered(tmp_path, backend):
    plugins = slow_filter.write_distribution(tmp_path / "plugins")
    d = Daemon(tmp_path, fleet=small_fleet(n=4), pythonpath=plugins, extra=CONFIG,
               backend=backend)
    try:
        d.start()
        api = d.api(timeout=2)              # call_monitor_timeout 2: a heartbeat each 1 s
        t0 = time.monotonic()
        sel = api.select_destinations(None, SLOW[backend], confirm="none")
        took = time.monotonic() - t0
        assert took > 4, took               # it did outlast the monitor's timeout
        assert sel[0][0]["host"].startswith("fc")
        assert api.release(None, sel[0][0]["instance_uuid"]) is True
        api.close()
    finally:
        d.close()
