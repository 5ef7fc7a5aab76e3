"""Nova 34's answers to the filter cases (``filter_cases.py``), in a process of its
own (Berth and Nova both register options named alike on ``cfg.CONF``).

Hosts are built as Nova's scheduler builds them: a ``ComputeNode`` object (its
``cpu_info`` and ``metrics`` JSON text, its ``supported_hv_specs`` canonicalised
by ``HVSpec``, ``stats`` holding the counters the compute reports) given to
``HostState.update`` with the service row, the aggregates and the instances.
The request is a ``RequestSpec`` object (scheduler hints as lists of strings,
the image through ``ImageMeta.from_dict``). Each host answers ``"pass"``,
``"fail"``, or ``"raise: <exception>"``; a request Nova cannot even build
answers ``"raise: ..."`` for every host.
"""
from __future__ import annotations

import datetime
import json
import logging
import uuid as uuidlib
import warnings

warnings.simplefilter("ignore")

import nova.conf  # noqa: E402,F401
from nova import objects  # noqa: E402
from nova.scheduler import filters as nova_filters  # noqa: E402
from nova.scheduler import host_manager  # noqa: E402
from nova.scheduler import weights as nova_weights  # noqa: E402
from oslo_config import cfg  # noqa: E402

objects.register_all()
logging.getLogger("nova").setLevel(logging.CRITICAL)
logging.getLogger("oslo_versionedobjects").setLevel(logging.CRITICAL)

CONF = cfg.CONF
CELL = str(uuidlib.UUID(int=1))
_FILTERS = {cls.__name__: cls for cls in nova_filters.HostFilterHandler().get_all_classes()}
_WEIGHERS = {cls.__name__: cls for cls in nova_weights.HostWeightHandler().get_all_classes()}
_STAMP = "2024-01-01T00:00:00Z"


def compute_node(data: dict) -> objects.ComputeNode:
    stats = {k: str(v) for k, v in data["stats"].items()}
    stats.update(num_instances=str(data["num_instances"]), io_workload=str(data["num_io_ops"]),
                 failed_builds=str(data["failed_builds"]))
    pools = [objects.PciDevicePool(product_id=p["product_id"], vendor_id=p["vendor_id"],
                                   numa_node=p["numa_node"], count=p["count"],
                                   tags=({"dev_type": p["dev_type"]} |
                                         ({"physical_network": p["physical_network"]}
                                          if p["physical_network"] else {})))
             for p in data.get("pci", ())]
    return objects.ComputeNode(
        id=1, uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, data["host"])), host=data["host"],
        hypervisor_hostname=data["host"], vcpus=data["vcpus"], memory_mb=data["memory_mb"],
        local_gb=data["local_gb"], vcpus_used=data["vcpus_used"],
        memory_mb_used=data["memory_mb_used"], local_gb_used=data["local_gb_used"],
        free_ram_mb=data["memory_mb"] - data["memory_mb_used"],
        free_disk_gb=data["local_gb"] - data["local_gb_used"], disk_available_least=None,
        hypervisor_type=data["hypervisor_type"], hypervisor_version=data["hypervisor_version"],
        cpu_info=json.dumps(data["cpu_info"]), host_ip=data["host_ip"],
        supported_hv_specs=[objects.HVSpec.from_list(i) for i in data["supported_instances"]],
        stats=stats, current_workload=data["num_io_ops"], running_vms=data["num_instances"],
        metrics=json.dumps([{"name": k, "value": v, "timestamp": _STAMP, "source": "libvirt"}
                            for k, v in data["metrics"].items()]),
        cpu_allocation_ratio=data.get("cpu_allocation_ratio", 1.0), ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        numa_topology=None, pci_device_pools=objects.PciDevicePoolList(objects=pools),
        updated_at=None)


