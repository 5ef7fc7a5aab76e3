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
