"""The committed etc/berth/berth.conf.sample matches the options the code declares."""
from __future__ import annotations

import difflib
import os

from oslo_config import generator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR_CONF = os.path.join(ROOT, "etc", "berth", "berth-config-generator.conf")
SAMPLE = os.path.join(ROOT, "etc", "berth", "berth.conf.sample")


def test_config_sample_is_current(tmp_path, monkeypatch):
    fresh = tmp_path / "berth.conf.sample"
    # The generator conf names a relative output file; run from the repo root.
    monkeypatch.chdir(ROOT)
    generator.main(["--config-file", GENERATOR_CONF, "--output-file", str(fresh)])
    with open(SAMPLE, encoding="utf-8") as f:
        committed = f.read()
    current = fresh.read_text(encoding="utf-8")
    if committed != current:
        diff = "".join(list(difflib.unified_diff(
            committed.splitlines(True), current.splitlines(True),
            "etc/berth/berth.conf.sample (committed)", "generated now"))[:60])
        raise AssertionError(
            "etc/berth/berth.conf.sample is stale: run 'tox -e genconfig' and commit "
            "the result.\n" + diff)
