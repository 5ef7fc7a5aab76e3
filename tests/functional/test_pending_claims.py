"""Pending claims on the real daemon (two workers, RabbitMQ, MariaDB): a
placement nobody confirms is given back after claim_ttl by the one reaper of the
deployment, and another worker takes the reaper's place when it is killed."""
from __future__ import annotations

import os
import signal
import time

import sqlalchemy as sa

from db import leases, models
from tests.functional.daemon import Daemon, small_fleet

ONE = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5}}
EXTRA = """[scheduler]
claim_ttl = 3
reaper_interval = 0.5
"""


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_unconfirmed_placements_are_reaped_by_one_worker(tmp_path):
    d = Daemon(tmp_path, workers=2, fleet=small_fleet(n=4), extra=EXTRA)
    try:
        d.start()
        api = d.api(timeout=10)
        kept = api.select_destinations(None, ONE)[0][0]["instance_uuid"]
        lost = api.select_destinations(None, ONE, confirm="manual")[0][0]["instance_uuid"]
        api.wait_confirmed([kept], timeout=30)      # confirmed in the background
        assert d.pending() == {lost}
        wait_for(lambda: lost not in d.allocations(), 20, "the reaper")
        assert set(d.allocations()) == {kept}
        assert api.confirm(None, [lost]) == {"confirmed": [], "unknown": [lost]}
        d.assert_consistent()
        with d.db.reader_connection() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(
                models.Lease.__table__)).scalar_one() == 1
        holder = leases.holder_of(d.db, "claim-reaper")[0]
        assert "Released " in d.log.read_text() and "claim_ttl" in d.log.read_text()

        # Kill the reaping worker: the other takes the lease once it expires
        # (3 x reaper_interval) and reaps what is pending then.
        pid = int(holder.split(":")[1])
        os.kill(pid, signal.SIGKILL)
        lost2 = api.select_destinations(None, ONE, confirm="manual")[0][0]["instance_uuid"]
        wait_for(lambda: lost2 not in d.allocations(), 30, "the new reaper")
        new_holder = leases.holder_of(d.db, "claim-reaper")[0]
        assert new_holder != holder
        assert set(d.allocations()) == {kept}
        d.assert_consistent()
    finally:
        d.close()
