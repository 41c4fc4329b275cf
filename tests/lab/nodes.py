"""The lab's nodes: one fully conformant, the others broken in known ways, and one down.

EXPECTED is the exact outcome of every check on every node, which the lab test asserts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.lab.builder import VERSIONS, NodeSpec

SAMPLES = Path(__file__).resolve().parent.parent / "samples"

GOOD_SYSCTLS = {
    "net.ipv4.tcp_tw_reuse": "1",
    "net.core.somaxconn": "65535",
    "net.ipv4.ip_local_port_range": "1024 65535",
    "net.ipv4.ip_local_reserved_ports": "30000-32767",
}

GOOD_KUBELET = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
cpuManagerReconcilePeriod: 5s
topologyManagerPolicy: best-effort
topologyManagerScope: container
memoryManagerPolicy: Static
reservedSystemCPUs: "0,4,8,12"
# The Static memory manager's start-up rule: 1Gi + 1Gi = kubeReserved 1Gi + systemReserved 924Mi + the
# default hard eviction threshold 100Mi.
kubeReserved: {memory: 1Gi}
systemReserved: {memory: 924Mi}
reservedMemory:
  - numaNode: 0
    limits: {memory: 1Gi}
  - numaNode: 1
    limits: {memory: 1Gi}
# pods may set these (their network namespaces start from kernel defaults); a pattern covers net.core
allowedUnsafeSysctls: [net.ipv4.tcp_tw_reuse, "net.core.*"]
"""
# Drop-in that the kubelet applies over the file: the good node's topology policy comes from here.
TOPOLOGY_DROPIN = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
topologyManagerPolicy: single-numa-node
"""
GOOD_CPU_STATE = json.dumps(
    {
        "policyName": "static",
        "defaultCpuSet": "0-1,4-5,8-9,12-13",
        "entries": {
            "5c4d0a3e-0000-4000-8000-000000000001": {"app": "2-3,10-11"},
            # an app container reusing its init container's CPUs is allowed
            "5c4d0a3e-0000-4000-8000-000000000002": {"init": "6-7,14-15", "app": "6-7,14-15"},
        },
        "checksum": 1,
    }
)
MEMORY_STATE = json.dumps({"policyName": "Static", "machineState": {"0": {"cells": [0]}, "1": {"cells": [1]}}, "checksum": 1})
CONTAINERD_V3_MAIN = """\
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
"""
# The imported file sets runc's option over the main file's (version 3: containerd 2.x deep-merges).
CONTAINERD_V3_NVIDIA = """\
version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
      BinaryName = "/usr/bin/nvidia-container-runtime"
      SystemdCgroup = true
"""
CONTAINERD_V2_CGROUPFS = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
"""

# A version 2 main file that configures runc, and a drop-in that adds only the NVIDIA handler (as the
# NVIDIA Container Toolkit writes one): containerd 2.x deep-merges it and runc keeps SystemdCgroup;
# containerd 1.x replaces the whole CRI section with the drop-in's: runc, the default handler, is gone and
# the CRI plugin does not load (ValidatePluginConfig; the real 1.6.20 shows it: tests/test_containerd_real.py).
CONTAINERD_V2_MAIN = """\
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""
CONTAINERD_V2_NVIDIA_ONLY = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
    SystemdCgroup = true
"""
CONTAINERD_2_0 = "containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542"
CONTAINERD_1_7 = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da"

GOOD_FILES = {
    "/etc/kubernetes/kubelet-config.yaml": GOOD_KUBELET,
    "/etc/kubernetes/kubelet.conf.d/10-topology.conf": TOPOLOGY_DROPIN,
    "/etc/kubernetes/kubelet.conf.d/README": "not a drop-in: only *.conf files count {{{",
    "/var/lib/kubelet/cpu_manager_state": GOOD_CPU_STATE,
    "/var/lib/kubelet/memory_manager_state": MEMORY_STATE,
    "/etc/containerd/config.toml": CONTAINERD_V3_MAIN,
    "/etc/containerd/conf.d/99-nvidia.toml": CONTAINERD_V3_NVIDIA,
    # systemd keeps itself and every service on the reserved CPUs (reservedSystemCPUs 0,4,8,12)
    "/etc/systemd/system.conf": "[Manager]\n#CPUAffinity=\n",
    "/etc/systemd/system.conf.d/50-reserved-cpus.conf": "[Manager]\nCPUAffinity=0 4,8 12\n",
}
# Interrupts steered to the reserved CPUs; one without a handler (delivers nothing) may go anywhere
GOOD_IRQS = {24: ("0,4", ["nvme0q0"]), 25: ("8,12", ["mlx5_comp0@pci:0000:17:00.0"]), 9: ("0-15", [])}
GOOD_ARGS = ["--config=/etc/kubernetes/kubelet-config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d", "--v=2"]

