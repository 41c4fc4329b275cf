"""The GPU lab: nodes whose sysfs shows NVIDIA GPUs and whose /run/nvidia/driver holds the driver
stand-ins (tests/standins), so the NVML probe, the nvidia-smi fallback and the H2D probe run for real
over SSH. Two NUMA nodes are laid over the machine's first two CPUs; memory binding is real only on
node 0 (the machine has one), so every GPU that must pass sits on node 0.

GPU_EXPECTED is the exact outcome of every GPU check on every node, which tests/test_lab_gpu.py asserts."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from tests.gpu_standins import driver_files, gpu_line
from tests.lab.builder import NodeSpec
from tests.lab.nodes import GPU_CHECKS, SAMPLES

NUMA = {0: "0", 1: "1"}
SIBLINGS = {0: "0", 1: "1"}
STANDIN_CPUS = "cpu\t0\t0\ncpu\t1\t1\n"
UUID = {bus: f"GPU-6a4c5e1c-0000-4000-8000-0000000000{bus[5:7]}" for bus in ("0000:18:00.0", "0000:19:00.0", "0000:9a:00.0")}

LAB_PROFILE = """\
extends: default
description: the GPU lab (stand-in driver, copies paced to a few GB/s)
gpu:
  mig: "off"
  h2d_floor_gbps: {4: 1.0, 5: 1.0}
  h2d_buffer_mib: 2
  h2d_copies: 4
  h2d_samples: 3
  h2d_warmup: 1
  h2d_budget_s: 10
"""

SMI_TOPO = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\t0\t0\t\tN/A
GPU1\tSYS\t X \t1\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
"""
# `nvidia-smi nvlink -s` / `-e` in the layout of stas00/ml-engineering's debug.md: GPU0 has four links,
# link 3 down; GPU1 has no NVLink (its header line only).
SMI_NVLINK_S = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a4c5e1c-0000-4000-8000-000000000018)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
\t Link 2: 26.562 GB/s
\t Link 3: <inactive>
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6a4c5e1c-0000-4000-8000-00000000009a)
"""
SMI_NVLINK_E = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a4c5e1c-0000-4000-8000-000000000018)
""" + "".join(
    f"\t Link {i}: {k} Errors: {7 if (i, k) == (1, 'Replay') else 0}\n" for i in range(4) for k in ("Replay", "Recovery", "CRC")
)
SMI_SCRIPT = """\
#!/bin/sh
# nvidia-smi stand-in for the fallback path: the recorded outputs of `-q -x` and `topo -m`.
case "$1 $2" in
  "-q -x") cat /run/nvidia/driver/smi-q.xml ;;
  "topo -m") cat /run/nvidia/driver/smi-topo.txt ;;
  "nvlink -s") cat /run/nvidia/driver/smi-nvlink-s.txt ;;
  "nvlink -e") cat /run/nvidia/driver/smi-nvlink-e.txt ;;
  *) echo "unsupported in the stand-in: $*" >&2; exit 2 ;;
esac
"""


HEALTHY_NVLINK = {"nvlinks": 4, "nvlink_err": "0:0:5", "fabric": "3,0"}


def pci(numa: str, cpus: str, gen_speed: str = "32.0 GT/s PCIe", width: str = "16", vendor: str = "0x10de") -> dict[str, str]:
    return {
        "vendor": vendor,
        "class": "0x030200",
        "numa_node": numa,
        "local_cpulist": cpus,
        "current_link_speed": gen_speed,
        "current_link_width": width,
        "max_link_speed": "32.0 GT/s PCIe",
        "max_link_width": "16",
    }


