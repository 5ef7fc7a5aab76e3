"""scheduler.rpc.check_broker_tls: the handshake the rabbit driver would make,
against a small TLS listener of the test's own (certificates from openssl)."""
from __future__ import annotations

import socket
import ssl
import threading

import pytest
from oslo_config import cfg

from scheduler import rpc
from tests import tls_servers


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    tls_servers.require("openssl")
    return tls_servers.Certificates(str(tmp_path_factory.mktemp("certs")))


class Listener:
    """Accepts connections on 127.0.0.1 and makes a TLS handshake (or none)."""

    def __init__(self, certs=None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.context = None
        if certs is not None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.context.load_cert_chain(certs.server_cert, certs.server_key)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                if self.context is not None:
                    with self.context.wrap_socket(conn, server_side=True):
                        pass
                else:
                    conn.recv(1024)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def rabbit_tls():
    conf = cfg.CONF
    conf([], project="berth")
    rpc.check_broker_tls(conf, "rabbit://guest:guest@localhost:1/")    # registers the group

    def configure(port: int, ca: str, host: str = "localhost") -> None:
        conf.set_override("transport_url", f"rabbit://guest:guest@{host}:{port}/")
        conf.set_override("ssl", True, group="oslo_messaging_rabbit")
        conf.set_override("ssl_ca_file", ca, group="oslo_messaging_rabbit")
    yield configure
    conf.clear_override("transport_url")
    for name in ("ssl", "ssl_ca_file"):
        conf.clear_override(name, group="oslo_messaging_rabbit")


def test_the_right_ca_passes_and_a_wrong_one_is_said(certs, rabbit_tls):
    listener = Listener(certs)
    try:
        rabbit_tls(listener.port, certs.ca)
        rpc.check_broker_tls(cfg.CONF)
        rabbit_tls(listener.port, certs.wrong_ca)
        with pytest.raises(rpc.BrokerTLSError) as caught:
            rpc.check_broker_tls(cfg.CONF)
        assert str(caught.value).startswith(f"localhost:{listener.port}: TLS handshake "
                                            "failed: [SSL: CERTIFICATE_VERIFY_FAILED]")
        rabbit_tls(listener.port, certs.ca, host="127.0.0.1")   # not in the certificate
        with pytest.raises(rpc.BrokerTLSError, match="IP address mismatch"):
            rpc.check_broker_tls(cfg.CONF)
    finally:
        listener.close()


def test_a_port_without_tls_is_said_and_a_closed_one_left_to_the_driver(certs, rabbit_tls):
    plain = Listener()
    try:
        rabbit_tls(plain.port, certs.ca)
        with pytest.raises(rpc.BrokerTLSError, match="TLS handshake failed"):
            rpc.check_broker_tls(cfg.CONF, timeout=2)
    finally:
        plain.close()
    rabbit_tls(tls_servers.free_port(), certs.ca)
    rpc.check_broker_tls(cfg.CONF)          # nothing listens: the driver retries
    rabbit_tls(tls_servers.free_port(), "/nonexistent/ca.pem")
    with pytest.raises(rpc.BrokerTLSError, match="ssl_ca_file"):
        rpc.check_broker_tls(cfg.CONF)


def test_without_ssl_nothing_is_checked(rabbit_tls):
    rabbit_tls(1, "/nonexistent/ca.pem")
    cfg.CONF.set_override("ssl", False, group="oslo_messaging_rabbit")
    rpc.check_broker_tls(cfg.CONF)
