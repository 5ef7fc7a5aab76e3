"""A client's reply thread (scheduler.broker.ReplyWaiter) and a server's
listener (scheduler.broker.RpcListener) on a real broker: they wait in a few
long reads instead of oslo.messaging's 1, 2, 4, ... ms ones, a quick message
is not held back by the long wait, and stopping does not wait for more than
one read."""
from __future__ import annotations

import time
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg

from scheduler import broker, rpc
from tests import services


class _Endpoint:
    target = oslo_messaging.Target(version="1.0")

    def answer_after(self, ctxt, seconds):
        time.sleep(seconds)
        return seconds


@pytest.fixture
def served():
    """(transport, topic, server) with a threading RPC server answering
    ``answer_after``."""
    services.require_rabbitmq()
    topic = f"berth_reply_{uuid.uuid4().hex[:8]}"
    transport = rpc.get_transport(cfg.CONF, url=services.RABBIT_URL)
    server = oslo_messaging.get_rpc_server(
        transport, oslo_messaging.Target(topic=topic, server="s1"), [_Endpoint()],
        executor="threading")
    server.start()
    client_transport = rpc.get_transport(cfg.CONF, url=services.RABBIT_URL)
    try:
        yield client_transport, topic, server
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
        client_transport.cleanup()


def _counting_reads(reader) -> list[float]:
    """Wrap the reads of a reply thread or a listener: each read's timeout is
    appended."""
    reads: list[float] = []
    consume = reader.conn.consume

    def counted(timeout=None):
        reads.append(timeout)
        return consume(timeout=timeout)
    reader.conn.consume = counted
    return reads


def test_a_slow_reply_costs_a_few_reads_and_a_quick_one_is_not_held(served):
    transport, topic, _server = served
    client = oslo_messaging.get_rpc_client(transport, oslo_messaging.Target(topic=topic),
                                           timeout=30)
    ctxt = rpc.new_context()
    assert client.call(ctxt, "answer_after", seconds=0) == 0    # the reply thread exists
    assert isinstance(transport._driver._waiter, broker.ReplyWaiter)
    reads = _counting_reads(transport._driver._waiter)
    assert client.call(ctxt, "answer_after", seconds=0.6) == 0.6
    # 0.6 s in reads of 0.2 s: about four (the stock thread: 1+2+...+512 ms, ten)
    assert len(reads) <= 0.6 / broker.REPLY_POLL_SECONDS + 2, reads
    assert min(reads) == broker.REPLY_POLL_SECONDS
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        client.call(ctxt, "answer_after", seconds=0.01)
        took.append(time.monotonic() - t0)
    # a reply ends the wait: not rounded up to the read's 0.2 s
    assert sorted(took)[2] < broker.REPLY_POLL_SECONDS / 2, took


def test_a_server_waits_for_requests_in_a_few_reads_and_stops_soon(served):
    transport, topic, server = served
    client = oslo_messaging.get_rpc_client(transport, oslo_messaging.Target(topic=topic),
                                           timeout=30)
    listener = server.listener._poll_style_listener
    assert isinstance(listener, broker.RpcListener)
    reads = _counting_reads(listener)
    client.call(rpc.new_context(), "answer_after", seconds=0)
    time.sleep(0.6)
    # idle for 0.6 s after a request: a few reads of 0.2 s (the stock
    # listener: 1+2+...+512 ms, ten)
    assert 1 <= len(reads) <= 0.6 / broker.REPLY_POLL_SECONDS + 3, reads
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        client.call(rpc.new_context(), "answer_after", seconds=0)
        took.append(time.monotonic() - t0)
    assert sorted(took)[2] < broker.REPLY_POLL_SECONDS / 2, took   # not held by the wait
    t0 = time.monotonic()
    server.stop()
    server.wait()
    assert time.monotonic() - t0 < broker.REPLY_POLL_SECONDS + 1.0


def test_closing_the_transport_waits_for_one_read_at_most(served):
    transport, topic, _server = served
    client = oslo_messaging.get_rpc_client(transport, oslo_messaging.Target(topic=topic),
                                           timeout=30)
    client.call(rpc.new_context(), "answer_after", seconds=0)
    thread = transport._driver._waiter._thread
    t0 = time.monotonic()
    transport.cleanup()
    assert not thread.is_alive()
    assert time.monotonic() - t0 < broker.REPLY_POLL_SECONDS + 1.0