# Kernel logs (tests/samples/kernel-log.xid.real-lines.txt holds the real lines and their sources).
REAL_XID = (SAMPLES / "kernel-log.xid.real-lines.txt").read_text().splitlines()
BOOT_LINE = "Dec  3 09:00:00 gpu kernel: Linux version 6.1.0-lab (lab@lab) #1 SMP"
# crafted: a kernel Xid line whose text is markup, shell and a terminal escape; and a program's own log
# line that imitates the driver (not the kernel's: ignored)
HOSTILE_XID = "Dec  3 09:10:00 gpu kernel: NVRM: Xid (PCI:0000:18:00): 13, <script>alert(1)</script> $(reboot) \x1b[2J`id`"
FAKE_XID = "Dec  3 09:11:00 gpu python3[4242]: NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."
GOOD_KERN_LOG = (
    "\n".join([REAL_XID[1], BOOT_LINE, REAL_XID[4], HOSTILE_XID, FAKE_XID]) + "\n"
)  # the fatal Xid 79 is of the previous boot
BAD_KERN_LOG = (
    "\n".join([BOOT_LINE, REAL_XID[1].replace("0000:2b:00", "0000:18:00"), REAL_XID[3], HOSTILE_XID]) + "\n"
)  # Xid 79 (the real line, on this node's GPU0), Xid 63 verbatim (a device NVML does not list)
SMI_KERN_LOG = REAL_XID[3].replace("0000:10:1c", "0000:9a:00") + "\n"  # no boot line: the file began after boot
# ... logrotate moved this boot's start into kern.log.1 (compressed from .2 on, as Ubuntu's delaycompress)
SMI_KERN_LOG_1 = BOOT_LINE + "\n" + REAL_XID[4].replace("0000:01:00", "0000:18:00") + "\n"
NVSWITCH = {**{"vendor": "0x10de", "class": "0x068000", "numa_node": "0", "local_cpulist": "0"}}

OTHER_FUNCTIONS = {
    "0000:17:00.0": {**pci("0", "0"), "vendor": "0x8086", "class": "0x020000"},  # a NIC
    "0000:18:00.1": {**pci("0", "0"), "class": "0x040300"},  # the GPU's audio function: not a GPU
}


