"""The driver's confinable topology, without a broker: reply-queue names per
user, publishing to an exchange nobody declared, replies only to reply queues,
the admin exchange's name. (tests/functional/test_broker_confinement.py runs the
recipe and its attacks on the real RabbitMQ.)"""
from __future__ import annotations

import time
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg

from scheduler import broker, rpc
from scheduler.rpcapi import SchedulerAPI


def test_reply_queues_are_named_after_the_broker_user():
    url = oslo_messaging.TransportURL.parse(cfg.CONF, "rabbit://nova-api:pw@h:5672/berth")
    assert broker.reply_prefix(url) == "reply_nova-api."
    anonymous = oslo_messaging.TransportURL.parse(cfg.CONF, "kombu+memory:////")
    assert broker.reply_prefix(anonymous) == "reply_"


def test_the_admin_exchange_is_not_matched_by_the_control_exchanges_prefix():
    cfg.CONF.set_override("control_exchange", "berth")
    try:
        assert broker.admin_exchange(cfg.CONF) == "admin_berth"
        assert not broker.admin_exchange(cfg.CONF).startswith("berth")
        assert broker.exchange_of(cfg.CONF, admin=True) is None      # no admin topic
        cfg.CONF.set_override("admin_topic", "scheduler_admin", group="scheduler")
        assert broker.exchange_of(cfg.CONF, admin=True) == "admin_berth"
        assert broker.exchange_of(cfg.CONF, admin=False) is None
    finally:
        cfg.CONF.clear_override("control_exchange")
        cfg.CONF.clear_override("admin_topic", group="scheduler")


def test_a_call_to_an_exchange_nobody_declared_fails_at_once():
    """The client no longer declares the exchange (which needs the right that also
    deletes it): with no daemon, the call says so instead of timing out."""
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    try:
        assert isinstance(transport._driver, broker.BerthRabbitDriver)
        api = SchedulerAPI(cfg.CONF, transport=transport,
                           topic="nobody_" + uuid.uuid4().hex[:8],
                           exchange="nobody_" + uuid.uuid4().hex[:8], timeout=30)
        t0 = time.monotonic()
        with pytest.raises(oslo_messaging.MessageDeliveryFailure, match="does not exist"):
            api.ping()
        assert time.monotonic() - t0 < 10
    finally:
        transport.cleanup()


def test_replies_go_to_reply_queues_only(caplog):
    sent = []

    class Conn(broker.BerthConnection):
        def __init__(self):          # no broker: only direct_send's check is run
            pass

    original = broker.impl_rabbit.Connection.direct_send
    broker.impl_rabbit.Connection.direct_send = lambda self, msg_id, msg: sent.append(msg_id)
    try:
        conn = Conn()
        conn.direct_send("scheduler_admin", {"result": 1})
        conn.direct_send("reply_nova-api.abc", {"result": 1})
    finally:
        broker.impl_rabbit.Connection.direct_send = original
    assert sent == ["reply_nova-api.abc"]
    assert "Not replying to 'scheduler_admin'" in caplog.text


class _Driver:
    """A driver whose routes are broken as told, and repaired as told."""

    def __init__(self, problems, restores: bool):
        self.problems = list(problems)
        self.restores = restores
        self.restored = 0

    def check_routes(self, routes, timeout):
        return list(self.problems)

    def restore_bindings(self, routes):
        self.restored += 1
        if self.restores:
            self.problems = []


def _check(problems, restores: bool):
    from oslo_config import cfg

    from scheduler import broker

    redeclared = []
    check = broker.RouteCheck(cfg.CONF, None, lambda: [("x", "t", "t")],
                              lambda: redeclared.append(1))
    check.driver = _Driver(problems, restores)
    return check, check.check_once(), redeclared


def test_a_lost_exchange_is_declared_again_in_place():
    """Exchanges and bindings gone, queues and consumers there: they are
    declared again in place; no new servers (whose swap lost a message)."""
    check, status, redeclared = _check(["exchange 'x' is missing"], restores=True)
    assert status == "ok" and check.driver.restored == 1 and redeclared == []


def test_a_lost_queue_starts_new_servers_and_is_not_ready_meanwhile():
    check, status, redeclared = _check(["queue 't' is missing"], restores=True)
    assert check.driver.restored == 0 and redeclared == [1]
    assert status == "queue 't' is missing"         # /readyz: not ready until it works


def test_bindings_that_cannot_be_restored_start_new_servers():
    check, status, redeclared = _check(
        ["routing key 't' of exchange 'x' reaches no queue (NO_ROUTE)"], restores=False)
    assert check.driver.restored == 1 and redeclared == [1] and status != "ok"
