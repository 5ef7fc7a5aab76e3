"""The broker recipe of the admin guide's security page, on the real RabbitMQ: a
private vhost with the daemon's user, a compute-API user and an operator user,
permissions exactly as documented, and every attack a compute-API user could try
with a raw AMQP client. Also: the daemon notices when its routes are gone
(/readyz), declares them again and answers without a restart."""
from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid

import amqp
import oslo_messaging
import pytest
import sqlalchemy as sa

from db import models
from tests import services
from tests.functional.daemon import Daemon

SMALL = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    """The documented recipe in a vhost of its own: ``daemon`` runs as the berth
    user; ``nova`` and ``admin`` are (name, URL) of the other two users."""

    def __init__(self, tmp_path) -> None:
        self.vhost = services.RabbitVhost()
        self.berth = self.vhost.add_user("berth", ".*", ".*", ".*")
        self.port = _free_port()
        self.daemon = Daemon(tmp_path, backend="threading", transport_url=self.berth[1],
                             extra="""[scheduler]
admin_topic = {admin}
broker_check_interval = 2
[metrics]
enabled = true
port = {port}
status_interval = 0.2
multiprocess_dir = {metrics}
""")
        self.exchange, self.topic = self.daemon.exchange, self.daemon.topic
        self.admin_topic = f"{self.topic}_admin"
        self.admin_exchange = f"admin_{self.exchange}"
        self.daemon.config.write_text(self.daemon.config.read_text().format(
            admin=self.admin_topic, port=self.port, metrics=tmp_path / "metrics"))
        ex, adm = self.exchange, self.admin_exchange
        # The compute API: its own reply queues, publish to the compute exchange only.
        self.nova = self.vhost.add_user(
            "nova_api", r"^reply_{user}\.", f"^{ex}$", r"^reply_{user}\.",
            topic=(ex, rf"^{self.topic}(\..+)?$", ".*"))
        # Operators and agents: their own reply queues, both exchanges.
        self.admin = self.vhost.add_user(
            "operator", r"^reply_{user}\.", f"^({ex}|{adm})$", r"^reply_{user}\.")

    def nova_api(self, timeout: float = 20):
        return self.daemon.api(timeout=timeout, url=self.nova[1])

    def admin_api(self, timeout: float = 20):
        return self.daemon.api(timeout=timeout, url=self.admin[1], topic=self.admin_topic,
                               exchange=self.admin_exchange)

    def connect(self, who: tuple[str, str]) -> amqp.Connection:
        """A raw AMQP connection as ``who``."""
        user, url = who
        password = url.split(":", 2)[2].split("@", 1)[0]
        host = url.split("@", 1)[1].split("/", 1)[0]
        conn = amqp.Connection(host, userid=user, password=password,
                               virtual_host=self.vhost.name)
        conn.connect()
        return conn

    def readyz(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                        timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def aggregates(self) -> int:
        with self.daemon.db.reader_connection() as conn:
            return conn.execute(sa.select(sa.func.count(models.Aggregate.id))).scalar()

    def close(self) -> None:
        try:
            self.daemon.close()
        finally:
            self.vhost.remove()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    d = Deployment(tmp_path_factory.mktemp("broker"))
    try:
        d.daemon.start()
        yield d
    finally:
        d.close()


def _refused(conn: amqp.Connection, action) -> str:
    """Run ``action(channel)`` on a fresh channel; the broker's refusal text, or ""
    when it was allowed."""
    chan = conn.channel()
    try:
        action(chan)
        # A publish is refused asynchronously: a round trip makes it show.
        chan.basic_qos(0, 1, False)
    except amqp.exceptions.AMQPError as e:
        return str(e)
    finally:
        try:
            chan.close()
        except Exception:   # noqa: S110 (the broker closed it)
            pass
    return ""


def _call(method: str, args: dict, reply_q: str, roles=("admin",)) -> amqp.Message:
    """An oslo.messaging RPC call as it travels, for a raw client to publish."""
    msg = {"method": method, "args": args, "version": "1.0",
           "_msg_id": uuid.uuid4().hex, "_reply_q": reply_q, "_timeout": None,
           "_unique_id": uuid.uuid4().hex, "_context_roles": list(roles),
           "_context_project_id": "p1", "_context_request_id": "req-evil"}
    return amqp.Message(json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(msg)}),
                        content_type="application/json", content_encoding="utf-8")