def host_state(data: dict, now: datetime.datetime) -> host_manager.HostState:
    hs = host_manager.HostState(data["host"], data["host"], CELL)
    seen = now - datetime.timedelta(seconds=data["heartbeat_age"])
    service = {"id": 1, "host": data["host"], "binary": "nova-compute",
               "disabled": data["disabled"], "disabled_reason": None, "forced_down": False,
               "last_seen_up": seen, "updated_at": seen, "created_at": seen}
    aggregates = [objects.Aggregate(id=i + 1, uuid=str(uuidlib.UUID(int=i + 2)),
                                    name=f"agg{i}", hosts=[data["host"]], metadata=dict(m))
                  for i, m in enumerate(data["aggregates"])]
    instances = {u: objects.Instance(uuid=u, host=data["host"]) for u in data["instances"]}
    hs.update(compute=compute_node(data), service=service, aggregates=aggregates,
              inst_dict=instances)
    hs.allocation_candidates = [{"mappings": {}}]
    return hs


def request_spec(request: dict, group: dict | None) -> objects.RequestSpec:
    flavor = request["flavor"]
    hints = {k: (list(v) if isinstance(v, list) else [v])
             for k, v in (request.get("scheduler_hints") or {}).items()}
    image = dict(request.get("image") or {})
    image.setdefault("properties", {})
    spec = objects.RequestSpec(
        flavor=objects.Flavor(name=flavor.get("name"), vcpus=flavor["vcpus"],
                              memory_mb=flavor["memory_mb"], root_gb=flavor["root_gb"],
                              ephemeral_gb=0, swap=0,
                              extra_specs=dict(flavor.get("extra_specs") or {})),
        image=objects.ImageMeta.from_dict(image), project_id=request.get("project_id"),
        scheduler_hints=hints, num_instances=1, instance_uuid=str(uuidlib.uuid4()),
        numa_topology=None, ignore_hosts=None, force_hosts=None, force_nodes=None,
        availability_zone=None, instance_group=None,
        pci_requests=objects.InstancePCIRequests(requests=[
            objects.InstancePCIRequest(count=r["count"], spec=[dict(s) for s in r["spec"]],
                                       request_id=str(uuidlib.uuid4()), alias_name=None)
            for r in request.get("pci_requests", ())]))
    asked = request.get("instance_group")
    if asked:
        spec.instance_group = objects.InstanceGroup(
            uuid=asked["uuid"], policy=asked["policy"], policies=[asked["policy"]],
            rules=asked.get("rules") or {},
            members=list(group["members"]), hosts=list(group["hosts"]))
    return spec


class _Conf:
    def __init__(self, values: dict) -> None:
        self.values = values

    def __enter__(self):
        for group, opts in self.values.items():
            for name, value in opts.items():
                CONF.set_override(name, value, group=None if group == "DEFAULT" else group)

    def __exit__(self, *exc):
        for group, opts in self.values.items():
            for name in opts:
                CONF.clear_override(name, group=None if group == "DEFAULT" else group)


def _raised(exc: Exception) -> str:
    return f"raise: {type(exc).__name__}: {exc}"[:200]


def answer(case: dict) -> list[str]:
    n = len(case["hosts"])
    now = datetime.datetime.utcnow()
    with _Conf(case.get("conf") or {}):
        try:
            flt = _FILTERS[case["filter"]]()
            spec = request_spec(case["request"], case.get("group"))
            hosts = [host_state(h, now) for h in case["hosts"]]
        except Exception as exc:
            return [_raised(exc)] * n
        out = []
        for hs in hosts:
            try:
                out.append("pass" if flt.host_passes(hs, spec) else "fail")
            except Exception as exc:
                out.append(_raised(exc))
        return out


def answer_batch(cases: list[dict]) -> list[list[str]]:
    return [answer(case) for case in cases]


def weigh(case: dict, name: str) -> list[float]:
    now = datetime.datetime.utcnow()
    with _Conf(case.get("conf") or {}):
        weigher = _WEIGHERS[name]()
        spec = request_spec(case["request"], None)
        hosts = [host_state(h, now) for h in case["hosts"]]
        sign = 1.0 if weigher.weight_multiplier(hosts[0]) >= 0 else -1.0
        return [sign * weigher._weigh_object(hs, spec) for hs in hosts]


def weigh_batch(cases: list[dict], names: list[str]) -> list[dict]:
    return [{name: weigh(case, name) for name in names} for case in cases]