def gpu_specs(built: dict[str, Path]) -> list[NodeSpec]:
    good_conf = (
        "\n".join(
            [
                gpu_line(
                    uuid=UUID["0000:18:00.0"],
                    name="Stand-in H100",
                    bus="00000000:18:00.0",
                    gen=5,
                    maxgen=5,
                    gpumaxgen=5,
                    cpumask="0x1",
                    nodemask="0x1",
                    **HEALTHY_NVLINK,
                    ecc_vol="4,0",  # corrected errors are shown, not judged (gpu.ecc_corrected_limit null)
                ),
                gpu_line(
                    uuid=UUID["0000:19:00.0"],
                    name="Stand-in H100",
                    bus="00000000:19:00.0",
                    gen=5,
                    maxgen=5,
                    gpumaxgen=5,
                    cpumask="0x1",
                    nodemask="0x1",
                    **HEALTHY_NVLINK,
                    clocks="0x5",  # idle and software power cap: a setting, not a fault
                ),
                "bw\t0\t0\t2.0\nbw\t0\t1\t0.6\nbw\t1\t0\t2.0\nbw\t1\t1\t0.6",
            ]
        )
        + "\n"
        + STANDIN_CPUS
    )
    good = NodeSpec(
        name="gpu-good",
        # GPU-CDI: the spec the toolkit's refresh service writes, for this driver and these GPUs
        files={
            **driver_files(built, good_conf, kern_log=GOOD_KERN_LOG),
            "/var/run/cdi/nvidia.yaml": cdi_spec("550.0-standin", [UUID["0000:18:00.0"], UUID["0000:19:00.0"]]),
        },
        numa=NUMA,
        siblings=SIBLINGS,
        online="0-1",
        pci={"0000:18:00.0": pci("0", "0"), "0000:19:00.0": pci("0", "0"), "0000:05:00.0": NVSWITCH, **OTHER_FUNCTIONS},
        daemons=["nv-fabricmanager", "nvidia-persistenced"],
    )
    bad_conf = (
        "\n".join(
            [
                # trained at Gen4 x8 in a slot that caps it (device-and-slot max Gen4, GPU max Gen5); replays under load
                gpu_line(
                    uuid=UUID["0000:18:00.0"],
                    name="Stand-in H100",
                    bus="00000000:18:00.0",
                    gen=4,
                    width=8,
                    maxgen=4,
                    gpumaxgen=5,
                    replay=100,
                    replay_step=100,
                    cpumask="0x1",
                    nodemask="0x1",
                    # unhealthy in every way the health checks look at
                    ecc_vol="7,2",
                    remap="0,1,1,0",
                    nvlinks=6,
                    nvlink_down="0x2",
                    nvlink_err="0:1:3,2:0:500",
                    # link 4 answers NOT_SUPPORTED (the rest are still judged), link 5's counters fail (unread)
                    nvlink_na="0x10",
                    nvlink_cnt_fail="0x20",
                    fabric="1,0",
                    persistence=0,
                    clocks="0x41",
                ),
                # MIG on; NVML places it on node 1 while sysfs does not know its node
                gpu_line(
                    uuid=UUID["0000:9a:00.0"],
                    name="Stand-in H100",
                    bus="00000000:9A:00.0",
                    gen=5,
                    maxgen=5,
                    gpumaxgen=5,
                    mig=1,
                    cpumask="0x2",
                    nodemask="0x2",
                ),
                "bw\t0\t0\t0.4\nbw\t0\t1\t1.6",
            ]
        )
        + "\n"
        + STANDIN_CPUS
    )
    bad = NodeSpec(
        name="gpu-bad",
        # GPU-CDI: a spec left from the previous driver that names one GPU of two; a second file that is not a spec
        files={
            **driver_files(built, bad_conf, kern_log=BAD_KERN_LOG),
            "/etc/cdi/nvidia.yaml": cdi_spec("535.183.01", [UUID["0000:18:00.0"]]),
            "/etc/cdi/broken.json": '{"cdiVersion": "0.5.0", "kind": "nvidia.com"}',
            # the NVIDIA Container Runtime in cdi mode: CDI is in use whatever the spec folders hold
            "/etc/nvidia-container-runtime/config.toml": '[nvidia-container-runtime]\nmode = "cdi"\n',
        },
        numa=NUMA,
        siblings=SIBLINGS,
        online="0-1",
        pci={
            "0000:18:00.0": pci("0", "0", "16.0 GT/s PCIe", "8"),
            "0000:9a:00.0": pci("-1", "0-1"),
            "0000:c1:00.0": pci("1", "1"),  # on the bus, but the driver never brought it up
            "0000:05:00.0": NVSWITCH,  # and no fabric manager runs
        },
    )
    smi = NodeSpec(
        name="gpu-smi",
        files={
            **driver_files(built, STANDIN_CPUS, nvml=None, cuda=False, kern_log=SMI_KERN_LOG),
            "/var/log/kern.log.1": SMI_KERN_LOG_1,
            "/run/nvidia/driver/usr/bin/nvidia-smi": SMI_SCRIPT,
            "/run/nvidia/driver/smi-q.xml": (SAMPLES / "nvidia-smi_q_x.2gpu.constructed.xml").read_text(),
            "/run/nvidia/driver/smi-topo.txt": SMI_TOPO,
            "/run/nvidia/driver/smi-nvlink-s.txt": SMI_NVLINK_S,
            "/run/nvidia/driver/smi-nvlink-e.txt": SMI_NVLINK_E,
        },
        modes={"/run/nvidia/driver/usr/bin/nvidia-smi": 0o755},
        numa=NUMA,
        siblings=SIBLINGS,
        online="0-1",
        pci={"0000:18:00.0": pci("0", "0"), "0000:9a:00.0": pci("1", "1", "16.0 GT/s PCIe", "8")},
    )
    old_conf = (
        gpu_line(
            uuid=UUID["0000:18:00.0"],
            name="Stand-in A100",
            bus="00000000:18:00.0",
            gen=4,
            maxgen=4,
            cpumask="0x1",
            nodemask="0x1",
            procs="4242",
            remap="na",  # an older GPU: it retires pages instead of remapping rows
            retired="3,1,0",
            persistence=0,
        )
        + "\n"
        + STANDIN_CPUS
    )
    old = NodeSpec(
        name="gpu-old-driver",
        files=driver_files(built, old_conf, nvml="libnvidia-ml-old.so.1"),
        numa=NUMA,
        siblings=SIBLINGS,
        online="0-1",
        pci={"0000:18:00.0": pci("0", "0", "16.0 GT/s PCIe")},
    )
    return [good, bad, smi, old]


# A CDI spec as `nvidia-ctk cdi generate` writes it (tests/samples: toolkit 1.17.8, driver 575.64.03), made for the
# given driver release and GPUs: one device per GPU by index and by UUID, and `all`.
CDI_SAMPLE = SAMPLES / "cdi.nvidia-ctk-1.17.8.driver-575.64.03.salilkadam-infrastructure.yaml"


def cdi_spec(driver: str, uuids: list[str]) -> str:
    doc = yaml.safe_load(CDI_SAMPLE.read_text().replace("575.64.03", driver))
    nodes = [{"path": f"/dev/nvidia{i}"} for i in range(len(uuids))]
    doc["devices"] = [
        *({"name": name, "containerEdits": {"deviceNodes": [node]}} for i, u in enumerate(uuids) for name, node in
          ((str(i), nodes[i]), (u, nodes[i]))),
        {"name": "all", "containerEdits": {"deviceNodes": nodes}},
    ]  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


