"""What berth-agent reports for its host, in the fleet format (DESIGN §7).

``discover`` reads the kernel tree (``[agent] sysfs_root`` / ``procfs_root``)
into :class:`HostFacts`; ``build_report`` applies the operator's choices
(``[compute]`` CPU sets and reserved amounts, ``[pci] device_spec``, ``[agent]
enabled_vgpu_types``, the provider config files) and returns the
``report_compute_node`` payload and the ``report_pci_devices`` list. The same
report is validated here with ``scheduler.fleet.parse_host`` before it is
sent, so a host that would be refused is told so locally.

The node's ledger: ``traits`` are its CPU flags as ``HW_CPU_X86_*`` (or
``HW_CPU_AARCH64_*``) traits, ``HW_CPU_HYPERTHREADING`` when a core of the
host runs two threads or more, and the CUSTOM_ traits of the provider config
files; ``inventories`` the CUSTOM_ classes of those files (the classic fields
stay VCPU, PCPU, MEMORY_MB and DISK_GB); ``providers`` one child per GPU that
exposes a vGPU type (``scheduler.agent.mdev``), with what the files add to it.

Guest CPUs: ``cpu_dedicated_set`` CPUs go to pinned guests (a cell's
``pcpuset``), ``cpu_shared_set`` CPUs to floating ones (``cpuset``). With
neither set every online CPU is shared; with only ``cpu_dedicated_set`` set
there are no shared CPUs and the other online CPUs are left to the host.
Configured CPUs that are offline or absent are left out, with a warning.
"""
from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Mapping

from oslo_config import cfg

from numa.errors import NumaError
from scheduler import exception, fleet, host_traits
from scheduler.agent import cpus as cpus_mod
from scheduler.agent import mdev as mdev_mod
from scheduler.agent import memory as memory_mod
from scheduler.agent import pci as pci_mod
from scheduler.agent import platform as platform_mod
from scheduler.agent import provider_config
from scheduler.agent.kernel import KernelTree, KernelTreeError, parse_cpu_list

agent_opts = [
    cfg.StrOpt("host", default=socket.gethostname(), sample_default="<hostname>",
               help="The compute host name berth-agent reports (fleet 'host')."),
    cfg.StrOpt("node", help="The hypervisor node name reported (fleet 'node'); "
                            "defaults to the host name."),
    cfg.StrOpt("sysfs_root", default="/sys",
               help="Where sysfs is mounted. Tests point it at a fake tree."),
    cfg.StrOpt("procfs_root", default="/proc",
               help="Where procfs is mounted. Tests point it at a fake tree."),
    cfg.StrOpt("instances_path", default="/var/lib/libvirt/images",
               help="Directory holding guest disks; the size of its file system is "
                    "the host's local_gb."),
    cfg.StrOpt("hypervisor_type", default="QEMU",
               help="Hypervisor type reported (fleet 'hypervisor_type')."),
    cfg.IntOpt("hypervisor_version", min=0,
               help="Hypervisor version reported when it cannot be detected (see "
                    "detect_hypervisor_version), e.g. 8002000 for 8.2.0; unset: not "
                    "reported then."),
    cfg.BoolOpt("detect_hypervisor_version", default=True,
                help="Report QEMU's version as the hypervisor version (major * 1000000 "
                     "+ minor * 1000 + micro, as libvirt gives it to Nova), read from "
                     "'<qemu_binary> --version' at every report; hypervisor_version is "
                     "used when no QEMU binary is found or it prints no version."),
    cfg.StrOpt("qemu_binary",
               help="The QEMU binary whose version is reported (a path or a name on "
                    "PATH). Unset: qemu-system-<arch>, qemu-kvm, /usr/libexec/qemu-kvm, "
                    "the first that exists."),
    cfg.StrOpt("virt_type", default="kvm",
               help="Virtualization type in supported_instances ([arch, virt_type, "
                    "hvm]), read by ImagePropertiesFilter."),
    cfg.StrOpt("host_ip", help="The host's IP address reported (fleet 'host_ip')."),
]

