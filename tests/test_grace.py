"""Issue 51: Grace nodes judged as they are (GH200, GB200 NVL72 trays), through the real collector and the real
checks over host roots laid out as those machines lay out /sys, with the NVML stand-in answering as their GPUs do.

The layouts are the machines' own (NVIDIA's Grace Hopper and Grace Blackwell tuning guides; the issue's reading of
real nodes): a GH200 has 9 NUMA nodes (node 0 holds the 72 Grace CPUs, node 1 the GPU's HBM, 2-8 are empty) and
one GPU whose PCIe link reads Gen4 x1 because its host path is NVLink-C2C; a GB200 tray has 34 (0 and 1 hold the
two Grace CPUs' 72 CPUs each, 2/10/18/26 the four GPUs' HBM, the rest empty). The driver runs in NUMA mode or in
CDMM (CoherentGPUMemoryMode in /proc/driver/nvidia/params)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.checks.gpu_health import fabric_health
from conformance.checks.numa_rules import numa_limit_problems
from conformance.facts.gpu import parse_smi_xml
from conformance.facts.gpu_node_facts import memory_mode
from tests.fakeroot import make_host_root
from tests.gpu_standins import CONFIG, build_standins, driver_files, gpu_line, standins_available, write_root

# nvmlGpuFabricInfo_v3 healthMask: degraded bandwidth (bits 0-1), route recovery (2-3), route unhealthy (4-5),
# access timeout recovery (6-7): 1 true, 2 false; incorrect configuration (bits 8-11): 1 none
HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
DEGRADED = 1 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8


@dataclass
class Grace:
    name: str
    nodes: dict[int, str]  # NUMA node -> cpulist ("" for the GPU's HBM and the empty nodes)
    gpus: list[tuple[str, int]]  # PCI bus id -> the CPU-side NUMA node
    product: str
    cpus: int
    extra: dict[str, str] = field(default_factory=dict)


GH200 = Grace("gh200", {0: "0-71", **{n: "" for n in range(1, 9)}}, [("0009:01:00.0", 0)], "NVIDIA GH200 480GB", 72)
GB200 = Grace(
    "gb200",
    {0: "0-71", 1: "72-143", **{n: "" for n in range(2, 34)}},
    [("0008:01:00.0", 0), ("0009:01:00.0", 0), ("0018:01:00.0", 1), ("0019:01:00.0", 1)],
    "NVIDIA GB200",
    144,
)


def kubelet_yaml(options: str = "") -> str:
    return (
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
        'cpuManagerPolicy: static\nreservedSystemCPUs: "0-1"\ntopologyManagerPolicy: single-numa-node\n' + options
    )


def driver_params(mode: str | None) -> str | None:
    """/proc/driver/nvidia/params as a driver prints it (lines from the sample in tests/samples): with
    NVreg_CoherentGPUMemoryMode=`mode` (None: not set), EnableUserNUMAManagement is 0 for exactly "driver" and 1 for
    any other value (kernel-open os-registry.c os_registry_init). "550": a driver before CDMM, which prints neither."""
    if mode == "550":
        return 'ResmanDebugLevel: 4294967295\nEnableUserNUMAManagement: 1\nRegistryDwords: ""\n'
    user = 0 if mode == "driver" else 1
    return (f'ResmanDebugLevel: 4294967295\nCoherentGPUMemoryMode: "{mode or ""}"\nEnableUserNUMAManagement: {user}\n'
            'RegistryDwords: ""\n')  # fmt: skip


def host(tmp: Path, m: Grace, *, options: str = "", kubelet: str = "1.35.2", mode: str = "driver", health: int = HEALTHY,
         driver: str | None = None):  # fmt: skip
    """A host root laid out as machine `m`, its kubelet installed as pkgs.k8s.io's package of release `kubelet`."""
    files = {
        "/etc/kubernetes/kubelet.yaml": kubelet_yaml(options),
        "/sys/devices/system/cpu/online": f"0-{m.cpus - 1}\n",
        **{f"/sys/devices/system/node/node{n}/cpulist": f"{cpus}\n" for n, cpus in m.nodes.items()},
        **{f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": f"{c}\n" for c in range(m.cpus)},
        "/proc/driver/nvidia/params": driver_params(mode),
        "/var/lib/dpkg/status": (
            "Package: kubelet\nStatus: install ok installed\nPriority: optional\nSection: admin\nInstalled-Size: 1\n"
            f"Maintainer: lab <lab@invalid>\nArchitecture: {_arch()}\nVersion: {kubelet}-1.1\nDescription: kubelet\n"
        ),
        "/var/lib/dpkg/info/kubelet.list": "/.\n/usr\n/usr/bin\n/usr/bin/kubelet\n",
    }
    for bus, node in m.gpus:
        cpus = m.nodes[node]
        attrs = {"vendor": "0x10de", "class": "0x030200", "numa_node": str(node), "local_cpulist": cpus,
                 "current_link_speed": "16.0 GT/s PCIe", "current_link_width": "1", "max_link_speed": "16.0 GT/s PCIe",
                 "max_link_width": "16"}  # fmt: skip
        files.update({f"/sys/bus/pci/devices/{bus}/{k}": v + "\n" for k, v in attrs.items()})
    root = make_host_root(tmp / m.name, ["--config=/etc/kubernetes/kubelet.yaml"], files)
    return root


def _arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    why = standins_available()
    if why:
        pytest.skip(why)
    return build_standins(tmp_path_factory.mktemp("grace-standins"))


def audit(tmp: Path, built, m: Grace, **kw) -> dict:
    root = host(tmp, m, **kw)
    health = kw.get("health", HEALTHY)
    lines = [
        gpu_line(
            uuid=f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
            name=m.product,
            bus=f"0000{bus}",
            minor=i,
            gen=4,
            maxgen=4,
            gpumaxgen=5,
            width=1,
            maxwidth=16,
            cpumask="0x3",
            nodemask=hex(1 << node),
            c2c=1,
            fabric="3,0",
            fabric_health=health,
        )
        for i, (bus, node) in enumerate(m.gpus)
    ]
    if kw.get("driver"):
        lines.append(f"driver\t{kw['driver']}")
    write_root(root, driver_files(built, "\n".join([*lines, "cpu\t0\t0", "cpu\t1\t0"]) + "\n", cuda=False))
    out = tmp / f"out-{m.name}"
    env = {**os.environ, "GNC_FAKE_GPU_CONFIG": str(root / CONFIG.lstrip("/"))}
    p = subprocess.run([sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--output", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert (out / "results.json").is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    doc["by_check"] = {r["check"]: r for r in doc["results"]}
    return doc


def test_more_numa_nodes_than_the_topology_manager_allows_stop_the_kubelet(tmp_path, standins):
    """Item 1: cadvisor counts every node folder, CPU-less and empty ones too: a GH200's 9 exceed the default 8."""
    r = audit(tmp_path, standins, GH200)["by_check"]["KUBELET-TOPOLOGY-POLICY"]
    assert r["outcome"] == "failed", r
    assert "9 NUMA nodes" in r["message"] and "max-allowable-numa-nodes" in r["message"] and "exits at start" in r["message"]
    ok = audit(tmp_path / "opt", standins, GH200, options='topologyManagerPolicyOptions: {max-allowable-numa-nodes: "9"}')
    assert ok["by_check"]["KUBELET-TOPOLOGY-POLICY"]["outcome"] == "passed"


@pytest.mark.parametrize(("kubelet", "outcome"), [("1.35.2", "failed"), ("1.36.0", "passed")])
def test_a_gb200_tray_stalls_pod_admission_before_kubelet_1_36(tmp_path, standins, kubelet, outcome):
    """Item 1: 34 NUMA nodes with the option set: kubernetes/kubernetes #135541 (admission stalls), fixed in 1.36."""
    doc = audit(tmp_path, standins, GB200, kubelet=kubelet,
                options='topologyManagerPolicyOptions: {max-allowable-numa-nodes: "34"}')  # fmt: skip
    r = doc["by_check"]["KUBELET-TOPOLOGY-POLICY"]
    assert r["outcome"] == outcome, r
    if outcome == "failed":
        assert "34 NUMA nodes" in r["message"] and "#135541" in r["message"]


def test_a_c2c_gpus_pcie_link_is_not_its_host_path(tmp_path, standins):
    """Item 2: the GH200 reports PCIe Gen4 x1; its host path is NVLink-C2C, so the width is not judged."""
    r = audit(tmp_path, standins, GH200)["by_check"]["GPU-PCIE-LINK"]
    assert r["outcome"] in ("passed", "skipped") and "trained at x1" not in r["message"], r
    assert any("NVLink-C2C enabled" in line and "not judged" in line for line in r["evidence"]), r["evidence"]


@pytest.mark.parametrize(("mode", "outcome"), [("numa", "failed"), ("driver", "passed")])
def test_the_gpu_memory_mode_of_a_grace_node(tmp_path, standins, mode, outcome):
    """Item 3: NUMA mode makes the HBM system memory; CDMM is what Kubernetes nodes run. An identity attribute."""
    doc = audit(tmp_path, standins, GB200, mode=mode, options='topologyManagerPolicyOptions: {max-allowable-numa-nodes: "34"}',
                kubelet="1.36.0")  # fmt: skip
    r = doc["by_check"]["GPU-MEMORY-MODE"]
    assert r["outcome"] == outcome, r
    (node,) = doc["nodes"]
    assert node["identity"]["gpu_memory_mode"] == mode


@pytest.mark.parametrize(("mode", "outcome"), [("cdmm", "failed"), ("Driver", "failed")])
def test_only_the_exact_value_driver_enters_cdmm(tmp_path, standins, mode, outcome):
    """Issue 59 item 5: the driver compares NVreg_CoherentGPUMemoryMode with "driver" exactly (os-registry.c); any
    other value runs NUMA mode, which EnableUserNUMAManagement 1 in its params shows."""
    r = audit(tmp_path, standins, GH200, mode=mode)["by_check"]["GPU-MEMORY-MODE"]
    assert r["outcome"] == outcome, r
    assert "EnableUserNUMAManagement 1" in r["message"] and f'CoherentGPUMemoryMode "{mode}"' in r["message"], r


def test_a_gh200_on_a_driver_before_r580_runs_numa_mode(tmp_path, standins):
    """Issue 59 item 6: driver 550 has no CDMM (no CoherentGPUMemoryMode): NUMA mode, said as such, never an error."""
    r = audit(tmp_path, standins, GH200, mode="550", driver="550.54.15")["by_check"]["GPU-MEMORY-MODE"]
    assert r["outcome"] == "failed", r
    assert "NUMA mode" in r["message"] and "EnableUserNUMAManagement 1" in r["message"], r


def test_memory_mode_from_what_the_driver_runs_under():
    """Issue 59 items 5 and 6, on params as drivers print them: EnableUserNUMAManagement decides, CoherentGPUMemoryMode
    is evidence; a driver before R580 without the file runs NUMA mode."""
    assert memory_mode('CoherentGPUMemoryMode: "cdmm"\nEnableUserNUMAManagement: 1\n', "580.65.06")[0] == "numa"
    assert memory_mode("EnableUserNUMAManagement: 0\n", "575.57.08")[0] == "driver"  # set the older way
    assert memory_mode('CoherentGPUMemoryMode: ""\nEnableUserNUMAManagement: 0\n', "615.10")[0] == "driver"
    mode, how = memory_mode(None, "550.54.15")
    assert mode == "numa" and "CDMM needs R580 or later" in how, how


@pytest.mark.parametrize(("health", "outcome"), [(DEGRADED, "failed"), (HEALTHY, "passed")])
def test_the_nvl72_fabric_health_mask_is_judged(tmp_path, standins, health, outcome):
    """Item 5: GPU-FABRIC reads the v3 fabric info's health mask (degraded bandwidth fails)."""
    doc = audit(tmp_path, standins, GB200, health=health, kubelet="1.36.0")
    r = doc["by_check"]["GPU-FABRIC"]
    assert r["outcome"] == outcome, r
    if outcome == "failed":
        assert "NVLink fabric degraded bandwidth" in r["message"]


def test_a_kubelet_that_answers_configz_has_passed_the_numa_node_limit():
    """cmd/kubelet/app/server.go run(): NewContainerManager (the Topology Manager's NUMA node limit) comes before
    RunKubelet starts the server answering /configz. Where the node's NUMA nodes were not read (SSH down), a live
    kubelet proves the limit held; the admission stall (more than 16 nodes before 1.36) it does not rule out."""
    from conformance.checks.numa_rules import live_kubelet_within_limit

    assert live_kubelet_within_limit("single-numa-node", {}, None) is not None  # at most 8
    assert "at most 9" in live_kubelet_within_limit("restricted", {"max-allowable-numa-nodes": "9"}, None)[0]
    assert live_kubelet_within_limit("single-numa-node", {"max-allowable-numa-nodes": "34"}, (1, 35, 2)) is None
    assert live_kubelet_within_limit("single-numa-node", {"max-allowable-numa-nodes": "34"}, None) is None
    assert live_kubelet_within_limit("single-numa-node", {"max-allowable-numa-nodes": "34"}, (1, 36, 0)) is not None


def test_the_admission_stall_is_unknown_without_the_kubelets_release():
    """Above 16 NUMA nodes the verdict rests on the kubelet's release (the stall is fixed in 1.36): an unread
    release is an error naming it, never a pass; at 9 nodes (a GH200) the release does not matter."""
    from conformance.errors import FactUnavailable

    options = {"max-allowable-numa-nodes": "34"}
    with pytest.raises(FactUnavailable, match="the kubelet's release is unknown"):
        numa_limit_problems("single-numa-node", options, list(range(34)), None)
    assert numa_limit_problems("single-numa-node", options, list(range(34)), (1, 36, 0))[0] == []
    assert numa_limit_problems("single-numa-node", options, list(range(9)), None)[0] == []


def test_the_rules_on_their_own():
    assert numa_limit_problems("none", {}, list(range(34)), (1, 35, 0))[0] == []
    assert numa_limit_problems("single-numa-node", {"max-allowable-numa-nodes": "9"}, list(range(9)), (1, 35, 0))[0] == []
    assert "incorrect configuration: insufficient NVLinks" in fabric_health(HEALTHY & ~(0xF << 8) | 5 << 8)
    assert memory_mode('CoherentGPUMemoryMode: "driver"\n', "580.65.06")[0] == "driver"  # no EnableUserNUMAManagement line
    assert memory_mode("RmLogonRC: 1\n", "570.148.08")[0] == "numa"  # before CDMM existed: the HBM is system memory
    assert memory_mode("RmLogonRC: 1\n", "615.10")[0] == "driver"  # R615+: CDMM by default


def test_nvidia_smi_reports_c2c_mode():
    """`nvidia-smi -q -x` <c2c_mode> ("GPU C2C Mode" of `-q`: Enabled on Grace boards, N/A on PCIe GPUs)."""
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>570.148.08</driver_version>
<gpu id="00000009:01:00.0"><product_name>NVIDIA GH200 480GB</product_name><uuid>GPU-1</uuid>
<c2c_mode>Enabled</c2c_mode><pci><pci_bus_id>00000009:01:00.0</pci_bus_id></pci></gpu>
<gpu id="00000000:18:00.0"><product_name>NVIDIA H100</product_name><uuid>GPU-2</uuid>
<c2c_mode>N/A</c2c_mode><pci><pci_bus_id>00000000:18:00.0</pci_bus_id></pci></gpu></nvidia_smi_log>"""
    grace, pcie = parse_smi_xml(xml).gpus
    assert grace.c2c is True and pcie.c2c is None and pcie.errors["c2c"] == "not supported on this GPU"


@pytest.mark.parametrize(("machine", "want"), [("x86_64", None), ("aarch64", "error"), (None, "error")])
def test_an_unread_c2c_mode_is_no_c2c_only_on_an_x86_64_node(machine, want):
    """nvidia-smi before R550 has no <c2c_mode>: on an x86_64 node no GPU can reach its CPU over NVLink-C2C (it joins
    Grace CPUs, aarch64, to their GPUs), so the memory mode does not apply; on any other machine, or one whose
    `uname -m` was not recorded, whether it applies is unknown."""
    from conformance.collection.bundle import Bundle, Record
    from conformance.errors import FactUnavailable
    from conformance.facts.node_facts import NodeFacts

    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>535.183.01</driver_version>
<gpu id="00000009:01:00.0"><product_name>NVIDIA GH200 480GB</product_name><uuid>GPU-1</uuid>
<pci><pci_bus_id>00000009:01:00.0</pci_bus_id></pci></gpu></nvidia_smi_log>"""
    records = [
        Record("M", "gpus", "ok", b"0009:01:00.0\n"),
        Record("C", "nvml-probe", "127", b""),
        Record("C", "nvidia-smi-q", "0", xml.encode()),
        Record("M", "end", "ok", b""),
    ]
    if machine:
        records.append(Record("C", "uname-m", "0", f"{machine}\n".encode()))
    facts = NodeFacts(Bundle(node="n1", records=records))
    if want is None:
        assert facts.gpu_memory_mode is None
    else:
        with pytest.raises(FactUnavailable, match=r"over NVLink-C2C was not read: GPU0 .*a driver before R550"):
            _ = facts.gpu_memory_mode


def test_a_grace_gpus_numa_node_is_its_cpu_side_node_not_its_memory_node():
    """Item 4: `nvidia-smi topo -m` on a GB200 tray gives each GPU a CPU-side "NUMA Affinity" (0 or 1, what pods
    align with, as sysfs numa_node) and a "GPU NUMA ID" (2/10/18/26: its HBM, holding no CPU). The checks compare
    like with like: the affinity, never the GPU's memory node. (Layout as NVIDIA's GB200 NVL72 documentation
    shows it: NV18 between the four GPUs, C2C to the Grace CPUs.)"""
    from conformance.facts.gpu import parse_topo_matrix

    topo = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tNV18\tNV18\t0-71\t0\t2\n"
        "GPU1\tNV18\t X \tNV18\tNV18\t0-71\t0\t10\n"
        "GPU2\tNV18\tNV18\t X \tNV18\t72-143\t1\t18\n"
        "GPU3\tNV18\tNV18\tNV18\t X \t72-143\t1\t26\n"
    )
    got = parse_topo_matrix(topo)
    assert {i: numa for i, (_, numa) in got.items()} == {0: 0, 1: 0, 2: 1, 3: 1}
    assert got[2][0] == frozenset(range(72, 144))


def _layout(m: Grace):
    from conformance.facts.cpulist import parse_cpulist
    from conformance.facts.topology import Topology

    cpus = frozenset(range(m.cpus))
    nodes = {n: parse_cpulist(c, what="cpulist") if c else frozenset() for n, c in m.nodes.items()}
    return Topology(online=cpus, nodes=nodes, siblings={c: frozenset({c}) for c in cpus})


# What a container on Grace CPU node 0 shows in Mems_allowed_list (conformance/checks/memory_placement.py): the
# Memory Manager (Static) writes cpuset.mems as its allocation's NUMA affinity; without it the container inherits
# N_MEMORY, the nodes with system memory. In NUMA mode the HBM nodes (GB200: 2, 10, 18, 26) are N_MEMORY; in CDMM
# they are not. Empty nodes never are.
GB200_MEMS = [
    ("CDMM, Memory Manager Static", {0}, None),
    ("CDMM, no Memory Manager: N_MEMORY", {0, 1}, "node(s) 1 are another CPU node's memory"),
    ("NUMA mode, Memory Manager Static", {0}, None),
    ("NUMA mode, no Memory Manager: N_MEMORY", {0, 1, 2, 10, 18, 26}, "node(s) 2,10,18,26 hold memory and no CPUs"),
    ("NUMA mode, a Memory Manager group over an HBM node", {0, 2}, "node(s) 2 hold memory and no CPUs"),
]


@pytest.mark.parametrize(("case", "mems", "problem"), GB200_MEMS, ids=[c[0] for c in GB200_MEMS])
def test_a_correctly_placed_pod_on_a_gb200_allows_only_its_cpus_node(case, mems, problem):
    """Item 4: POD-MEMS-LOCAL on the GB200 layout, judged by the check itself on the container's view."""
    from conformance.checks import Evidence
    from conformance.cluster.pods import ContainerRef, InsideFacts
    from suites.test_pods import test_pod_mems_local

    inside = InsideFacts(frozenset(range(8, 16)), frozenset(mems), None, [], [], {}, {}, None)
    ref = ContainerRef("gb200-a", "ml", "llm", "app", "uid-1")
    ev = Evidence()
    if problem is None:
        test_pod_mems_local("gb200-a", ref, inside, _layout(GB200), ev)
        return
    with pytest.raises(AssertionError, match=re.escape(problem)):
        test_pod_mems_local("gb200-a", ref, inside, _layout(GB200), ev)
    assert any("without CPUs (memory-only or empty): 2-33" in line for line in ev.lines)


def test_on_a_gh200_in_cdmm_a_pod_without_the_memory_manager_is_already_local():
    """A GH200 has one node with system memory in CDMM (node 0, its CPUs'): N_MEMORY is {0}, so even an inherited
    cpuset.mems is local; in NUMA mode node 1 (the HBM) joins it and the same pod fails."""
    from conformance.checks.memory_placement import mems_problem

    topo = _layout(GH200)
    assert mems_problem({0}, {0}, topo.cpuless_nodes) is None
    assert "node(s) 1 hold memory and no CPUs" in (mems_problem({0, 1}, {0}, topo.cpuless_nodes) or "")


@pytest.mark.parametrize(
    ("reserved", "outcome"),
    [("[{numaNode: 0, limits: {memory: 100Mi}}]", "passed"),
     ("[{numaNode: 0, limits: {memory: 60Mi}}, {numaNode: 1, limits: {memory: 40Mi}}]", "failed")],
    ids=["on-the-cpu-node", "part-on-the-hbm-node"],
)  # fmt: skip
def test_memory_reserved_on_a_grace_hbm_node_protects_nothing(tmp_path, standins, reserved, outcome):
    """Item 4: the Memory Manager's reservations with HBM nodes. cadvisor lists the GH200's HBM node 1 (no CPUs), so
    the kubelet accepts an entry there and counts it in its sum rule (100Mi: the default hard eviction); the
    system's daemons run on node 0 and use its memory, which that share no longer protects."""
    options = (
        'topologyManagerPolicyOptions: {max-allowable-numa-nodes: "9"}\nmemoryManagerPolicy: Static\n'
        f"reservedMemory: {reserved}\n"
    )
    r = audit(tmp_path, standins, GH200, options=options)["by_check"]["KUBELET-RESERVED-MEMORY"]
    assert r["outcome"] == outcome, r
    if outcome == "failed":
        assert "NUMA node(s) [1], which have no CPUs" in r["message"] and "reserve on the nodes with CPUs" in r["message"]


@pytest.mark.parametrize(("gbps", "outcome"), [(352.4, "passed"), (120.0, "failed")])
def test_a_c2c_gpus_h2d_figure_is_judged_against_the_c2c_floor(gbps, outcome):
    """Item 2: GPU-H2D-LOCAL-BW, on a GH200 GPU (C2C mode on, its PCIe link Gen4 x1), takes the profile's
    gpu.h2d_floor_c2c_gbps (default 250; nvbandwidth issue 23 reports about 350 GB/s on a GH200), never the PCIe
    Gen5 floor. 120 GB/s would pass a Gen5 x16 floor of ~45 and is a failure here. The check itself judges."""
    from conformance.checks import Evidence
    from conformance.config.profile import load_profile
    from conformance.facts.gpu import Gpu, GpuFacts, PciFunction
    from conformance.measurements.gpu_measure import H2DGpu, H2DMeasurement, H2DRow
    from suites.test_gpu import test_gpu_h2d_local_bandwidth

    uuid = "GPU-00000000-0000-4000-8000-000000000001"
    pci = PciFunction(bus_id="0009:01:00.0", numa_node=0, link_gen=4, link_width=1, max_link_gen=4, max_link_width=16)
    gpu = Gpu(index=0, uuid=uuid, bus_id="00000009:01:00.0", name=GH200.product, pcie_gen=4, pcie_width=1,
              pcie_max_gen=4, pcie_max_width=16, pcie_gpu_max_gen=5, pci=pci, c2c=True)  # fmt: skip
    row = H2DRow(node=0, gbps=gbps, samples=[gbps] * 3, binding={"mem_policy": "bind 0"}, pages_on={"0": 64})
    h2d = H2DMeasurement(node="gh200-a", gpus={uuid: H2DGpu(uuid=uuid, bus_id=gpu.bus_id, rows=[row])})
    ev = Evidence()
    visible = GpuFacts(gpus=[gpu], source="nvml")
    if outcome == "passed":
        test_gpu_h2d_local_bandwidth("gh200-a", visible, h2d, load_profile("default"), ev)
    else:
        with pytest.raises(AssertionError, match=r"120.00 GB/s < floor 250(\.0)? GB/s \(NVLink-C2C\)"):
            test_gpu_h2d_local_bandwidth("gh200-a", visible, h2d, load_profile("default"), ev)
    assert any("for NVLink-C2C (the GPU reaches its CPU over NVLink-C2C)" in line for line in ev.lines), ev.lines


def test_an_unread_c2c_mode_on_aarch64_leaves_the_pcie_link_unjudged(tmp_path, standins):
    """Issue 59 item 7: a GH200's driver that does not report its C2C mode (before R550: no <c2c_mode>, no
    nvmlDeviceGetC2cModeInfoV) on an aarch64 node: its PCIe link (Gen4 x1) may not be its host path, so the link is
    an error naming why, never "trained at x1, expected x16". The GH200 root collected for real, then replayed as the
    aarch64 node whose driver lacks the call (this machine is no aarch64 one)."""
    audit(tmp_path, standins, GH200)  # lays the host root out and runs the stand-in driver once
    root = tmp_path / GH200.name
    env = {**os.environ, "GNC_FAKE_GPU_CONFIG": str(root / CONFIG.lstrip("/"))}
    snaps = tmp_path / "snap"
    subprocess.run([sys.executable, "-m", "conformance", "collect", "--host-root", str(root), "--output", str(snaps)],
                   check=True, capture_output=True, timeout=300, env=env)  # fmt: skip
    (snap,) = snaps.glob("*.json")
    doc = json.loads(snap.read_text())
    for r in doc["records"]:
        if r["kind"] == "C" and r["name"] == "uname-m":
            r["text"] = "aarch64\n"
        if r["kind"] == "C" and r["name"] == "nvml-probe":
            probe = json.loads(r["text"])
            for g in probe["gpus"]:
                g.pop("c2c", None)
                g["errors"]["c2c"] = "function not in this driver's NVML"
            r["text"] = json.dumps(probe)
    snap.write_text(json.dumps(doc))
    out = tmp_path / "replayed"
    subprocess.run([sys.executable, "-m", "conformance", "run", "--snapshot", str(snaps), "--output", str(out)],
                   capture_output=True, timeout=300)  # fmt: skip
    got = {r["check"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    r = got["GPU-PCIE-LINK"]
    assert r["outcome"] == "error", r
    assert "NVLink-C2C was not read" in r["message"] and "aarch64" in r["message"] and "trained at" not in r["message"], r
