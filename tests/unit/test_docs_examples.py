"""The compute-API example of the README and of the RPC reference runs as
printed: against a real berth-scheduler service (SchedulerService with the
FilterScheduler, on SQLite) over the in-process transport, in a fresh
interpreter, with only the configuration file's path changed."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

EXAMPLES = {
    "README": (ROOT / "README.rst", "Calling it from a compute API"),
    "rpc-api": (ROOT / "doc" / "source" / "reference" / "rpc-api.rst",
                "A compute API in ten lines"),
}

HARNESS = '''
import sys
from oslo_config import cfg
from db import migration
from db.api import Database
from scheduler import rpc
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService

CONF_FILE, DB_FILE, EXAMPLE = sys.argv[1], sys.argv[2], sys.argv[3]
cfg.CONF(["--config-file", CONF_FILE], project="berth")
db = Database("sqlite:///" + DB_FILE)
migration.db_sync(db)
transport = rpc.get_transport(cfg.CONF)
service = SchedulerService(cfg.CONF, backend="threading", transport=transport, db=db)
service.start()
with SchedulerAPI(cfg.CONF, transport=transport) as api:
    api.report_compute_node(None, {"host": "h1", "vcpus": 8, "memory_mb": 16384,
                                   "local_gb": 100})
    api.aggregate_create(None, "az1", availability_zone="az1", hosts=["h1"])
    api.report_compute_node(None, {"host": "h2", "vcpus": 8, "memory_mb": 16384,
                                   "local_gb": 100})
try:
    exec(compile(open(EXAMPLE).read(), "example", "exec"), {})
    with SchedulerAPI(cfg.CONF, transport=transport) as api:
        print("held:", [h["host"] for h in api.list_hosts(None) if h["allocations"]])
finally:
    service.stop(5)
    transport.cleanup()
'''


def _example(path: pathlib.Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(f"{heading}\n")
    m = re.search(r"::\n\n((?:    .*\n|   .*\n|\n)+)", text[start:])
    return textwrap.dedent(m.group(1))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_compute_api_example_runs_as_printed(name, tmp_path):
    path, heading = EXAMPLES[name]
    code = _example(path, heading)
    assert "/etc/berth/" in code and len(code.strip().splitlines()) <= 15, code
    conf = tmp_path / "compute-api.conf"
    conf.write_text(f"[DEFAULT]\ntransport_url = kombu+memory:////\n"
                    f"[scheduler]\ntopic = docs_{name.replace('-', '_')}\n")
    example = tmp_path / "example.py"
    example.write_text(re.sub(r"/etc/berth/[\w.-]+\.conf", str(conf), code))
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    done = subprocess.run([sys.executable, str(harness), str(conf),
                           str(tmp_path / "berth.sqlite"), str(example)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    # the instance went to the only host of az1, and the scheduler holds it there
    assert re.fullmatch(r"[0-9a-f-]{36} -> h1", lines[0]), done.stdout
    assert lines[-1] == "held: ['h1']", done.stdout