compute_agent_opts = [
    cfg.StrOpt("cpu_dedicated_set",
               help="Host CPUs for pinned guest vCPUs, e.g. '4-15,^8'. Unset: none "
                    "(all guests float on cpu_shared_set)."),
    cfg.StrOpt("cpu_shared_set",
               help="Host CPUs for floating guest vCPUs, e.g. '0-3'. Unset: every "
                    "online CPU when cpu_dedicated_set is unset, none otherwise."),
    cfg.IntOpt("reserved_host_cpus", default=0, min=0,
               help="Guest CPUs held back for the host (fleet reserved_host_cpus)."),
    cfg.IntOpt("reserved_host_memory_mb", default=512, min=0,
               help="Memory held back for the host (fleet reserved_host_memory_mb)."),
    cfg.IntOpt("reserved_host_disk_mb", default=0, min=0,
               help="Disk held back for the host (fleet reserved_host_disk_mb)."),
    cfg.MultiStrOpt("reserved_huge_pages", default=[],
                    help="Pages of one size on one NUMA node held back for the host "
                         "(e.g. for DPDK), as Nova writes it: 'node:0,size:2048,count:64' "
                         "(size in KiB, or 2MB, 1GB). Repeat the option per node and "
                         "size. Reported as the cell's reserved pages: the scheduler "
                         "never gives them to a guest."),
]

cfg.CONF.register_opts(agent_opts, group="agent")
cfg.CONF.register_opts(compute_agent_opts, group="compute")

LIST_OPTS = [("agent", agent_opts), ("compute", compute_agent_opts)]


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """What the kernel says the host has, before any configuration applies."""

    cpus: cpus_mod.CpuFacts
    memory: memory_mod.MemoryFacts
    pci: tuple[pci_mod.PciFact, ...]
    cpu_model: platform_mod.CpuModel
    disk: platform_mod.DiskFacts
    hypervisor: platform_mod.HypervisorVersion | None = None   # None: not detected
    mdev: tuple[mdev_mod.MdevParent, ...] = ()                 # the mdev bus


@dataclasses.dataclass(frozen=True)
class Settings:
    """The configuration a report depends on, checked."""

    host: str
    node: str
    dedicated: frozenset[int] | None
    shared: frozenset[int] | None
    reserved_host_cpus: int = 0
    reserved_host_memory_mb: int = 0
    reserved_host_disk_mb: int = 0
    # (NUMA node, page size KiB) -> pages held back ([compute] reserved_huge_pages)
    reserved_huge_pages: Mapping[tuple[int, int], int] = dataclasses.field(
        default_factory=dict)
    cpu_allocation_ratio: float = 4.0
    ram_allocation_ratio: float = 1.0
    disk_allocation_ratio: float = 1.0
    device_specs: tuple[pci_mod.DeviceSpec, ...] = ()
    hypervisor_type: str | None = "QEMU"
    hypervisor_version: int | None = None
    virt_type: str = "kvm"
    host_ip: str | None = None
    vgpu_types: tuple[mdev_mod.VgpuType, ...] = ()
    provider_configs: provider_config.ProviderConfigs = provider_config.ProviderConfigs()
    config_warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HostReport:
    """The payloads to send, the facts they came from and the operator's warnings."""

    node: dict
    pci_devices: list[dict]
    warnings: list[str]
    facts: HostFacts
    devices: tuple[pci_mod.PciFact, ...]
    hypervisor_version_source: str = "[agent] hypervisor_version"
    gpus: tuple[mdev_mod.Gpu, ...] = ()
    # provider name -> the provider config entry applied to it
    configured: Mapping[str, provider_config.ProviderConfig] = dataclasses.field(
        default_factory=dict)

    @property
    def host(self) -> str:
        return self.node["host"]

    @property
    def node_name(self) -> str:
        return self.node.get("node", self.node["host"])


def _cpu_set(value: str | None, field: str) -> frozenset[int] | None:
    if value is None or not value.strip():
        return None
    try:
        return parse_cpu_list(value, field)
    except NumaError as e:
        raise exception.InvalidRequest(field=field, reason=e.reason) from None


