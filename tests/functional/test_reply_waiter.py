"""A client's reply thread (scheduler.broker.ReplyWaiter) and a server's
listener (scheduler.broker.RpcListener) on a real broker: they wait in a few
long reads instead of oslo.messaging's 1, 2, 4, ... ms ones, a quick message
is not held back by the long wait, and stopping does not wait for more than
one read."""
from __future__ import annotations

import re
import time
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg
from oslo_messaging._drivers import amqpdriver

from scheduler import broker, rpc
from tests import services

#: Seconds idle before a stop: the stock reads would be 4.1 s long by then
#: (1 + 2 + ... + 2048 ms), and a stop would wait for the read in progress.
IDLE = 4.5


class _Endpoint:
    target = oslo_messaging.Target(version="1.0")

    def answer_after(self, ctxt, seconds):
        time.sleep(seconds)
        return seconds


@pytest.fixture
def served():
    """(transport, target, server) with a threading RPC server answering
    ``answer_after`` on an exchange of its own (whatever other tests left in
    the configuration, e.g. amqp_auto_delete, no exchange of theirs differs)."""
    services.require_rabbitmq()
    name = f"berth_reply_{uuid.uuid4().hex[:8]}"
    target = oslo_messaging.Target(topic=name, exchange=name)
    transport = rpc.get_transport(cfg.CONF, url=services.RABBIT_URL)
    server = oslo_messaging.get_rpc_server(
        transport, oslo_messaging.Target(topic=name, server="s1", exchange=name),
        [_Endpoint()], executor="threading")
    server.start()
    client_transport = rpc.get_transport(cfg.CONF, url=services.RABBIT_URL)
    try:
        yield client_transport, target, server
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
    transport, target, _server = served
    client = oslo_messaging.get_rpc_client(transport, target, timeout=30)
    ctxt = rpc.new_context()
    assert client.call(ctxt, "answer_after", seconds=0) == 0    # the reply thread exists
    assert isinstance(transport._driver._waiter, broker.ReplyWaiter)
    reads = _counting_reads(transport._driver._waiter)
    assert client.call(ctxt, "answer_after", seconds=0.6) == 0.6
    # 0.6 s in reads of 0.2 s: about four (the stock thread: 1+2+...+512 ms, ten)
    assert len(reads) <= 0.6 / broker.READ_WAIT_SECONDS + 2, reads
    assert min(reads) == broker.READ_WAIT_SECONDS
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        client.call(ctxt, "answer_after", seconds=0.01)
        took.append(time.monotonic() - t0)
    # a reply ends the wait: not rounded up to the read's 0.2 s
    assert sorted(took)[2] < broker.READ_WAIT_SECONDS / 2, took


def test_a_server_waits_for_requests_in_a_few_reads_and_stops_soon(served):
    transport, target, server = served
    client = oslo_messaging.get_rpc_client(transport, target, timeout=30)
    listener = server.listener._poll_style_listener
    assert isinstance(listener, broker.RpcListener)
    reads = _counting_reads(listener)
    client.call(rpc.new_context(), "answer_after", seconds=0)
    time.sleep(0.6)
    # idle for 0.6 s after a request: a few reads of 0.2 s (the stock
    # listener: 1+2+...+512 ms, ten)
    assert 1 <= len(reads) <= 0.6 / broker.READ_WAIT_SECONDS + 3, reads
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        client.call(rpc.new_context(), "answer_after", seconds=0)
        took.append(time.monotonic() - t0)
    assert sorted(took)[2] < broker.READ_WAIT_SECONDS / 2, took   # not held by the wait
    time.sleep(IDLE)
    t0 = time.monotonic()
    server.stop()
    server.wait()
    assert time.monotonic() - t0 < broker.READ_WAIT_SECONDS + 0.8


def test_closing_the_transport_waits_for_one_read_at_most(served):
    transport, target, _server = served
    client = oslo_messaging.get_rpc_client(transport, target, timeout=30)
    client.call(rpc.new_context(), "answer_after", seconds=0)
    thread = transport._driver._waiter._thread
    time.sleep(IDLE)
    t0 = time.monotonic()
    transport.cleanup()
    assert not thread.is_alive()
    assert time.monotonic() - t0 < broker.READ_WAIT_SECONDS + 0.8


def _consumers(adapter) -> set[tuple]:
    """What a listener consumes: (type, queue, exchange, routing key, durable,
    auto-delete, arguments) of each consumer of its connection (a fanout queue's
    name ends in a random uuid: left out)."""
    conn = adapter._poll_style_listener.conn.connection
    return {(c.type, re.sub(r"_[0-9a-f]{32}$", "_<uuid>", c.queue_name), c.exchange_name,
             c.routing_key, c.durable, c.queue_auto_delete,
             repr(sorted((c.queue_arguments or {}).items())))
            for c in conn._consumers}


def test_the_listener_consumes_what_the_stock_listener_consumes(served):
    """``BerthRabbitDriver.listen`` builds its listener itself: it must declare
    what oslo.messaging's own ``listen`` declares (this fails when a new
    oslo.messaging release changes that), and its poll must find the private
    attributes it reads."""
    transport, served_target, _server = served
    driver = transport._driver
    target = oslo_messaging.Target(topic=f"berth_listen_{uuid.uuid4().hex[:8]}", server="s2",
                                   exchange=served_target.exchange)
    stock = amqpdriver.AMQPDriverBase.listen(driver, target, 1, None)
    ours = driver.listen(target, 1, None)
    try:
        assert isinstance(ours._poll_style_listener, broker.RpcListener)
        assert _consumers(ours) == _consumers(stock)
        assert len(_consumers(ours)) == 3      # the topic, the server's topic, the fanout
        assert ours._poll_style_listener.poll(timeout=0.05) == []   # nothing came
    finally:
        for adapter in (stock, ours):
            adapter.cleanup()           # not stop(): it waits for a poll to end
