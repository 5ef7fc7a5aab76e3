"""The fake kernel trees under ``trees/`` and helpers to read them.

``two_socket_smt``: 2 sockets x 4 cores x 2 threads (CPUs 0-15, siblings n and
n+8), NUMA nodes 0 (CPUs 0-3,8-11) and 1 (4-7,12-15) with 64 GiB each, huge
pages (node 0: 1024 x 2 MiB, 4 x 1 GiB; node 1: 512 x 2 MiB), an Intel X710
with two PFs (81:00.0 with VFs 81:02.0-2, 81:00.1 without VFs), a GPU at
3b:00.0 on node 0 and a SATA controller without a NUMA node.
``small_no_numa``: 4 CPUs, no node directory, 8 GB, no PCI devices.
``offline_cpus``: CPUs 0-7 present, 6-7 offline; node 0 has CPUs 0-5 and
16 GiB, node 1 has 4 GiB and no CPUs.
``gpu_host``: 1 socket x 4 cores x 2 threads (CPUs 0-7, siblings n and n+4),
NUMA node 0 with 64 GiB, an Ice Lake CPU (AVX-512, AES, SHA...), and three
GPUs on the mdev bus: two NVIDIA T4s (3b:00.0 offers nvidia-222/223/230 as
16/8/4 vGPUs; 5e:00.0 holds two nvidia-223 mdevs and offers 6 more of that
type, none of the others) and an Intel GPU at 00:02.0 (i915-GVTg_V5_4: 2,
i915-GVTg_V5_8: 4); a SATA controller that is not on the mdev bus.
"""
from __future__ import annotations

import os
import shutil

import yaml

from scheduler.agent import host, kernel, pci

TREES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trees")
GiB = 1024 ** 3


class FakeStatvfs:
    """What ``os.statvfs`` answers for a 500 GiB file system with 200 GiB free."""

    f_frsize = 4096
    f_blocks = 500 * GiB // 4096
    f_bavail = 200 * GiB // 4096


def tree(name: str, root: str = TREES) -> kernel.KernelTree:
    return kernel.KernelTree(os.path.join(root, name, "sys"), os.path.join(root, name, "proc"),
                             page_size_kb=4)


def facts(name: str, root: str = TREES) -> host.HostFacts:
    return host.discover(tree(name, root), "/instances", statvfs=lambda path: FakeStatvfs)


def settings(name: str = "compute-1", specs: list[str] = (), **kw) -> host.Settings:
    return host.Settings(host=name, node=name, dedicated=kw.pop("dedicated", None),
                         shared=kw.pop("shared", None),
                         device_specs=tuple(pci.parse_device_specs(list(specs))), **kw)


def copy_tree(name: str, dest: str) -> str:
    """A writable copy of tree ``name`` under ``dest`` (symlinks kept); returns its root."""
    target = os.path.join(dest, name)
    shutil.copytree(os.path.join(TREES, name), target, symlinks=True)
    return target


def provider_yaml(windows: dict | None = None, gpu: str | None = None,
                  gpu_adds: dict | None = None) -> str:
    """A provider config file: the node gets CUSTOM_LICENSED_WINDOWS (``windows``,
    default 8) and CUSTOM_RACK_A; the provider named ``gpu`` gets ``gpu_adds``
    (default the trait CUSTOM_LOW_LATENCY)."""
    providers = [{"identification": {"uuid": "$COMPUTE_NODE"},
                  "inventories": {"additional": [
                      {"CUSTOM_LICENSED_WINDOWS": windows or {"total": 8}}]},
                  "traits": {"additional": ["CUSTOM_RACK_A"]}}]
    if gpu is not None:
        providers.append({"identification": {"name": gpu},
                          **(gpu_adds or {"traits": {"additional": ["CUSTOM_LOW_LATENCY"]}})})
    return yaml.safe_dump({"meta": {"schema_version": "1.0"}, "providers": providers},
                          sort_keys=False)
