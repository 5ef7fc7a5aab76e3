"""The systemd units of etc/berth are valid for systemd and start the programs
the install guide installs, with the configuration it writes."""
from __future__ import annotations

import configparser
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "etc" / "berth").glob("*.service"))


def _scripts() -> set[str]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options.entry_points"]["console_scripts"].strip().splitlines()
    return {line.partition("=")[0].strip() for line in lines}


def test_there_are_units():
    assert {u.name for u in UNITS} >= {"berth-scheduler.service", "berth-agent.service"}


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_the_unit_runs_an_installed_program_on_the_guides_configuration(unit):
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(unit)
    service = parser["Service"]
    for key in ("ExecStart", "ExecStartPre"):
        if key not in service:
            continue
        program, *args = service[key].split()
        assert program.startswith("/opt/berth/bin/"), (key, program)
        assert program.rpartition("/")[2] in _scripts(), program
        assert args[:2] == ["--config-file", "/etc/berth/berth.conf"], args
    assert service["User"] == "berth"


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_systemd_accepts_the_unit(unit, tmp_path):
    """``systemd-analyze verify`` warns about an unknown key or a bad value; the
    programs are replaced by /bin/true (they are not installed here) and the
    user by root (no berth user here)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    text = unit.read_text()
    text = re.sub(r"/opt/berth/bin/[\w-]+", "/bin/true", text)
    text = re.sub(r"^(User|Group)=berth$", r"\1=root", text, flags=re.MULTILINE)
    copy = tmp_path / unit.name
    copy.write_text(text)
    done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_guide_installs_the_units_it_names():
    guide = (ROOT / "doc" / "source" / "install" / "single-host.rst").read_text() + \
        (ROOT / "doc" / "source" / "install" / "multi-host.rst").read_text()
    for unit in UNITS:
        assert f"install -m 0644 etc/berth/{unit.name} /etc/systemd/system/" in guide, unit
