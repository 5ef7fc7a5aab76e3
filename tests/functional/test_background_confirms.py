"""Confirms sent in the background (the client library's ``confirm="auto"``) on
the real daemon, RabbitMQ and MariaDB: a confirm that gets no answer is sent
again until it is answered; one that cannot be answered before its claim ends
is given back and reported; a client that dies before its confirm leaves a
claim the reaper gives back after claim_ttl."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from scheduler import exception
from tests.functional.daemon import ROOT, Daemon, small_fleet
from tests.functional.test_pending_claims import wait_for

ONE = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5}}
EXTRA = """[scheduler]
claim_ttl = {ttl}
reaper_interval = 0.5
"""


def stall(d: Daemon, sig: int) -> None:
    """SIGSTOP / SIGCONT the daemon and its workers: it takes messages from
    the broker no more, or again."""
    procs = [psutil.Process(d.proc.pid)] + psutil.Process(d.proc.pid).children()
    for p in procs:
        p.send_signal(sig)


def test_a_confirm_that_gets_no_answer_is_sent_again_until_answered(tmp_path,
                                                                    scheduler_options):
    d = Daemon(tmp_path, fleet=small_fleet(n=4), extra=EXTRA.format(ttl=60))
    try:
        d.start()
        scheduler_options(confirm_batch_delay=0.5)
        api = d.api(timeout=1)
        placed = [s[0]["instance_uuid"] for s in api.select_destinations(None, ONE)]
        stall(d, signal.SIGSTOP)        # before the confirm goes (0.5 s later)
        try:
            time.sleep(3.5)             # the confirm times out (1 s), and again
        finally:
            stall(d, signal.SIGCONT)
        api.wait_confirmed(placed, timeout=30)
        assert api._confirmer.calls >= 2
        assert set(d.allocations()) == set(placed) and not d.pending()
        d.assert_consistent()
        api.close()
    finally:
        d.close()


def test_a_confirm_unanswered_until_its_claim_ends_is_given_back(tmp_path,
                                                                 scheduler_options, caplog):
    """claim_ttl 6 s, confirm_margin 3 s: the client gives up 3 s after its
    select, releases the claim (or, with no answer, leaves it to the reaper),
    logs, reports, and raises ClaimExpired from wait_confirmed. Nothing is held
    at the end, whichever of the stale confirm, the release and the reaper the
    daemon serves first once it runs again."""
    d = Daemon(tmp_path, fleet=small_fleet(n=4), extra=EXTRA.format(ttl=6))
    try:
        d.start()
        scheduler_options(claim_ttl=6, confirm_margin=3.0, confirm_batch_delay=0.2)
        lost = []
        api = d.api(timeout=1)
        api._on_claim_lost = lambda uuids, why: lost.append((uuids, why))
        placed = [s[0]["instance_uuid"] for s in api.select_destinations(None, ONE)]
        stall(d, signal.SIGSTOP)
        try:
            with pytest.raises(exception.ClaimExpired):
                api.wait_confirmed(placed, timeout=30)
        finally:
            stall(d, signal.SIGCONT)
        assert lost and lost[0][0] == placed and "before the end of its claim" in lost[0][1]
        assert "is lost" in caplog.text
        wait_for(lambda: not d.allocations(), 30, "the claim to be given back")
        d.assert_consistent()
        api.close()
    finally:
        d.close()


CLIENT = textwrap.dedent("""
    import json, os, sys
    from oslo_config import cfg
    from scheduler.rpcapi import SchedulerAPI
    cfg.CONF([], project="berth", default_config_files=[])
    cfg.CONF.set_override("transport_url", sys.argv[1])
    cfg.CONF.set_override("control_exchange", sys.argv[2])
    cfg.CONF.set_override("confirm_batch_delay", 60.0, group="scheduler")
    api = SchedulerAPI(cfg.CONF, topic=sys.argv[3], timeout=10)
    # as the daemon declares its exchange (read when connections open)
    cfg.CONF.set_override("amqp_auto_delete", True, group="oslo_messaging_rabbit")
    sel = api.select_destinations(None, {"flavor": {"vcpus": 1, "memory_mb": 1024,
                                                    "root_gb": 5}})
    print(json.dumps(sel[0][0]["instance_uuid"]), flush=True)
    os._exit(0)                 # dies before its confirm is sent
""")


def test_a_client_that_dies_before_its_confirm_costs_nothing_after_claim_ttl(tmp_path):
    d = Daemon(tmp_path, fleet=small_fleet(n=4), extra=EXTRA.format(ttl=3))
    try:
        d.start()
        out = subprocess.run([sys.executable, "-c", CLIENT, d.transport_url, d.exchange,
                              d.topic], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
        assert out.returncode == 0, out.stderr
        placed = json.loads(out.stdout.strip().splitlines()[-1])
        assert d.pending() == {placed}
        wait_for(lambda: placed not in d.allocations(), 30, "the reaper")
        assert d.api(timeout=10).confirm(None, [placed]) == {
            "confirmed": [], "unknown": [placed]}
        d.assert_consistent()
    finally:
        d.close()