def _replies(chan, queue: str, wait: float) -> list:
    got: list = []
    chan.basic_consume(queue, callback=got.append, no_ack=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not got:
        try:
            chan.connection.drain_events(timeout=0.2)
        except TimeoutError:
            pass
    return got


# -- what the compute API may do ---------------------------------------------------------

def test_the_compute_api_user_places_and_frees_instances(deployment):
    api = deployment.nova_api()
    uuid1 = str(uuid.uuid4())
    placed = api.select_destinations(None, SMALL, instance_uuids=[uuid1])
    assert placed[0][0]["host"]
    assert api.release(None, uuid1) is True
    reply_q = api.transport._driver._reply_q
    assert reply_q.startswith(f"reply_{deployment.nova[0]}.")


def test_the_operator_user_calls_the_admin_topic(deployment):
    admin = deployment.admin_api()
    assert {h["host"] for h in admin.list_hosts(None)} >= {"fc00", "fc01"}


def test_admin_calls_by_the_compute_api_user_are_refused_by_the_broker(deployment):
    api = deployment.daemon.api(timeout=10, url=deployment.nova[1],
                                topic=deployment.admin_topic,
                                exchange=deployment.admin_exchange)
    with pytest.raises(Exception) as caught:
        api.list_hosts(None)
    assert "ACCESS_REFUSED" in str(caught.value)
    assert deployment.admin_exchange in str(caught.value)


# -- attacks with a raw AMQP client --------------------------------------------------------

def _bind_and_publish(deployment, who: tuple[str, str]) -> tuple[str, list]:
    """The attack: declare an exchange under one's reply prefix, bind the control
    exchange to it, publish admin calls through it with the admin topic's routing
    key. Returns (the broker's refusal or "", the replies received)."""
    user = who[0]
    conn = deployment.connect(who)
    try:
        chan = conn.channel()
        evil, reply_q = f"reply_{user}.evil", f"reply_{user}.{uuid.uuid4().hex}"
        chan.queue_declare(reply_q, auto_delete=True)
        chan.exchange_declare(evil, "topic", durable=False, auto_delete=True)
        chan.exchange_bind(deployment.exchange, evil, "#")
        # Into the admin exchange: refused.
        assert "ACCESS_REFUSED" in _refused(
            conn, lambda c: c.exchange_bind(deployment.admin_exchange, evil, "#"))

        def publish(c) -> None:
            for method, args in (("aggregate_create", {"name": "evil"}), ("list_hosts", {})):
                c.basic_publish(_call(method, args, reply_q), exchange=evil,
                                routing_key=deployment.admin_topic)
        refusal = _refused(conn, publish)
        return refusal, _replies(chan, reply_q, wait=3)
    finally:
        conn.close()


def test_an_exchange_of_ones_own_cannot_carry_admin_calls(deployment):
    """Under the recipe the compute API user may not publish to an exchange it
    declares, and the admin topic is not on the control exchange anyway."""
    before = deployment.aggregates()
    refusal, replies = _bind_and_publish(deployment, deployment.nova)
    assert "ACCESS_REFUSED" in refusal and replies == []
    assert deployment.aggregates() == before


def test_the_old_recipes_exchange_binding_attack_reaches_no_admin_call(deployment):
    """A user with the permissions an earlier recipe gave (configure and write on
    ``reply_*`` and the control exchange): its exchange bound into the control
    exchange carries the admin topic's routing key nowhere, as the admin topic
    lives on an exchange of its own."""
    d = deployment
    old = d.vhost.add_user("old_recipe", f"^(reply_|{d.exchange}).*",
                           f"^(reply_|{d.exchange}).*", "^reply_.*",
                           topic=(d.exchange, rf"^({d.topic}|reply_.*)(\..*)?$", ".*"))
    before = d.aggregates()
    refusal, replies = _bind_and_publish(d, old)
    assert refusal == "" and replies == []
    assert d.aggregates() == before
    assert d.admin_api().aggregate_list(None) == []


@pytest.mark.parametrize("attack", [
    "delete control exchange", "delete admin exchange", "declare control exchange",
    "declare an exchange outside the prefix", "publish to the admin exchange",
    "publish to the default exchange", "bind own queue to the admin exchange",
    "bind own queue to the control exchange", "consume the admin queue",
    "consume the compute queue", "purge the compute queue", "delete the compute queue",
    "declare a queue outside the prefix",
])
def test_the_compute_api_user_is_refused(deployment, attack):
    d = deployment
    user = d.nova[0]
    own = f"reply_{user}.{uuid.uuid4().hex}"
    actions = {
        "delete control exchange": lambda c: c.exchange_delete(d.exchange),
        "delete admin exchange": lambda c: c.exchange_delete(d.admin_exchange),
        "declare control exchange": lambda c: c.exchange_declare(
            d.exchange, "topic", durable=False, auto_delete=True),
        "declare an exchange outside the prefix": lambda c: c.exchange_declare(
            "reply_evil", "topic", durable=False, auto_delete=True),
        "publish to the admin exchange": lambda c: c.basic_publish(
            _call("list_hosts", {}, own), exchange=d.admin_exchange,
            routing_key=d.admin_topic),
        "publish to the default exchange": lambda c: c.basic_publish(
            _call("list_hosts", {}, own), exchange="", routing_key=d.admin_topic),
        "bind own queue to the admin exchange": lambda c: (
            c.queue_declare(own, auto_delete=True), c.queue_bind(own, d.admin_exchange, "#")),
        "bind own queue to the control exchange": lambda c: (
            c.queue_declare(own, auto_delete=True), c.queue_bind(own, d.exchange, "#")),
        "consume the admin queue": lambda c: c.basic_consume(d.admin_topic, callback=print),
        "consume the compute queue": lambda c: c.basic_consume(d.topic, callback=print),
        "purge the compute queue": lambda c: c.queue_purge(d.topic),
        "delete the compute queue": lambda c: c.queue_delete(d.topic),
        "declare a queue outside the prefix": lambda c: c.queue_declare(
            "reply_0123456789abcdef", auto_delete=True),
    }
    conn = d.connect(d.nova)
    try:
        assert "ACCESS_REFUSED" in _refused(conn, actions[attack])
    finally:
        conn.close()
    assert d.nova_api().ping()["version"]       # and the daemon still answers


@pytest.mark.parametrize("attack", ["consume", "purge", "delete", "bind"])
def test_another_users_reply_queue_is_out_of_reach(deployment, attack):
    admin = deployment.admin_api()
    assert admin.show_host(None, "fc00")["host"] == "fc00"
    victim = admin.transport._driver._reply_q
    assert victim.startswith(f"reply_{deployment.admin[0]}.")
    actions = {
        "consume": lambda c: c.basic_consume(victim, callback=print),
        "purge": lambda c: c.queue_purge(victim),
        "delete": lambda c: c.queue_delete(victim),
        "bind": lambda c: c.queue_bind(victim, deployment.exchange, deployment.topic),
    }
    conn = deployment.connect(deployment.nova)
    try:
        assert "ACCESS_REFUSED" in _refused(conn, actions[attack])
    finally:
        conn.close()
    assert admin.show_host(None, "fc01")["host"] == "fc01"   # its replies still arrive


def test_a_reply_is_never_sent_to_a_queue_that_is_not_a_reply_queue(deployment):
    """A call naming the admin queue as its reply queue: the daemon's reply (sent
    through the default exchange, which reaches every queue) is not sent."""
    conn = deployment.connect(deployment.nova)
    try:
        chan = conn.channel()
        chan.basic_publish(_call("ping", {}, deployment.admin_topic),
                           exchange=deployment.exchange, routing_key=deployment.topic)
        chan.basic_qos(0, 1, False)
    finally:
        conn.close()
    deadline = time.monotonic() + 10
    while "Not replying to" not in deployment.daemon.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, deployment.daemon.log_tail()
        time.sleep(0.2)
    assert deployment.admin_api().ping()["version"]


# -- the daemon's routes gone ------------------------------------------------------------

def _routes_lost_and_restored(d, lose, noticed: str | None) -> None:
    """``lose`` a route with a raw connection as the daemon's own user; the
    daemon repairs it (``noticed``: the log line that says so, else it may
    be the messaging driver's own reconnection) and answers: selects and the
    releases of what they placed, each from a new client."""
    def seen() -> int:
        return d.daemon.log.read_text(errors="replace").count(noticed) if noticed else 0
    before = seen()
    conn = d.connect(d.berth)
    try:
        lose(conn.channel())
    finally:
        conn.close()
    deadline = time.monotonic() + 30
    while noticed and seen() == before:
        assert time.monotonic() < deadline, d.daemon.log_tail()
        time.sleep(0.05)
    while d.readyz() != 200:
        assert time.monotonic() < deadline, d.daemon.log_tail()
        time.sleep(0.05)
    while True:     # a client told the exchange is missing tries again later
        try:
            d.nova_api().ping()
            break
        except oslo_messaging.MessageDeliveryFailure:
            assert time.monotonic() < deadline, d.daemon.log_tail()
            time.sleep(0.2)
    for _ in range(3):
        uuid1 = str(uuid.uuid4())
        with d.nova_api() as placing, d.nova_api() as releasing:
            assert placing.select_destinations(None, SMALL, instance_uuids=[uuid1])[0][0]
            assert releasing.release(None, uuid1) is True


def test_a_deleted_exchange_is_declared_again_and_nothing_is_lost(deployment):
    """The exchange (and with it every binding) deleted: the daemon declares
    the exchange and binds its queues again in place, its consumers kept
    (before, it started new servers and retired the old ones, and a release
    sent meanwhile was lost about one time in three)."""
    d = deployment
    _routes_lost_and_restored(d, lambda chan: chan.exchange_delete(d.exchange),
                              "the consumers kept")


def test_a_deleted_queue_is_declared_again_and_nothing_is_lost(deployment):
    """The shared queue deleted: the broker cancels its consumers, the
    messaging driver reconnects and declares it again (or the route check
    starts new servers if it does not)."""
    d = deployment
    _routes_lost_and_restored(d, lambda chan: chan.queue_delete(d.topic),
                              "Reconnected to AMQP server")