def settings_from_conf(conf: cfg.ConfigOpts = cfg.CONF) -> Settings:
    """Check and collect the options; ``InvalidRequest`` names a bad one."""
    dedicated = _cpu_set(conf.compute.cpu_dedicated_set, "compute.cpu_dedicated_set")
    shared = _cpu_set(conf.compute.cpu_shared_set, "compute.cpu_shared_set")
    if dedicated and shared and dedicated & shared:
        both = ",".join(map(str, sorted(dedicated & shared)))
        raise exception.InvalidRequest(
            field="compute.cpu_shared_set",
            reason=f"CPUs {both} are also in cpu_dedicated_set")
    try:
        reserved_pages = memory_mod.parse_reserved_huge_pages(
            conf.compute.reserved_huge_pages)
    except memory_mod.ReservedPagesError as e:
        raise exception.InvalidRequest(field=e.field, reason=e.reason) from None
    a = conf.agent
    vgpu_types = mdev_mod.vgpu_types_from_conf(conf)
    configs = provider_config.load_directory(a.provider_config_location)
    unused = [f"[{s}]: vGPU type {s.removeprefix(mdev_mod.GROUP_PREFIX)} is not in "
              f"[agent] enabled_vgpu_types; section ignored"
              for s in mdev_mod.unused_sections(conf, vgpu_types)]
    return Settings(
        host=a.host, node=a.node or a.host, dedicated=dedicated, shared=shared,
        reserved_host_cpus=conf.compute.reserved_host_cpus,
        reserved_host_memory_mb=conf.compute.reserved_host_memory_mb,
        reserved_host_disk_mb=conf.compute.reserved_host_disk_mb,
        reserved_huge_pages=reserved_pages,
        **fleet.compute_defaults(conf),
        device_specs=tuple(pci_mod.parse_device_specs(conf.pci.device_spec)),
        hypervisor_type=a.hypervisor_type, hypervisor_version=a.hypervisor_version,
        virt_type=a.virt_type, host_ip=a.host_ip, vgpu_types=vgpu_types,
        provider_configs=configs, config_warnings=tuple(unused) + configs.warnings)


def discover(tree: KernelTree, instances_path: str, statvfs: Callable | None = None,
             hypervisor: Callable[[str], platform_mod.HypervisorVersion] | None = None,
             ) -> HostFacts:
    """Read everything the report needs from the kernel tree; ``KernelTreeError``
    names the file that could not be read. ``hypervisor(arch)`` detects the
    hypervisor version (None: not detected, configuration decides)."""
    disk_args = {} if statvfs is None else {"statvfs": statvfs}
    cpu_model = platform_mod.discover_cpu_model(tree)
    return HostFacts(cpus=cpus_mod.discover_cpus(tree),
                     memory=memory_mod.discover_memory(tree),
                     pci=tuple(pci_mod.scan_devices(tree)),
                     cpu_model=cpu_model,
                     disk=platform_mod.discover_disk(instances_path, **disk_args),
                     hypervisor=None if hypervisor is None else hypervisor(cpu_model.arch),
                     mdev=mdev_mod.scan_mdev_bus(tree))


def hypervisor_probe(conf: cfg.ConfigOpts = cfg.CONF
                     ) -> Callable[[str], platform_mod.HypervisorVersion] | None:
    """The version detection ``[agent]`` asks for, or None when it is off."""
    if not conf.agent.detect_hypervisor_version:
        return None
    binary = conf.agent.qemu_binary
    return lambda arch: platform_mod.detect_hypervisor_version(
        (binary,) if binary else platform_mod.qemu_candidates(arch))


def _fmt(cpus) -> str:
    return ",".join(map(str, sorted(cpus)))


def _guest_cpus(facts: HostFacts, s: Settings, warnings: list[str]
                ) -> tuple[frozenset[int], frozenset[int]]:
    online = facts.cpus.online
    dedicated = s.dedicated or frozenset()
    if s.shared is not None:
        shared = s.shared
    elif s.dedicated is None:
        shared = online
    else:
        shared = frozenset()
    for name, chosen in (("cpu_dedicated_set", dedicated), ("cpu_shared_set", shared)):
        missing = chosen - online
        if missing:
            state = "offline" if missing <= facts.cpus.offline else "offline or absent"
            warnings.append(f"[compute] {name}: CPUs {_fmt(missing)} are {state}; "
                            f"not reported")
    return shared & online, dedicated & online


