"""berth-agent against the real daemon (RabbitMQ + MariaDB) on a fake kernel tree.

The agent runs as its own process, reads a copy of ``two_socket_smt`` and
reports every second. The test then changes the tree the way a host changes
(a VF disappears, huge pages are added) and watches Berth's host state follow:
in the database (``show_host``) and in the daemon's placement answers. It then
takes the daemon away, and then the broker (through a TCP proxy the test
owns, so the shared RabbitMQ is never touched), and checks the agent comes
back with a full report each time.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from scheduler import exception
from scheduler.agent import mdev
from tests import services
from tests.functional.daemon import ROOT, Daemon
from tests.unit.agent import fake_host

ALIAS = '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'
VF_SPEC = '{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"}'
NODE1_2M = "devices/system/node/node1/hugepages/hugepages-2048kB"
NODE0_PAGES = "devices/system/node/node0/hugepages"
NODE1_1G = "devices/system/node/node1/hugepages/hugepages-1048576kB"
PCI = "bus/pci/devices"


class Agent:
    def __init__(self, tmp_path, daemon: Daemon, tree: str, transport_url: str):
        self.log = tmp_path / "agent.log"
        self.config = tmp_path / "agent.conf"
        self.config.write_text(f"""[DEFAULT]
transport_url = {transport_url}
control_exchange = {daemon.exchange}
[scheduler]
topic = {daemon.topic}
[oslo_messaging_rabbit]
amqp_auto_delete = true
[agent]
host = ft-agent
sysfs_root = {tree}/sys
procfs_root = {tree}/proc
instances_path = {tmp_path}
report_interval = 1
heartbeat_interval = 1
rpc_timeout = 2
backoff_initial = 0.2
backoff_max = 1
detect_hypervisor_version = false
[compute]
cpu_shared_set = 0-3,8-11
cpu_dedicated_set = 4-7,12-15
reserved_host_memory_mb = 1024
[pci]
device_spec = {VF_SPEC}
""")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cmd.agent", "--config-file", str(self.config),
             "--log-file", str(self.log)], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("agent ignored SIGTERM:\n" + self.log_text()) from None
        return self.proc.returncode if self.proc else None

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def _wait_for(what, check, timeout=60, agent=None, daemon=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (exception.NotFound, exception.NoValidHost) as e:
            last = e
        except Exception as e:  # the daemon restarting
            last = e
        time.sleep(0.3)
    tail = "\n".join((agent.log_text() if agent else "").splitlines()[-30:])
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})\nagent log:\n{tail}"
                         + ("\ndaemon log:\n" + daemon.log_tail(30) if daemon else ""))


def _pages(host, cell, size_kb):
    cells = {c["id"]: c for c in (host["numa_topology"] or {}).get("cells", [])}
    return {p["size_kb"]: p["total"] for p in cells[cell]["mempages"]}.get(size_kb)


def _write(tree, rel, value):
    with open(os.path.join(tree, "sys", rel), "w") as f:
        f.write(f"{value}\n")


def _remove_vf(tree, vf, index):
    shutil.rmtree(os.path.join(tree, "sys", PCI, vf))
    os.unlink(os.path.join(tree, "sys", PCI, "0000:81:00.0", f"virtfn{index}"))


VF_FLAVOR = {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
             "extra_specs": {"pci_passthrough:alias": "vf:1"}}
HUGE_FLAVOR = {"vcpus": 2, "memory_mb": 3072, "root_gb": 1,
               "extra_specs": {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "2MB"}}


@pytest.fixture
def env(tmp_path):
    services.require_rabbitmq()
    daemon = Daemon(tmp_path, fleet={"hosts": [{"host": "fc00", "vcpus": 4,
                                                "memory_mb": 4096, "local_gb": 10}]},
                    extra=f"[filter_scheduler]\nenabled_filters = ComputeFilter,RamFilter,"
                          f"CoreFilter,DiskFilter,NUMATopologyFilter,PciPassthroughFilter\n"
                          f"[pci]\nalias = {ALIAS}\n")
    proxy = services.TcpProxy(("127.0.0.1", 5672))
    proxy.start()
    tree = fake_host.copy_tree("two_socket_smt", str(tmp_path))
    agent = Agent(tmp_path, daemon, tree, f"rabbit://guest:guest@127.0.0.1:{proxy.port}/")
    try:
        daemon.start()
        agent.start()
        yield daemon, agent, tree, proxy
    finally:
        try:
            assert agent.stop() == 0, agent.log_text()[-3000:]
        finally:
            proxy.stop()
            daemon.stop()
            daemon.close()


def test_agent_reports_and_berth_follows_the_host(env):
    daemon, agent, tree, proxy = env
    api = daemon.api(timeout=10)

    # -- first report: what the tree has -------------------------------------------------
    host = _wait_for("the first report (node and devices)",
                     lambda: (h := api.show_host(None, "ft-agent"))
                     and h["pci_devices"]["total"] == 4 and h, agent=agent, daemon=daemon)
    # 16 CPUs, 8 of them dedicated ([compute] cpu_dedicated_set): VCPU 8, PCPU 8
    assert (host["vcpus"], host["pcpus"], host["memory_mb"],
            host["reserved_host_memory_mb"]) == (8, 8, 131072, 1024)
    assert host["cpu_info"]["topology"] == {"sockets": 2, "cores": 4, "threads": 2}
    cells = host["numa_topology"]["cells"]
    assert [(c["id"], c["cpuset"], c["pcpuset"]) for c in cells] == [
        (0, [0, 1, 2, 3, 8, 9, 10, 11], []), (1, [], [4, 5, 6, 7, 12, 13, 14, 15])]
    assert _pages(host, 1, 2048) == 512
    assert host["pci_devices"]["by_status"] == {"available": 3, "unavailable": 1}
    assert host["last_seen_up"] is not None

    # The daemon's cache has the host: a VF request lands there, and a 3 GB guest
    # on 2 MB pages fits nowhere (node 0 has no dedicated CPUs, node 1 512 pages).
    placed = api.select_destinations(None, {"flavor": VF_FLAVOR})[0][0]
    assert placed["host"] == "ft-agent"
    [claimed] = placed["pci_devices"]
    with pytest.raises(exception.NoValidHost):
        api.select_destinations(None, {"flavor": HUGE_FLAVOR}, dry_run=True)
    two = dict(VF_FLAVOR, extra_specs={"pci_passthrough:alias": "vf:2"})
    assert api.select_destinations(None, {"flavor": two}, dry_run=True)[0][0]["host"] \
        == "ft-agent"

    # -- the host changes: a free VF disappears, huge pages are added on node 1 ----------
    vfs = ["0000:81:02.0", "0000:81:02.1", "0000:81:02.2"]
    gone = next(vf for vf in vfs if vf != claimed)
    _remove_vf(tree, gone, vfs.index(gone))
    _write(tree, NODE1_2M + "/nr_hugepages", 2048)
    _write(tree, NODE1_2M + "/free_hugepages", 2048)
    host = _wait_for("the changed tree in Berth",
                     lambda: (h := api.show_host(None, "ft-agent"))
                     and _pages(h, 1, 2048) == 2048
                     and h["pci_devices"]["by_status"].get("available") == 1 and h,
                     agent=agent, daemon=daemon)
    assert host["pci_devices"]["by_status"] == {"available": 1, "claimed": 1,
                                                "unavailable": 1}
    # 4 kB pages shrink by what the huge pages took (64 GiB - 4 GiB - 1 GiB... of node 1).
    assert _pages(host, 1, 4) == (67108864 - 2048 * 2048) // 4
    # The daemon follows: two VFs no longer fit, the huge-page guest now does.
    _wait_for("the daemon to refuse two VFs",
              lambda: _refused(api, {"flavor": two}), agent=agent, daemon=daemon)
    huge = api.select_destinations(None, {"flavor": HUGE_FLAVOR})[0][0]
    assert huge["host"] == "ft-agent"
    fitted = huge["numa_cells"]["cells"]
    assert [(c["host_cell_id"], c["pagesize_kb"]) for c in fitted] == [(1, 2048)]

    # A claimed VF that disappears is kept, claimed, and the operator is warned.
    _remove_vf(tree, claimed, vfs.index(claimed))
    _wait_for("the warning about the claimed VF",
              lambda: f"device {claimed} is no longer reported but is claimed" in
              daemon.log_tail(400) + agent.log_text(), agent=agent, daemon=daemon)
    host = api.show_host(None, "ft-agent")
    assert host["pci_devices"]["by_status"]["claimed"] == 1

    # -- memory shrinks below what the guests hold: stored, but the host is disabled -----
    # The host and its NUMA nodes shrink together (a report whose cells hold more
    # than the host is refused): 4 GiB, 0.5 on node 0 and 3.5 on node 1, whose
    # 2 MB pages shrink to what the huge-page guest holds.
    meminfo = os.path.join(tree, "proc", "meminfo")
    original = open(meminfo).read()
    node_info = {n: os.path.join(tree, "sys", f"devices/system/node/node{n}/meminfo")
                 for n in (0, 1)}
    node_original = {n: open(path).read() for n, path in node_info.items()}
    for n, kb in ((0, 524288), (1, 3670016)):
        with open(node_info[n], "w") as f:
            f.write(node_original[n].replace("MemTotal:       67108864 kB",
                                             f"MemTotal:       {kb} kB"))
    _write(tree, NODE1_2M + "/nr_hugepages", 1536)
    _write(tree, NODE1_2M + "/free_hugepages", 0)
    node0_pages = {}                # node 0 gives up its huge pages meanwhile
    for size in os.listdir(os.path.join(tree, "sys", NODE0_PAGES)):
        for name in ("nr_hugepages", "free_hugepages"):
            rel = f"{NODE0_PAGES}/{size}/{name}"
            node0_pages[rel] = open(os.path.join(tree, "sys", rel)).read().strip()
            _write(tree, rel, 0)
    with open(meminfo, "w") as f:
        f.write(original.replace("MemTotal:       134217728 kB", "MemTotal:       4194304 kB"))
    host = _wait_for("the host disabled for capacity below usage",
                     lambda: (h := api.show_host(None, "ft-agent"))["disabled"] and h,
                     agent=agent, daemon=daemon)
    assert (host["memory_mb"], host["memory_mb_used"]) == (4096, 3584)
    assert host["disabled_reason"] == "capacity below usage: MEMORY_MB 3072 < 3584 used"
    _wait_for("the agent to log the warning",
              lambda: "capacity below usage: MEMORY_MB" in agent.log_text(), agent=agent)
    with open(meminfo, "w") as f:
        f.write(original)
    for n, path in node_info.items():
        with open(path, "w") as f:
            f.write(node_original[n])
    _write(tree, NODE1_2M + "/nr_hugepages", 2048)
    _write(tree, NODE1_2M + "/free_hugepages", 2048 - 1536)
    for rel, value in node0_pages.items():
        _write(tree, rel, value)
    _wait_for("the host enabled again once it fits",
              lambda: (h := api.show_host(None, "ft-agent"))["disabled_reason"] is None
              and not h["disabled"] and h["memory_mb"] == 131072, agent=agent, daemon=daemon)

    # -- a pinned CPU goes offline under the huge-page guest: the change is refused -----
    _write(tree, "devices/system/cpu/online", "0-14")
    _wait_for("the refusal in the agent's log",
              lambda: "Report refused" in agent.log_text(), agent=agent)
    host = api.show_host(None, "ft-agent")
    assert host["numa_topology"]["cells"][1]["pcpuset"] == [4, 5, 6, 7, 12, 13, 14, 15]
    assert not host["disabled"]
    _write(tree, "devices/system/cpu/online", "0-15")

    # -- the daemon goes away, the host changes meanwhile, the daemon comes back ---------
    assert daemon.stop() == 0
    _write(tree, NODE1_1G + "/nr_hugepages", 2)
    _wait_for("the agent to notice the daemon is away",
              lambda: "Scheduler unreachable" in agent.log_text(), agent=agent)
    assert agent.proc.poll() is None
    daemon.start()
    host = _wait_for("a full report after the daemon came back",
                     lambda: (h := api.show_host(None, "ft-agent"))
                     and _pages(h, 1, 1048576) == 2 and h, agent=agent, daemon=daemon)
    _wait_for("the agent to log its return",
              lambda: "reachable again" in agent.log_text(), agent=agent)

    # -- the broker goes away (for the agent), the host changes, it comes back -----------
    away, back = (agent.log_text().count(s) for s in ("Scheduler unreachable",
                                                        "reachable again"))
    proxy.stop()
    _write(tree, NODE1_1G + "/nr_hugepages", 3)
    _wait_for("the agent to notice the broker is away",
              lambda: agent.log_text().count("Scheduler unreachable") > away, agent=agent)
    assert agent.proc.poll() is None
    assert _pages(api.show_host(None, "ft-agent"), 1, 1048576) == 2    # nothing got through
    proxy.start()
    _wait_for("a full report after the broker came back",
              lambda: _pages(api.show_host(None, "ft-agent"), 1, 1048576) == 3,
              agent=agent, daemon=daemon)
    _wait_for("the agent to log its return",
              lambda: agent.log_text().count("reachable again") > back, agent=agent)

    for u in (placed["instance_uuid"], huge["instance_uuid"]):
        assert api.release(None, u) is True
    daemon.assert_consistent()


def _refused(api, spec) -> bool:
    try:
        api.select_destinations(None, spec, dry_run=True)
    except exception.NoValidHost:
        return True
    return False


def test_once_sends_one_report(tmp_path):
    services.require_rabbitmq()
    daemon = Daemon(tmp_path, fleet={"hosts": [{"host": "fc00", "vcpus": 4,
                                                "memory_mb": 4096, "local_gb": 10}]})
    try:
        daemon.start()
        tree = fake_host.copy_tree("small_no_numa", str(tmp_path))
        agent = Agent(tmp_path, daemon, tree, services.RABBIT_URL)
        text = agent.config.read_text().replace("cpu_dedicated_set = 4-7,12-15\n", "")
        agent.config.write_text(text.replace("cpu_shared_set = 0-3,8-11", "cpu_shared_set = 0-3"))
        out = subprocess.run([sys.executable, "-m", "scheduler.cmd.agent", "--once",
                              "--config-file", str(agent.config)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        host = daemon.api().show_host(None, "ft-agent")
        assert (host["vcpus"], host["memory_mb"]) == (4, 8167004 // 1024)
        assert json.dumps(host["numa_topology"]["cells"][0]["cpuset"]) == "[0, 1, 2, 3]"
    finally:
        daemon.stop()
        daemon.close()


TRUSTED_ALIAS = ('{"name": "tvf", "vendor_id": "8086", "product_id": "154c", '
                 '"device_type": "type-VF", "trusted": "true"}')


def test_tags_reserved_pages_and_version_reach_the_daemon(tmp_path):
    """One ``--once`` report of a host whose device_spec tags one VF, that reserves
    most of node 0's 2 MB pages and has a QEMU: the tagged VF goes only to a request
    asking for the tag, the reserved pages to nobody."""
    services.require_rabbitmq()
    daemon = Daemon(tmp_path, fleet={"hosts": [{"host": "fc00", "vcpus": 4,
                                                "memory_mb": 4096, "local_gb": 10}]},
                    extra=f"[filter_scheduler]\nenabled_filters = ComputeFilter,RamFilter,"
                          f"CoreFilter,NUMATopologyFilter,PciPassthroughFilter\n"
                          f"[pci]\nalias = {ALIAS}\nalias = {TRUSTED_ALIAS}\n")
    qemu = tmp_path / "qemu-system-x86_64"
    qemu.write_text("#!/bin/sh\necho 'QEMU emulator version 9.1.2 (fake)'\n")
    qemu.chmod(0o755)
    try:
        daemon.start()
        tree = fake_host.copy_tree("two_socket_smt", str(tmp_path))
        agent = Agent(tmp_path, daemon, tree, services.RABBIT_URL)
        trusted = ('{"vendor_id": "8086", "product_id": "154c", "address": "0000:81:02.1", '
                   '"physical_network": "physnet1", "trusted": true}')
        agent.config.write_text(agent.config.read_text()
                                .replace("device_spec = ", f"device_spec = {trusted}\n"
                                                          f"device_spec = ")
                                + f"[agent]\ndetect_hypervisor_version = true\n"
                                  f"qemu_binary = {qemu}\n"
                                  f"[compute]\nreserved_huge_pages = node:0,size:2MB,"
                                  f"count:960\n")
        out = subprocess.run([sys.executable, "-m", "scheduler.cmd.agent", "--once",
                              "--config-file", str(agent.config)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        api = daemon.api(timeout=10)
        host = api.show_host(None, "ft-agent")
        assert host["hypervisor_version"] == 9001002
        assert host["pci_devices"]["by_tag"] == {"trusted=true": 1}
        page = next(p for p in host["numa_topology"]["cells"][0]["mempages"]
                    if p["size_kb"] == 2048)
        assert (page["total"], page["reserved"]) == (1024, 960)

        def spec(alias):
            return {"flavor": dict(VF_FLAVOR, extra_specs={"pci_passthrough:alias": alias})}
        # The plain alias may take any VF; the tagged one only the trusted VF.
        assert api.select_destinations(None, spec("vf:3"), dry_run=True)[0][0]["host"] \
            == "ft-agent"
        with pytest.raises(exception.NoValidHost) as e:
            api.select_destinations(None, spec("tvf:2"), dry_run=True)
        assert "alias tvf: need 2 matching devices, 1 free" in str(e.value)
        placed = api.select_destinations(None, spec("tvf:1"))[0][0]
        assert (placed["host"], placed["pci_devices"]) == ("ft-agent", ["0000:81:02.1"])
        with pytest.raises(exception.NoValidHost):
            api.select_destinations(None, spec("tvf:1"), dry_run=True)
        assert api.select_destinations(None, spec("vf:2"), dry_run=True)[0][0]["host"] \
            == "ft-agent"
        assert api.release(None, placed["instance_uuid"]) is True

        # 64 of node 0's 1024 2 MB pages are not reserved (node 1 has no shared CPUs):
        # 128 pages do not fit, 64 do, and then not one more.
        def pages_2m(memory_mb):
            return {"flavor": {"vcpus": 1, "memory_mb": memory_mb, "root_gb": 1,
                               "extra_specs": {"hw:mem_page_size": "2MB"}}}
        with pytest.raises(exception.NoValidHost):
            api.select_destinations(None, pages_2m(256), dry_run=True)
        guest = api.select_destinations(None, pages_2m(128))[0][0]
        assert guest["numa_cells"]["cells"][0]["pagesize_kb"] == 2048
        with pytest.raises(exception.NoValidHost):
            api.select_destinations(None, pages_2m(2), dry_run=True)
        assert api.release(None, guest["instance_uuid"]) is True
        daemon.assert_consistent()
    finally:
        daemon.stop()
        daemon.close()


def test_agent_started_before_the_broker(tmp_path):
    """The broker is away when the agent starts: it backs off, then reports."""
    services.require_rabbitmq()
    daemon = Daemon(tmp_path, fleet={"hosts": [{"host": "fc00", "vcpus": 4,
                                                "memory_mb": 4096, "local_gb": 10}]})
    proxy = services.TcpProxy(("127.0.0.1", 5672))      # not listening yet
    tree = fake_host.copy_tree("offline_cpus", str(tmp_path))
    agent = Agent(tmp_path, daemon, tree, f"rabbit://guest:guest@127.0.0.1:{proxy.port}/")
    text = agent.config.read_text()
    agent.config.write_text(text.replace("cpu_shared_set = 0-3,8-11", "cpu_shared_set = 0-1")
                            .replace("cpu_dedicated_set = 4-7,12-15",
                                     "cpu_dedicated_set = 2-7"))
    try:
        daemon.start()
        agent.start()
        _wait_for("two failed attempts",
                  lambda: agent.log_text().count("Scheduler unreachable") >= 2, agent=agent)
        assert agent.proc.poll() is None
        proxy.start()
        api = daemon.api()
        host = _wait_for("the report once the broker is there",
                         lambda: api.show_host(None, "ft-agent"), agent=agent, daemon=daemon)
        assert [(c["cpuset"], c["pcpuset"]) for c in host["numa_topology"]["cells"]] == [
            ([0, 1], [2, 3, 4, 5])]
        assert "cpu_dedicated_set: CPUs 6,7 are offline" in agent.log_text()
        assert agent.stop() == 0
    finally:
        agent.stop()
        proxy.stop()
        daemon.stop()
        daemon.close()


T4_A, T4_B = "ft-agent_pci_0000_3b_00_0", "ft-agent_pci_0000_5e_00_0"
PROVIDER_YAML = fake_host.provider_yaml(windows={"total": 2}, gpu=T4_A)


def _flavor(extra_specs: dict) -> dict:
    return {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1, "extra_specs": extra_specs}}


def test_vgpus_and_custom_classes_the_agent_reports_are_placed(tmp_path):
    """One ``--once`` report of a host with two T4s on the mdev bus (nvidia-223
    enabled) and a provider config file: vGPU flavors land on a GPU's child
    provider, a custom-class flavor on the node's own inventory, a CPU-flag trait
    only where the CPU has it; the host without any of it gets none of them. A GPU
    that leaves the mdev bus under its guests keeps its provider (total 0) and
    disables the host until it is back."""
    services.require_rabbitmq()
    daemon = Daemon(tmp_path, fleet={"hosts": [{"host": "fc00", "vcpus": 16,
                                                "memory_mb": 65536, "local_gb": 100}]},
                    extra="[filter_scheduler]\nenabled_filters = ComputeFilter,RamFilter,"
                          "CoreFilter,DiskFilter\n")
    try:
        daemon.start()
        tree = fake_host.copy_tree("gpu_host", str(tmp_path))
        configs = tmp_path / "provider_config"
        configs.mkdir()
        (configs / "rack.yaml").write_text(PROVIDER_YAML)
        agent = Agent(tmp_path, daemon, tree, services.RABBIT_URL)
        text = agent.config.read_text().replace("cpu_dedicated_set = 4-7,12-15\n", "")
        agent.config.write_text(text.replace("cpu_shared_set = 0-3,8-11", "cpu_shared_set = 0-7")
                                + f"[agent]\nenabled_vgpu_types = nvidia-223\n"
                                  f"provider_config_location = {configs}\n")

        def report():
            out = subprocess.run([sys.executable, "-m", "scheduler.cmd.agent", "--once",
                                  "--config-file", str(agent.config)], cwd=ROOT,
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stdout + out.stderr

        report()
        api = daemon.api(timeout=10)
        host = api.show_host(None, "ft-agent")
        assert {"CUSTOM_RACK_A", "HW_CPU_HYPERTHREADING", "HW_CPU_X86_AVX512F",
                "HW_CPU_X86_AESNI"} <= set(host["traits"])
        assert host["resources"]["CUSTOM_LICENSED_WINDOWS"]["total"] == 2
        gpus = {p["name"]: p for p in host["providers"]}
        assert sorted(gpus) == [T4_A, T4_B]
        assert {n: (p["uuid"], p["parent"], p["resources"]["VGPU"]["total"], p["traits"])
                for n, p in gpus.items()} == {
            T4_A: (mdev.provider_uuid(T4_A), "ft-agent", 8,
                   ["CUSTOM_LOW_LATENCY", "CUSTOM_VGPU_NVIDIA_223"]),
            # 6 available + 2 created on it
            T4_B: (mdev.provider_uuid(T4_B), "ft-agent", 8, ["CUSTOM_VGPU_NVIDIA_223"])}
        node_uuid = host["uuid"]

        # -- a vGPU: on the agent's host, held by one of its GPUs ---------------------------
        with pytest.raises(exception.NoValidHost) as e:
            api.select_destinations(None, dict(_flavor({"resources:VGPU": "1"}),
                                               force_hosts=["fc00"]), dry_run=True)
        assert "VGPU" in str(e.value)
        vgpu = api.select_destinations(None, _flavor({"resources:VGPU": "1"}))[0][0]
        assert vgpu["host"] == "ft-agent"
        [(gpu_uuid, held)] = [(u, a) for u, a in vgpu["allocations"].items() if u != node_uuid]
        assert gpu_uuid in {mdev.provider_uuid(T4_A), mdev.provider_uuid(T4_B)}
        assert held == {"VGPU": 1} and "VGPU" not in vgpu["allocations"][node_uuid]

        # -- vGPUs on the GPU the provider config marks: all from T4_A ----------------------
        low = api.select_destinations(None, dict(
            _flavor({"resources1:VGPU": "1", "trait1:CUSTOM_LOW_LATENCY": "required"}),
            num_instances=3))
        assert [s[0]["allocations"].get(mdev.provider_uuid(T4_A)) for s in low] == \
            [{"VGPU": 1}] * 3

        # -- the operator's custom class: from the node's root, two at most -----------------
        windows = _flavor({"resources:CUSTOM_LICENSED_WINDOWS": "1",
                           "trait:CUSTOM_RACK_A": "required"})
        licensed = [api.select_destinations(None, windows)[0][0] for _ in range(2)]
        for placed in licensed:
            assert placed["host"] == "ft-agent"
            assert placed["allocations"][node_uuid]["CUSTOM_LICENSED_WINDOWS"] == 1
        with pytest.raises(exception.NoValidHost) as e:
            api.select_destinations(None, windows, dry_run=True)
        assert "CUSTOM_LICENSED_WINDOWS" in str(e.value)

        # -- a CPU flag the agent read from /proc/cpuinfo ----------------------------------
        avx512 = api.select_destinations(
            None, _flavor({"trait:HW_CPU_X86_AVX512F": "required"}), dry_run=True)
        assert avx512[0][0]["host"] == "ft-agent"

        # -- the next report keeps the providers (same uuids) and what they hold ------------
        report()
        host = api.show_host(None, "ft-agent")
        used = {p["uuid"]: p["resources"]["VGPU"]["used"] for p in host["providers"]}
        by_gpu = {mdev.provider_uuid(T4_A): 3, mdev.provider_uuid(T4_B): 0}
        by_gpu[gpu_uuid] += 1
        assert used == by_gpu
        assert host["resources"]["CUSTOM_LICENSED_WINDOWS"]["used"] == 2
        assert not host["disabled"]

        # -- the GPU holding vGPUs leaves the mdev bus: kept, and the host disabled -----------
        held_a = by_gpu[mdev.provider_uuid(T4_A)]
        link = os.path.join(tree, "sys", "class", "mdev_bus", "0000:3b:00.0")
        target = os.readlink(link)
        os.unlink(link)
        report()
        host = api.show_host(None, "ft-agent")
        assert host["disabled"]
        assert host["disabled_reason"] == f"capacity below usage: VGPU of {T4_A} 0 < {held_a} used"
        kept = {p["name"]: p["resources"]["VGPU"] for p in host["providers"]}
        assert (kept[T4_A]["total"], kept[T4_A]["used"]) == (0, held_a)
        os.symlink(target, link)
        report()
        host = api.show_host(None, "ft-agent")
        assert not host["disabled"] and host["disabled_reason"] is None

        for placed in [vgpu, *(s[0] for s in low), *licensed]:
            assert api.release(None, placed["instance_uuid"]) is True
        daemon.assert_consistent()
    finally:
        daemon.stop()
        daemon.close()
