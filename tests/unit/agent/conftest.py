from __future__ import annotations

import pytest
from oslo_config import cfg

import scheduler.agent.host  # noqa: F401  (registers the options)
import scheduler.agent.reporter  # noqa: F401

# The fake kernel trees hold sysfs-like symlink cycles (physfn <-> virtfn*).
collect_ignore = ["trees"]


@pytest.fixture
def conf_override():
    """``set(option, value, group)``; every override is cleared afterwards."""
    done = []

    def set_(name, value, group=None):
        cfg.CONF.set_override(name, value, group)
        done.append((name, group))

    yield set_
    for name, group in done:
        cfg.CONF.clear_override(name, group)


@pytest.fixture(autouse=True)
def no_hypervisor_probe():
    """In-process reports never run this machine's QEMU (tests that detect the
    version point ``qemu_binary`` at a fake one)."""
    cfg.CONF.set_override("detect_hypervisor_version", False, "agent")
    yield
    cfg.CONF.clear_override("detect_hypervisor_version", "agent")