def _reserve_pages(node: int, pages: list[dict], s: Settings, warnings: list[str]) -> None:
    """Mark ``[compute] reserved_huge_pages`` of ``node`` on its page list."""
    by_size = {p["size_kb"]: p for p in pages}
    for (want_node, size_kb), count in sorted(s.reserved_huge_pages.items()):
        if want_node != node or count == 0:
            continue
        page = by_size.get(size_kb)
        if page is None:
            warnings.append(f"[compute] reserved_huge_pages: NUMA node {node} has no "
                            f"{size_kb} kB pages; nothing reserved")
            continue
        if count > page["total"]:
            warnings.append(f"[compute] reserved_huge_pages: NUMA node {node} has "
                            f"{page['total']} {size_kb} kB pages, fewer than the {count} "
                            f"reserved; all of them are reserved")
        page["reserved"] = min(count, page["total"])


def _cells(facts: HostFacts, shared: frozenset[int], dedicated: frozenset[int],
           page_size_kb: int, settings: Settings, warnings: list[str]) -> list[dict]:
    by_id = {c.id: c for c in facts.cpus.cpus}
    cells = []
    for node, node_cpus in facts.cpus.nodes.items():
        guest = node_cpus & (shared | dedicated)
        mem = facts.memory.nodes.get(node)
        if not guest or mem is None or mem.total_kb < 1024:
            if facts.cpus.has_numa:
                why = "no guest CPUs" if not guest else "no memory"
                warnings.append(f"NUMA node {node} has {why}; not reported as a cell")
            continue
        sibling_sets = sorted({tuple(sorted(by_id[c].siblings & guest)) for c in guest})
        sockets = [by_id[c].socket for c in sorted(guest) if by_id[c].socket is not None]
        small_total = (mem.total_kb - mem.hugepage_kb) // page_size_kb
        pages = [{"size_kb": page_size_kb, "total": max(0, small_total)}]
        pages += [{"size_kb": h.size_kb, "total": h.total} for h in mem.hugepages
                  if h.size_kb != page_size_kb]
        _reserve_pages(node, pages, settings, warnings)
        cells.append({"id": node, "socket": min(sockets) if sockets else None,
                      "cpuset": sorted(node_cpus & shared),
                      "pcpuset": sorted(node_cpus & dedicated),
                      "siblings": [list(s) for s in sibling_sets if len(s) > 1],
                      "memory_mb": mem.total_kb // 1024,
                      "mempages": pages})
    return cells


def node_traits(facts: HostFacts) -> set[str]:
    """The standard traits of the host's CPUs: flags, and SMT when a core of
    the host runs two threads or more (whichever CPUs the guests get)."""
    out = host_traits.cpu_flag_traits(facts.cpu_model.arch, facts.cpu_model.features)
    if facts.cpus.threads_per_core() > 1:
        out.add(host_traits.HYPERTHREADING)
    return out


def _ledger(facts: HostFacts, s: Settings, devices: list[pci_mod.PciFact],
            warnings: list[str]) -> tuple[dict, list[mdev_mod.Gpu], provider_config.Applied]:
    """The node's ``traits``, ``inventories`` and ``providers`` report fields."""
    gpus, gpu_warnings = mdev_mod.choose_types(s.node, facts.mdev, s.vgpu_types)
    warnings += gpu_warnings
    passthrough = {d.address for d in devices}
    for gpu in gpus:
        if gpu.address in passthrough:
            warnings.append(f"GPU {gpu.address} exposes vGPUs and is also a passthrough "
                            f"device ([pci] device_spec): a guest given it whole would use "
                            f"the vGPUs' capacity")
    applied = provider_config.apply(s.provider_configs.entries, s.node,
                                    [g.to_report() for g in gpus])
    warnings += applied.warnings
    fields: dict = {"traits": sorted(node_traits(facts) | applied.root_traits)}
    if applied.root_inventories:
        fields["inventories"] = {rc: inv.to_primitive()
                                 for rc, inv in sorted(applied.root_inventories.items())}
    if applied.providers:
        fields["providers"] = applied.providers
    return fields, gpus, applied


