"""``berth status``: the daemon's /readyz report as a table, exit codes, and the
ping fallback when the monitoring port is off (a local HTTP server stands in
for the daemon)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduler.cmd import client
from tests.unit.scheduler.cmd.test_client import FakeAPI, berth  # noqa: F401 (fixture)


def _worker(index, ready=True, **checks):
    return {"worker": index, "pid": 4000 + index, "ready": ready,
            "checks": {"rpc": "ok", "cache": "ok", "database": "ok", "broker": "ok",
                       **checks},
            "release": "0.1.0", "api_version": "1.0", "backend": "eventlet", "hosts": 8,
            "uptime_s": 3725.0, "alive": True}


@pytest.fixture
def readyz():
    """An HTTP server answering /readyz with ``readyz.report`` (503 if not ready)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(server.report).encode()
            self.send_response(200 if server.report["ready"] else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.report = {"ready": True, "workers": [_worker(0), _worker(1)]}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


def test_every_worker_ready(berth, readyz):  # noqa: F811
    rc, out, _ = berth("status", "--url", readyz.url)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"berth-scheduler at {readyz.url}: ready (2/2 workers ready)"
    assert lines[1].split() == ["WORKER", "PID", "READY", "RELEASE", "API", "BACKEND",
                                "HOSTS", "UPTIME", "CHECKS"]
    assert [line.split() for line in lines[3:]] == [
        ["0", "4000", "yes", "0.1.0", "1.0", "eventlet", "8", "1h", "all", "ok"],
        ["1", "4001", "yes", "0.1.0", "1.0", "eventlet", "8", "1h", "all", "ok"]]


def test_a_worker_not_ready_exits_2_and_says_why(berth, readyz):  # noqa: F811
    readyz.report = {"ready": False, "workers": [
        _worker(0), _worker(1, ready=False, database="failed (gone)")]}
    rc, out, _ = berth("status", "--url", readyz.url + "/")
    assert rc == 2
    assert "NOT READY (1/2 workers ready)" in out
    assert out.splitlines()[-1].endswith("database: failed (gone)")
    rc, out, _ = berth("status", "--url", readyz.url, "--json")
    assert rc == 2 and json.loads(out) == readyz.report


def test_no_monitoring_port_is_one_line(berth):  # noqa: F811
    import socket

    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = berth("--timeout", "2", "status", "--url", f"http://127.0.0.1:{port}")
    assert rc == 2
    assert err.startswith(f"berth: cannot reach the monitoring port at "
                          f"http://127.0.0.1:{port}")


def test_metrics_off_falls_back_to_ping(berth):  # noqa: F811
    rc, out, _ = berth("status")
    assert rc == 0
    assert out.startswith("[metrics] enabled is false")
    assert out.splitlines()[-1].split()[:2] == ["0", "1"]


def test_url_from_the_config(berth, readyz):  # noqa: F811
    port = readyz.url.rsplit(":", 1)[1]
    conf = berth.tmp / "berth.conf"
    conf.write_text(f"[metrics]\nenabled = true\nbind_host = 0.0.0.0\nport = {port}\n")
    rc, out, _ = berth("--config-file", conf, "status")
    assert rc == 0 and out.startswith(f"berth-scheduler at http://127.0.0.1:{port}: ready")
    assert client.format_status({"ready": False, "workers": []}, "x") \
        .startswith("berth-scheduler at x: NOT READY (0/0 workers ready)")