def _row(**outcomes: str) -> dict[str, str]:
    return {c: outcomes[c.replace("-", "_")] for c in GPU_CHECKS}


GPU_EXPECTED = {
    # the GPU memory mode is a Grace board's: the lab's PCIe GPUs skip it (tests/test_grace.py judges it)
    # GPU-CLUSTER-HEALTH needs the Kubernetes API, which this lab's audit does not use (tests/test_lab_dra.py judges it)
    "gpu-good": {**dict.fromkeys(GPU_CHECKS, "passed"), "GPU-MEMORY-MODE": "skipped", "GPU-CLUSTER-HEALTH": "skipped"},
    "gpu-bad": {**dict.fromkeys(GPU_CHECKS, "failed"), "GPU-MEMORY-MODE": "skipped", "GPU-CLUSTER-HEALTH": "skipped"},
    "gpu-smi": _row(
        GPU_COUNT="passed",
        GPU_NUMA_KNOWN="passed",
        GPU_NUMA_CONSISTENT="passed",
        GPU_PCIE_LINK="failed",
        GPU_PCIE_REPLAY="error",
        GPU_MIG_MODE="failed",
        GPU_DCGM_EXPORTER="skipped",
        GPU_H2D_LOCAL_BW="error",
        GPU_H2D_NUMA_MATRIX="error",
        GPU_ECC_ERRORS="passed",
        GPU_ROW_REMAP="failed",
        GPU_XID_EVENTS="passed",  # Xid 63 (informational) and, in kern.log.1, Xid 31 (application)
        GPU_NVLINK="failed",  # from nvidia-smi nvlink -s: GPU0's link 3 is inactive
        GPU_FABRIC="skipped",
        GPU_PERSISTENCE="passed",
        GPU_CLOCK_EVENTS="passed",  # GPU 9A's hardware slowdown is while busy: not judged
        GPU_MEMORY_MODE="skipped",
        GPU_CDI="skipped",  # no CDI spec, the toolkit in auto mode, no DRA driver: CDI is not in use
        GPU_CLUSTER_HEALTH="skipped",
    ),
    "gpu-old-driver": _row(
        GPU_COUNT="passed",
        GPU_NUMA_KNOWN="passed",
        GPU_NUMA_CONSISTENT="passed",
        GPU_PCIE_LINK="passed",
        GPU_PCIE_REPLAY="skipped",
        GPU_MIG_MODE="passed",
        GPU_DCGM_EXPORTER="skipped",
        GPU_H2D_LOCAL_BW="skipped",
        GPU_H2D_NUMA_MATRIX="skipped",
        GPU_ECC_ERRORS="passed",
        GPU_ROW_REMAP="passed",  # 4 retired pages, none pending
        GPU_XID_EVENTS="passed",
        GPU_NVLINK="skipped",
        GPU_FABRIC="skipped",
        GPU_PERSISTENCE="failed",
        GPU_CLOCK_EVENTS="skipped",  # its only GPU is busy
        GPU_MEMORY_MODE="skipped",
        GPU_CDI="skipped",  # no CDI spec, the toolkit in auto mode, no DRA driver: CDI is not in use
        GPU_CLUSTER_HEALTH="skipped",
    ),
}


def require_two_cpu_gpu_lab() -> None:
    """The GPU labs need root, namespaces, a C compiler for the stand-ins and CPUs 0 and 1."""
    from tests.conftest import require_or_skip
    from tests.gpu_standins import standins_available
    from tests.lab.builder import lab_available

    require_or_skip(lab_available() or standins_available())
    if not {0, 1} <= os.sched_getaffinity(0):
        require_or_skip("the GPU labs lay two NUMA nodes over CPUs 0 and 1; this machine lets us use fewer")


def two_gpu_config(cpu1_node_cpus: str = "1") -> str:
    """The driver stand-ins' description of a node with GPU0 (minor 0) on NUMA node 0 and GPU1 (minor 1)
    on NUMA node 1."""
    masks = ("0x1", hex(sum(1 << int(c) for c in cpu1_node_cpus.split(","))))
    lines = [
        gpu_line(uuid=f"GPU-00000000-0000-4000-8000-0000000000{bus[5:7]}", name="Stand-in H100", bus=f"0000{bus}", minor=i,
                 gen=5, maxgen=5, gpumaxgen=5, cpumask=masks[i], nodemask=hex(1 << i))
        for i, bus in enumerate(("0000:18:00.0", "0000:9A:00.0"))
    ]  # fmt: skip
    return "\n".join(lines) + "\n" + STANDIN_CPUS