def build_report(facts: HostFacts, s: Settings, page_size_kb: int = 4) -> HostReport:
    """The report for ``facts`` under settings ``s``; ``InvalidRequest`` if Berth
    would refuse it (the message names the field)."""
    warnings: list[str] = list(s.config_warnings)
    shared, dedicated = _guest_cpus(facts, s, warnings)
    cells = _cells(facts, shared, dedicated, page_size_kb, s, warnings)
    reported = {c["id"] for c in cells}
    for node in sorted({n for (n, _), count in s.reserved_huge_pages.items() if count}
                       - reported):
        warnings.append(f"[compute] reserved_huge_pages: NUMA node {node} is not reported "
                        f"as a cell; nothing reserved there")
    devices, pci_warnings = pci_mod.passthrough_devices(list(facts.pci), list(s.device_specs))
    warnings += pci_warnings
    version, version_source = s.hypervisor_version, "[agent] hypervisor_version"
    detected = facts.hypervisor
    if detected is not None and detected.version is not None:
        version, version_source = detected.version, detected.source
    elif detected is not None and detected.warning:
        warnings.append(f"hypervisor version: {detected.warning}; using [agent] "
                        f"hypervisor_version")
    model = facts.cpu_model
    sockets = max(1, len(facts.cpus.sockets()))
    threads = facts.cpus.threads_per_core()
    cpu_info = {"arch": model.arch, "vendor": model.vendor, "model": model.model,
                "features": list(model.features),
                "topology": {"sockets": sockets, "threads": threads,
                             "cores": max(1, len(facts.cpus.online) // (sockets * threads))}}
    node = {
        "host": s.host, "node": s.node,
        "vcpus": len(shared | dedicated),
        "memory_mb": facts.memory.total_kb // 1024,
        "local_gb": facts.disk.total_gb,
        "cpu_allocation_ratio": s.cpu_allocation_ratio,
        "ram_allocation_ratio": s.ram_allocation_ratio,
        "disk_allocation_ratio": s.disk_allocation_ratio,
        "reserved_host_cpus": s.reserved_host_cpus,
        "reserved_host_memory_mb": s.reserved_host_memory_mb,
        "reserved_host_disk_mb": s.reserved_host_disk_mb,
        "hypervisor_type": s.hypervisor_type,
        "hypervisor_version": version,
        "cpu_info": cpu_info,
        "supported_instances": [[model.arch, s.virt_type, "hvm"]],
        "numa_topology": {"cells": cells} if cells else None,
    }
    if s.host_ip:
        node["host_ip"] = s.host_ip
    ledger, gpus, applied = _ledger(facts, s, devices, warnings)
    node.update(ledger)
    pci_devices = [d.to_report() for d in devices]
    fleet.parse_host({**node, "pci_devices": pci_devices})
    return HostReport(node=node, pci_devices=pci_devices, warnings=warnings, facts=facts,
                      devices=tuple(devices), hypervisor_version_source=version_source,
                      gpus=tuple(gpus), configured=dict(applied.applied))


def _option_for(message: str, conf: cfg.ConfigOpts) -> str:
    """The ``[agent]`` option whose path an unreadable-file message starts with."""
    matches = [(len(conf.agent[name]), name)
               for name in ("instances_path", "procfs_root", "sysfs_root")
               if message.startswith(conf.agent[name])]
    return f"agent.{max(matches)[1]}" if matches else "agent"


def report_from_conf(conf: cfg.ConfigOpts = cfg.CONF, statvfs: Callable | None = None,
                     settings: Settings | None = None) -> HostReport:
    """Discover this host under the configured roots and build its report
    (``settings``: as checked when the agent started; None: read them now)."""
    settings = settings_from_conf(conf) if settings is None else settings
    tree = KernelTree(conf.agent.sysfs_root, conf.agent.procfs_root)
    try:
        facts = discover(tree, conf.agent.instances_path, statvfs, hypervisor_probe(conf))
    except KernelTreeError as e:
        raise exception.InvalidRequest(field=_option_for(str(e), conf), reason=str(e)) from None
    return build_report(facts, settings, tree.page_size_kb)
