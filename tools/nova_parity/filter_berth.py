"""Berth's answers to the filter cases (``filter_cases.py``), in a process of its own
(Berth and Nova both register options named alike on ``oslo_config.cfg.CONF``).

A request Berth refuses as a whole (``InvalidRequest``) answers
``"invalid: <field>"`` for every host. Otherwise each host gets ``None`` (passes)
or the filter's reason, as the scheduler answers over all the case's hosts at
once (``scheduler.testing.answers``: the vector or per-class path), after
``scheduler.testing.check_filter`` has checked that every path (many hosts, one
host, per-host form or reference, class keys, screens) gives that answer; a
disagreement between them answers ``"paths disagree: ..."``. Any other
exception answers ``"error: ..."`` (a Berth bug).
"""
from __future__ import annotations

import datetime
import logging

from oslo_config import cfg

from pci.pools import PciPool, PoolKey
from scheduler import testing
from scheduler.exception import InvalidRequest, PluginError
from scheduler.filters import FILTER_NAMESPACE
from scheduler.request_spec import RequestSpec
from scheduler.weights import WEIGHER_NAMESPACE
from tests.unit.scheduler import fakes, reference

logging.getLogger("scheduler").setLevel(logging.CRITICAL)
# Every module that declares options registers them when imported.
for _name in ("scheduler.filters.compute", "scheduler.filters.num_instances",
              "scheduler.filters.io_ops", "scheduler.filters.isolated_hosts",
              "scheduler.filters.aggregate_image_properties_isolation",
              "scheduler.weights.metrics", "scheduler.filter_scheduler",
              "scheduler.host_manager"):
    __import__(_name)

_CLASSES: dict[str, type] = {}


def _entry_points(namespace: str) -> dict[str, str]:
    """``name -> "module:Class"`` of a namespace, as setup.cfg declares them (this
    environment does not install Berth, so stevedore would find nothing)."""
    import configparser
    import os

    parser = configparser.ConfigParser()
    parser.read(os.path.join(os.path.dirname(__file__), "..", "..", "setup.cfg"))
    lines = parser["options.entry_points"][namespace].strip().splitlines()
    return dict((part.strip() for part in line.split("=", 1)) for line in lines)


def _plugin(namespace: str, name: str):
    if (namespace, name) not in _CLASSES:
        import importlib

        module, cls = _entry_points(namespace)[name].split(":")
        _CLASSES[namespace, name] = getattr(importlib.import_module(module), cls)
    return _CLASSES[namespace, name](cfg.CONF)


def host_state(data: dict, now: datetime.datetime):
    pools = tuple(PciPool(PoolKey(p["vendor_id"], p["product_id"], p["dev_type"],
                                  p["numa_node"], p["physical_network"]), p["count"])
                  for p in data.get("pci", ()))
    return fakes.fake_host(
        data["host"], vcpus=data["vcpus"], memory_mb=data["memory_mb"],
        local_gb=data["local_gb"], vcpus_used=data["vcpus_used"],
        cpu_allocation_ratio=data.get("cpu_allocation_ratio", 1.0),
        memory_mb_used=data["memory_mb_used"], disk_mb_used=data["local_gb_used"] * 1024,
        hypervisor_type=data["hypervisor_type"], hypervisor_version=data["hypervisor_version"],
        cpu_info=data["cpu_info"],
        supported_instances=[tuple(i) for i in data["supported_instances"]],
        stats=dict(data["stats"]), metrics=dict(data["metrics"]), host_ip=data["host_ip"],
        num_io_ops=data["num_io_ops"], num_instances=data["num_instances"],
        failed_builds=data["failed_builds"], disabled=data["disabled"],
        last_heartbeat=now - datetime.timedelta(seconds=data["heartbeat_age"]),
        instances={u: None for u in data["instances"]},
        aggregates=[dict(m) for m in data["aggregates"]], pci_pools=pools)


class _Conf:
    """The case's option values on ``cfg.CONF`` for the ``with`` block."""

    def __init__(self, values: dict) -> None:
        self.values = values

    def __enter__(self):
        for group, opts in self.values.items():
            for name, value in opts.items():
                cfg.CONF.set_override(name, value, group=None if group == "DEFAULT" else group)

    def __exit__(self, *exc):
        for group, opts in self.values.items():
            for name in opts:
                cfg.CONF.clear_override(name, group=None if group == "DEFAULT" else group)


def _group_hosts(case: dict) -> dict[str, int]:
    group = case.get("group")
    if not group:
        return {}
    members = set(group["members"])
    counts = {h["host"]: len(members.intersection(h["instances"])) for h in case["hosts"]}
    return {h: n for h, n in counts.items() if n}


def answer(case: dict) -> list[str | None]:
    """One answer per host of ``case``."""
    n = len(case["hosts"])
    try:
        spec = RequestSpec.from_primitive(case["request"])
    except InvalidRequest as e:
        return [f"invalid: {e.field}"] * n
    now = datetime.datetime.utcnow()
    with _Conf(case.get("conf") or {}):
        try:
            flt = _plugin(FILTER_NAMESPACE, case["filter"])
            hosts = [host_state(h, now) for h in case["hosts"]]
            ctx = fakes.Ctx(now=now, conf=cfg.CONF, group_hosts=_group_hosts(case))
            req = ctx.request(spec, hosts)
            ref = reference.filter_rule(flt) if flt.has_vector and not flt.has_per_host \
                else None
            try:
                testing.check_filter(flt, hosts, [req], reference=ref)
            except testing.ConformanceError as e:
                return [f"paths disagree: {e}"] * n
            return testing.answers(flt, hosts, req)
        except PluginError as e:
            return [f"error: PluginError: {e}"] * n
        except Exception as e:  # a Berth bug: the run reports it
            return [f"error: {type(e).__name__}: {e}"] * n


def answer_batch(cases: list[dict]) -> list[list[str | None]]:
    return [answer(case) for case in cases]


def weigh(case: dict, name: str) -> list[float] | None:
    """Raw weights times the sign of the multiplier (None: weighs all alike)."""
    spec = RequestSpec.from_primitive(case["request"])
    now = datetime.datetime.utcnow()
    with _Conf(case.get("conf") or {}):
        weigher = _plugin(WEIGHER_NAMESPACE, name)
        hosts = [host_state(h, now) for h in case["hosts"]]
        req = fakes.Ctx(now=now, conf=cfg.CONF).request(spec, hosts)
        raw = testing.raw_weights(weigher, hosts, req)
        if raw is None:
            return None
        sign = 1.0 if weigher.base_multiplier() >= 0 else -1.0
        return [sign * w for w in raw]


def weigh_batch(cases: list[dict], names: list[str]) -> list[dict]:
    return [{name: weigh(case, name) for name in names} for case in cases]
