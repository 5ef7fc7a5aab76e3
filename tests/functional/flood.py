"""One flooding client process: ``THREADS`` threads that send allowed-size
requests (dry-run select_destinations of several instances, and releases of
unknown instances) to a daemon as fast as its answers come, for ``SECONDS``.

``python -m tests.functional.flood URL EXCHANGE TOPIC SECONDS THREADS`` prints
one JSON object: how many calls ended how (``ok``, ``ServiceUnavailable``,
``timeout`` ...).
"""
from __future__ import annotations

import collections
import json
import sys
import threading
import time
import uuid

import oslo_messaging
from oslo_config import cfg

from scheduler import exception, rpc
from scheduler.rpcapi import SchedulerAPI

SPEC = {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}, "num_instances": 20}


def main(url: str, exchange: str, topic: str, seconds: float, threads: int) -> dict:
    conf = cfg.CONF
    conf([], project="berth")
    conf.set_override("control_exchange", exchange)
    # a flood does not wait when told the scheduler is busy (the library would)
    conf.set_override("busy_retry_timeout", 0, group="scheduler")
    transport = rpc.get_transport(conf, url=url)
    # as the daemon declared its exchange (read when connections open)
    conf.set_override("amqp_auto_delete", True, group="oslo_messaging_rabbit")
    api = SchedulerAPI(conf, transport=transport, topic=topic, timeout=30)
    outcomes: collections.Counter = collections.Counter()
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def flood(n: int) -> None:
        while time.monotonic() < stop:
            try:
                if n % 4:
                    api.select_destinations(None, SPEC, dry_run=True)
                else:
                    api.release(None, str(uuid.uuid4()))
                outcome = "ok"
            except exception.BerthError as e:
                outcome = type(e).__name__
            except oslo_messaging.MessagingTimeout:
                outcome = "timeout"
            except Exception as e:      # counted; the flood goes on
                outcome = type(e).__name__
            with lock:
                outcomes[outcome] += 1
            if outcome == "ServiceUnavailable":
                time.sleep(0.05)        # a client that backs off a little, as told

    workers = [threading.Thread(target=flood, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    transport.cleanup()
    return dict(outcomes)


if __name__ == "__main__":
    url, exchange, topic, seconds, threads = sys.argv[1:6]
    print(json.dumps(main(url, exchange, topic, float(seconds), int(threads))))