BAD_KUBELET_JSON = json.dumps(
    {
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "cgroupDriver": "systemd",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "cpuManagerPolicy": "static",  # overridden by --cpu-manager-policy=none
        "cpuManagerReconcilePeriod": "30s",
        "topologyManagerPolicy": "best-effort",
        "topologyManagerScope": "pod",
        "memoryManagerPolicy": "None",
        "reservedSystemCPUs": "0",
        "cgroupsPerQOS": False,
    },
    indent=2,
)


# Values planted on the 'hostile' node: none may execute anywhere, and no secret may reach an output.
PLANTED_SECRETS = ("PLANTED-REGISTRY-SECRET", "PLANTED-FLAG-SECRET", "PLANTED-KUBELET-TOKEN")
MARKERS = ("pwned-cmdsub", "pwned-backtick", "pwned-semicolon", "pwned-import", "pwned-import2", "pwned-file")
HOSTILE_CONFIG = "/etc/kubernetes/k$(touch /tmp/pwned-cmdsub).yaml"
HOSTILE_CONTAINERD = """\
version = 3
imports = ["/etc/containerd/$(touch /tmp/pwned-import)/*.toml", "`touch /tmp/pwned-import2`.toml", "conf.d/*.toml"]
[plugins.'io.containerd.cri.v1.images'.registry.configs.'registry.example.com'.auth]
  username = "puller"
  password = "PLANTED-REGISTRY-SECRET"
"""
HOSTILE_IMPORT = """\
version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def specs() -> list[NodeSpec]:
    good = NodeSpec(
        name="good",
        kubelet_args=GOOD_ARGS,
        files=dict(GOOD_FILES),
        sysctls=GOOD_SYSCTLS,
        nvme={"nvme0n1": "[none] mq-deadline kyber", "nvme1n1": "[none] mq-deadline"},
        # an unprivileged account, for which the CPU checkpoint and containerd's drop-in folder are unreadable
        users=["auditor"],
        modes={"/var/lib/kubelet/cpu_manager_state": 0o600, "/etc/containerd/conf.d": 0o700},
        # a NIC queue allowed on the reserved CPUs (as irqbalance's banned list leaves it), which the interrupt
        # controller delivers to cpu4 only
        irqs={**GOOD_IRQS, 26: ("0,4,8,12", ["i40e-eth0-TxRx-0"])},
        effective_irqs={26: "4"},
        managed_irqs=[],  # debugfs readable: no IRQ is kernel-managed
    )
    hostile = NodeSpec(
        name="hostile",
        kubelet_args=[
            f"--config={HOSTILE_CONFIG}",
            "--node-labels=x=`touch /tmp/pwned-backtick`",
            "--hostname-override=a;touch /tmp/pwned-semicolon",
            "--bootstrap-token=PLANTED-FLAG-SECRET",
        ],
        files={
            HOSTILE_CONFIG: GOOD_KUBELET.replace("best-effort", "single-numa-node")
            + "staticPodURLHeader: {token: PLANTED-KUBELET-TOKEN}\ntoken: PLANTED-KUBELET-TOKEN\n",
            "/var/lib/kubelet/cpu_manager_state": "<sparse 2147483648>",  # 2 GiB: the read bound
            "/var/lib/kubelet/memory_manager_state": MEMORY_STATE,
            "/etc/containerd/config.toml": HOSTILE_CONTAINERD,
            "/etc/containerd/conf.d/50 $(touch pwned-file) `touch pwned-file`.toml": HOSTILE_IMPORT,
        },
        # A named pipe where the kubelet's config dir would be read and among containerd's imports: opening
        # one blocks until a writer comes, so the collector must not open it.
        fifos=["/etc/containerd/conf.d/60-pipe.toml"],
        sysctls=GOOD_SYSCTLS,
        nvme={"nvme0n1": b"\xff\xfe[none] \xc3\x28\n"},  # not UTF-8
        pid1_cpus="0-1",  # no CPUAffinity=: PID 1 and every service may use every CPU (the lab has two)
        versions={**VERSIONS, "kubelet": "hang"},  # its kubelet was installed by hand: no package owns it
    )
    bad_kubelet = NodeSpec(
        name="bad-kubelet",
        # --config as a separate argument, at a non-default path, JSON; a flag overrides the file.
        kubelet_args=["--config", "/opt/k8s/kubelet.json", "--cpu-manager-policy=none"],
        files={
            "/opt/k8s/kubelet.json": BAD_KUBELET_JSON,
            "/var/lib/kubelet/cpu_manager_state": GOOD_CPU_STATE,
            "/var/lib/kubelet/memory_manager_state": (SAMPLES / "memory_manager_state.none.gengwg.json").read_text(),
            "/etc/containerd/config.toml": (SAMPLES / "containerd.config.v2.systemdcgroup.containerd-docs.toml").read_text(),
        },
        sysctls=GOOD_SYSCTLS,
    )
    bad_runtime = NodeSpec(
        name="bad-runtime",
        kubelet_args=GOOD_ARGS,
        files={**GOOD_FILES, "/etc/containerd/config.toml": CONTAINERD_V2_CGROUPFS},
        sysctls={
            "net.ipv4.tcp_tw_reuse": "0",
            "net.core.somaxconn": "4096",
            "net.ipv4.ip_local_port_range": "32768 60999",
            "net.ipv4.ip_local_reserved_ports": "",
        },
        nvme={"nvme0n1": "[none] mq-deadline"},
        cgroup="v1",
        kubepods=None,
        # an NVMe I/O queue's interrupt (kernel-managed: only isolcpus=managed_irq moves it) on cpu5, and a NIC
        # queue irqbalance put on cpu6, both CPUs the CPU manager hands out exclusively
        irqs={**GOOD_IRQS, 31: ("5", ["nvme0q5"]), 32: ("6", ["mlx5_comp6@pci:0000:17:00.0"])},
    )
    del bad_runtime.files["/etc/containerd/conf.d/99-nvidia.toml"]
    crio_kubelet = GOOD_KUBELET.replace("unix:///run/containerd/containerd.sock", "unix:///var/run/crio/crio.sock")
    bad_state = NodeSpec(
        name="bad-state",
        kubelet_args=GOOD_ARGS,
        files={
            "/etc/kubernetes/kubelet-config.yaml": crio_kubelet,
            "/etc/kubernetes/kubelet.conf.d/10-topology.conf": TOPOLOGY_DROPIN,
            "/var/lib/kubelet/cpu_manager_state": '{"policyName": "static", "defaultCpuSet": "0-',
            "/var/lib/kubelet/memory_manager_state": MEMORY_STATE,
            "/etc/crio/crio.conf.d/02-cgroup-manager.conf": (
                SAMPLES / "crio.conf.d.02-cgroup-manager.cgroupfs.k8s-docs.toml"
            ).read_text(),
        },
        sysctls=GOOD_SYSCTLS,
        containerd=None,  # a CRI-O node
        numa={0: "0-4,8-11", 1: "4-7,12-15"},  # cpu4 in two nodes
        nvme={"nvme0n1": "none [mq-deadline]"},
        kubepods="kubepods",
        pid1_cpus="0-1",  # no CPUAffinity=: PID 1 and every service may use every CPU (the lab has two)
    )
    down = NodeSpec(name="down", up=False)
    drop_in = {
        **GOOD_FILES,
        "/etc/containerd/config.toml": CONTAINERD_V2_MAIN,
        "/etc/containerd/conf.d/99-nvidia.toml": CONTAINERD_V2_NVIDIA_ONLY,
    }
    containerd2 = NodeSpec(
        name="containerd2", kubelet_args=GOOD_ARGS, files=drop_in, sysctls=GOOD_SYSCTLS, containerd=CONTAINERD_2_0
    )
    containerd1 = NodeSpec(
        name="containerd1",
        kubelet_args=GOOD_ARGS,
        files=drop_in,
        sysctls=GOOD_SYSCTLS,
        containerd=CONTAINERD_1_7,
        versions={**VERSIONS, "kubelet": "Kubernetes v1.26.15"},  # before ip_local_reserved_ports became safe
    )
    return [good, bad_kubelet, bad_runtime, bad_state, hostile, down, containerd2, containerd1]


ALL_CHECKS = [
    "KUBELET-CPU-POLICY",
    "KUBELET-CPU-FULL-PCPUS",
    "KUBELET-CPU-RECONCILE",
    "KUBELET-TOPOLOGY-POLICY",
    "KUBELET-TOPOLOGY-SCOPE",
    "KUBELET-MEMORY-POLICY",
    "KUBELET-RESERVED-MEMORY",
    "KUBELET-RESERVED-CPUS",
    "KUBELET-CGROUP-DRIVER",
    "KUBELET-CGROUPS-PER-QOS",
    "KUBELET-CPU-STATE",
    "NODE-CGROUP-V2",
    "RUNTIME-SYSTEMD-CGROUP",
    "SYSCTL-TCP-TW-REUSE",
    "SYSCTL-SOMAXCONN",
    "SYSCTL-PORT-RANGE",
    "NODE-NUMA-TOPOLOGY",
    "NODE-NVME-SCHEDULER",
    "KUBELET-ALLOWED-UNSAFE-SYSCTLS",
    "NODE-SYSTEM-CPUS-ISOLATED",
    "FLEET-CONSISTENT",  # the nodes of one lab run form one group (profile default): each compared with the majority
]
POD_CHECKS = [
    "POD-QOS-GUARANTEED",
    "POD-CPUS-EXCLUSIVE",
    "POD-CPUS-SINGLE-NUMA",
    "POD-GPU-NUMA-ALIGNED",
    "POD-MEMS-LOCAL",
    "POD-FULL-CORES",
    "POD-THREAD-AFFINITY",
    "POD-THREAD-ENV",
    "POD-SHM-SIZE",
    "POD-RUNTIME-CLASS",
    "POD-SYSCTL-TCP-TW-REUSE",
    "POD-SYSCTL-SOMAXCONN",
    "POD-SYSCTL-PORT-RANGE",
    "POD-CPU-THROTTLING",
    "RUNTIME-CLASS-HANDLER",
]
GPU_CHECKS = [
    "GPU-COUNT",
    "GPU-NUMA-KNOWN",
    "GPU-NUMA-CONSISTENT",
    "GPU-PCIE-LINK",
    "GPU-PCIE-REPLAY",
    "GPU-MIG-MODE",
    "GPU-DCGM-EXPORTER",
    "GPU-H2D-LOCAL-BW",
    "GPU-H2D-NUMA-MATRIX",
    "GPU-ECC-ERRORS",
    "GPU-ROW-REMAP",
    "GPU-XID-EVENTS",
    "GPU-NVLINK",
    "GPU-FABRIC",
    "GPU-PERSISTENCE",
    "GPU-CLOCK-EVENTS",
    "GPU-MEMORY-MODE",
    "GPU-CDI",
    "GPU-CLUSTER-HEALTH",
]


def _row(default: str, **changes: str) -> dict[str, str]:
    row = dict.fromkeys(ALL_CHECKS, default)
    row.update(dict.fromkeys(GPU_CHECKS, "error" if default == "error" else "skipped"))  # these nodes have no GPU
    row.update(dict.fromkeys(POD_CHECKS, "skipped"))  # no Kubernetes API in the lab audit: no pods to check
    row["LATENCY-JITTER"] = "skipped"  # the lab's nodes name no endpoint (tests/test_latency.py measures)
    row.update({k.replace("_", "-"): v for k, v in changes.items()})
    return row


EXPECTED: dict[str, dict[str, str]] = {
    "good": _row("passed"),
    "bad-kubelet": _row(
        "passed",
        KUBELET_ALLOWED_UNSAFE_SYSCTLS="failed",  # pods setting tcp_tw_reuse or somaxconn would be rejected
        KUBELET_CPU_POLICY="failed",
        KUBELET_CPU_FULL_PCPUS="failed",
        KUBELET_CPU_RECONCILE="failed",
        KUBELET_TOPOLOGY_POLICY="failed",
        KUBELET_TOPOLOGY_SCOPE="failed",
        KUBELET_MEMORY_POLICY="failed",
        KUBELET_RESERVED_MEMORY="failed",
        KUBELET_RESERVED_CPUS="failed",
        KUBELET_CGROUPS_PER_QOS="failed",
        KUBELET_CPU_STATE="failed",
        NODE_NVME_SCHEDULER="skipped",
        NODE_SYSTEM_CPUS_ISOLATED="skipped",  # the none policy hands out no CPU exclusively
        FLEET_CONSISTENT="failed",  # its kubelet configuration is not its peers'
    ),
    "bad-runtime": _row(
        "passed",
        NODE_CGROUP_V2="failed",
        RUNTIME_SYSTEMD_CGROUP="failed",
        SYSCTL_TCP_TW_REUSE="failed",
        SYSCTL_SOMAXCONN="failed",
        SYSCTL_PORT_RANGE="failed",
        NODE_SYSTEM_CPUS_ISOLATED="failed",  # IRQ 31 (kernel-managed) on cpu5, IRQ 32 on cpu6
        FLEET_CONSISTENT="failed",  # its sysctls are not its peers'
    ),
    "bad-state": _row(
        "passed",
        KUBELET_CPU_STATE="error",
        NODE_NUMA_TOPOLOGY="failed",
        NODE_NVME_SCHEDULER="failed",
        RUNTIME_SYSTEMD_CGROUP="failed",
        KUBELET_CGROUP_DRIVER="failed",
        NODE_SYSTEM_CPUS_ISOLATED="failed",  # no CPUAffinity=, no system.slice cpuset: PID 1 runs on every CPU
        FLEET_CONSISTENT="failed",  # CRI-O where its peers run containerd; another kubelet configuration
    ),
    "hostile": _row(
        "passed",
        KUBELET_CPU_STATE="error",
        NODE_NVME_SCHEDULER="error",
        RUNTIME_SYSTEMD_CGROUP="failed",  # its config imports a file that does not exist: containerd refuses to start
        NODE_SYSTEM_CPUS_ISOLATED="failed",
        KUBELET_ALLOWED_UNSAFE_SYSCTLS="error",  # ip_local_reserved_ports is safe from 1.27: the release is unknown
        FLEET_CONSISTENT="failed",  # another kubelet configuration
    ),
    "down": _row("error"),
    # the same files, merged as each release merges them (the release from the running binary's --version)
    "containerd2": _row("passed", NODE_NVME_SCHEDULER="skipped"),
    "containerd1": _row(
        "passed",
        FLEET_CONSISTENT="failed",  # kubelet 1.26 and containerd 1.7 where its peers run 1.31 and 2.0
        NODE_NVME_SCHEDULER="skipped",
        RUNTIME_SYSTEMD_CGROUP="failed",
        KUBELET_ALLOWED_UNSAFE_SYSCTLS="failed",  # kubelet 1.26 rejects pods setting ip_local_reserved_ports
    ),
}
VERDICTS = {
    "good": "accepted",
    "bad-kubelet": "rejected",
    "bad-runtime": "rejected",
    "bad-state": "rejected",
    "hostile": "rejected",
    "down": "unreachable",
    "containerd2": "accepted",
    "containerd1": "rejected",
}
# A node judged alone (in-cluster, or the local transport inside it) has no peer for FLEET-CONSISTENT and the lab
# pins nothing: a fleet of one is skipped, saying why (issue 54); every other check is judged as in the SSH audit
# of the whole lab.
EXPECTED_ALONE = {name: {**row, "FLEET-CONSISTENT": "skipped"} for name, row in EXPECTED.items()}
