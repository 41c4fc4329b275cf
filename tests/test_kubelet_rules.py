"""Kubelet verdicts that must match what the kubelet itself does with a configuration, each case from
an upstream file or a documented example (see tests/samples/README.md), judged end to end: the real
collector reads a host root through the local transport and the real checks decide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.facts.kubelet import parse_kubelet_args, walk_order
from tests.fakeroot import make_host_root

SAMPLES = Path(__file__).parent / "samples"
# 2 sockets, 16 CPUs, SMT 2: cpu i and i+8 are siblings
TOPOLOGY = {
    "/sys/devices/system/cpu/online": "0-15\n",
    "/sys/devices/system/node/online": "0-1\n",
    "/sys/devices/system/node/node0/cpulist": "0-3,8-11\n",
    "/sys/devices/system/node/node1/cpulist": "4-7,12-15\n",
    **{f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": f"{c % 8},{c % 8 + 8}\n" for c in range(16)},
}
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def verdicts(tmp_path: Path, argv: list[str], files: dict[str, str | None], **process: str) -> dict[str, tuple[str, str]]:
    merged = {k: v for k, v in {**TOPOLOGY, **files}.items() if v is not None}  # None: the node has no such file
    root = make_host_root(tmp_path / "root", argv, merged, **process)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--output", str(out), "--", "-k", "KUBELET"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    doc = json.loads((out / "results.json").read_text())
    assert doc["results"], p.stderr
    return {r["check"]: (r["outcome"], r["message"] + " | " + " ".join(r.get("evidence") or [])) for r in doc["results"]}


# -- the command line: boolean flags never take the next argument (pflag), no list of flags kept ------


@pytest.mark.parametrize(
    "argv",
    [
        # the case: a boolean flag not in any list, then --config as a separate argument
        ["--authentication-token-webhook", "--config", "/etc/kubernetes/kubelet.yaml"],
        # kubeadm's systemd drop-in (10-kubeadm.conf, kubernetes.io "Configuring each kubelet in your cluster using kubeadm")
        ["--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
         "--config=/etc/kubernetes/kubelet.yaml"],
        # klog's -v takes a value (`-v, --v Level` in `kubelet --help`); a boolean then --config
        ["-v", "2", "--rotate-server-certificates", "--config", "/etc/kubernetes/kubelet.yaml", "--node-ip", "10.0.0.7"],
    ],
)  # fmt: skip
def test_config_is_found_whatever_boolean_flags_come_before_it(argv):
    args = parse_kubelet_args(["/usr/bin/kubelet", *argv])
    assert args.config == "/etc/kubernetes/kubelet.yaml"


def test_a_value_is_taken_only_when_it_is_not_a_flag():
    args = parse_kubelet_args(["kubelet", "-v", "2", "--fail-swap-on", "--node-labels", "a=b", "--some-new-bool"])
    assert args.flags == {"v": ["2"], "fail-swap-on": [None], "node-labels": ["a=b"], "some-new-bool": [None]}


def test_drop_ins_are_applied_in_the_kubelets_walk_order():
    """filepath.WalkDir: a folder's contents come where the folder's name sorts, not by whole-path order."""
    found = ["/d/20-x.conf", "/d/20/a.conf", "/d/10.conf", "/d/30/sub/z.conf"]
    assert walk_order("/d", found) == ["/d/10.conf", "/d/20/a.conf", "/d/20-x.conf", "/d/30/sub/z.conf"]


def test_drop_ins_in_subfolders_count(tmp_path):
    files = {
        "/etc/kubernetes/kubelet.yaml": HEAD + "cpuManagerPolicy: none\ntopologyManagerPolicy: none\n",
        "/etc/kubernetes/kubelet.conf.d/10-cpu.conf": HEAD + "cpuManagerPolicy: static\n",
        "/etc/kubernetes/kubelet.conf.d/20-gpu/10-topology.conf": HEAD + "topologyManagerPolicy: single-numa-node\n",
        "/etc/kubernetes/kubelet.conf.d/20-gpu/README": "not a drop-in",
    }
    v = verdicts(tmp_path, ["--config=/etc/kubernetes/kubelet.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d"], files)
    assert v["KUBELET-CPU-POLICY"][0] == "passed"
    assert v["KUBELET-TOPOLOGY-POLICY"][0] == "passed" and "20-gpu/10-topology.conf" in v["KUBELET-TOPOLOGY-POLICY"][1]


# -- full-pcpus-only: the option map is string to string; values are Go booleans ---------------------


@pytest.mark.parametrize(
    ("line", "outcome", "says"),
    [
        ('full-pcpus-only: "true"', "passed", "parses as true"),  # kubernetes.io "CPU Management Policies" example
        ('full-pcpus-only: "True"', "passed", "parses as true"),
        ('full-pcpus-only: "1"', "passed", "parses as true"),
        ("full-pcpus-only: true", "failed", "cannot decode"),  # an unquoted YAML boolean: the kubelet does not start
        ('full-pcpus-only: "yes"', "failed", "strconv.ParseBool"),  # YAML 1.1 habit, not a Go boolean
        ('full-pcpus-only: "false"', "failed", "no full-pcpus-only set to true"),
    ],
)
def test_full_pcpus_only_values_as_the_kubelet_reads_them(tmp_path, line, outcome, says):
    files = {"/etc/kubernetes/kubelet.yaml": HEAD + f"cpuManagerPolicy: static\ncpuManagerPolicyOptions:\n  {line}\n"}
    got, message = verdicts(tmp_path, ["--config=/etc/kubernetes/kubelet.yaml"], files)["KUBELET-CPU-FULL-PCPUS"]
    assert (got, says in message) == (outcome, True), message


def test_full_pcpus_only_from_the_documented_flag(tmp_path):
    files = {"/etc/kubernetes/kubelet.yaml": HEAD + "cpuManagerPolicy: static\n"}
    argv = ["--config=/etc/kubernetes/kubelet.yaml", "--cpu-manager-policy-options=full-pcpus-only=true"]
    assert verdicts(tmp_path, argv, files)["KUBELET-CPU-FULL-PCPUS"][0] == "passed"


# -- reservedMemory: coverage, and the Static policy's sum rule --------------------------------------

# kubernetes.io "Utilizing the NUMA-aware Memory Manager", reserved memory flag example: kube-reserved
# 4Gi + system-reserved 1Gi + the default hard eviction 100Mi = 5220Mi = 3Gi (node 0) + 2148Mi (node 1).
DOCUMENTED_FLAGS = [
    "--kube-reserved=cpu=4,memory=4Gi",
    "--system-reserved=cpu=1,memory=1Gi",
    "--memory-manager-policy=Static",
]


def test_the_documented_reserved_memory_example_adds_up(tmp_path):
    argv = [*DOCUMENTED_FLAGS, "--reserved-memory", "0:memory=3Gi;1:memory=2148Mi"]
    got, message = verdicts(tmp_path, argv, {})["KUBELET-RESERVED-MEMORY"]
    assert got == "passed", message
    assert "memory: reservedMemory sum 5220Mi, kubeReserved + systemReserved + eviction 5220Mi" in message


def test_reserved_memory_that_does_not_add_up_fails_with_both_sums(tmp_path):
    argv = [*DOCUMENTED_FLAGS, "--reserved-memory", "0:memory=3Gi;1:memory=2Gi"]
    got, message = verdicts(tmp_path, argv, {})["KUBELET-RESERVED-MEMORY"]
    assert got == "failed" and "adds up to 5Gi but kubeReserved + systemReserved + hard eviction is 5220Mi" in message


def test_an_explicit_eviction_threshold_counts(tmp_path):
    config = HEAD + "evictionHard:\n  memory.available: 500Mi\n"
    argv = ["--config=/c.yaml", *DOCUMENTED_FLAGS, "--reserved-memory", "0:memory=3Gi;1:memory=2548Mi"]
    assert verdicts(tmp_path, argv, {"/c.yaml": config})["KUBELET-RESERVED-MEMORY"][0] == "passed"


def test_a_hugepages_only_entry_does_not_cover_a_nodes_memory(tmp_path):
    argv = [
        "--kube-reserved=memory=4Gi,hugepages-2Mi=0",
        "--memory-manager-policy=Static",
        "--reserved-memory", "0:memory=4196Mi;1:hugepages-2Mi=0",
    ]  # fmt: skip
    got, message = verdicts(tmp_path, argv, {})["KUBELET-RESERVED-MEMORY"]
    assert got == "failed" and "no memory entry for NUMA node(s) [1]" in message


def test_hugepages_reserved_on_one_side_only_break_the_sum_rule(tmp_path):
    argv = [*DOCUMENTED_FLAGS, "--reserved-memory", "0:memory=3Gi,hugepages-1Gi=2Gi;1:memory=2148Mi"]
    got, message = verdicts(tmp_path, argv, {})["KUBELET-RESERVED-MEMORY"]
    assert (
        got == "failed" and "hugepages-1Gi: reservedMemory adds up to 2Gi but kubeReserved + systemReserved is 0 bytes" in message
    )


# -- reserved CPUs: rounding up, and the layer that decided -------------------------------------------


def test_fractional_cpu_reservation_is_rounded_up_as_the_cpu_manager_does(tmp_path):
    config = HEAD + "kubeReserved:\n  cpu: 1500m\nsystemReserved:\n  cpu: 2100m\n"  # 3.6 -> 4 CPUs = 2 cores x 2 threads
    got, message = verdicts(tmp_path, ["--config=/c.yaml"], {"/c.yaml": config})["KUBELET-RESERVED-CPUS"]
    assert got == "passed" and "= 3.6 CPU(s), rounded up by the CPU manager to 4" in message


def test_a_short_cpu_reservation_names_the_layers_that_set_it(tmp_path):
    config = HEAD + "kubeReserved:\n  cpu: 500m\n"
    argv = ["--config=/c.yaml", "--system-reserved=cpu=1"]
    got, message = verdicts(tmp_path, argv, {"/c.yaml": config})["KUBELET-RESERVED-CPUS"]
    assert got == "failed"
    assert "kubeReserved: file /c.yaml (--config); systemReserved: flag --system-reserved" in message
    assert "rounds up to 2 whole CPU(s); at least 4 expected" in message and "key not set" not in message.split("|")[0]


# -- k3s: the kubelet runs inside the k3s process, configured by --kubelet-arg ---------------------


def test_k3s_kubelet_args_from_its_config_file_and_command_line(tmp_path):
    """docs.k3s.io "Configuration File": flags as YAML keys in /etc/rancher/k3s/config.yaml, drop-ins in
    config.yaml.d; kubelet-arg entries are name=value; the command line wins."""
    files = {
        "/etc/rancher/k3s/config.yaml": (
            'kubelet-arg:\n  - "config=/etc/rancher/k3s/kubelet.config"\n  - "cpu-manager-policy=none"\n'
        ),
        "/etc/rancher/k3s/config.yaml.d/50-gpu.yaml": 'kubelet-arg+:\n  - "topology-manager-policy=single-numa-node"\n',
        "/etc/rancher/k3s/kubelet.config": HEAD + "memoryManagerPolicy: Static\n",
    }
    argv = ["server", "--kubelet-arg=cpu-manager-policy=static"]
    v = verdicts(tmp_path, argv, files, comm="k3s-server", exe="/usr/local/bin/k3s")
    assert v["KUBELET-CPU-POLICY"][0] == "passed" and "flag --cpu-manager-policy" in v["KUBELET-CPU-POLICY"][1]
    assert v["KUBELET-TOPOLOGY-POLICY"][0] == "passed"
    assert v["KUBELET-MEMORY-POLICY"][0] == "passed" and "/etc/rancher/k3s/kubelet.config" in v["KUBELET-MEMORY-POLICY"][1]


def test_no_kubelet_process_says_where_it_looked(tmp_path):
    v = verdicts(tmp_path, [], {}, comm="sleep", exe="/bin/sleep")
    outcome, message = v["KUBELET-CPU-POLICY"]
    assert outcome == "error" and "nor k3s (whose process holds its kubelet)" in message


# hwloc's tests/hwloc/linux/16em64t-4s2c2t-offlines (open-mpi/hwloc, its .output): 16 CPUs on 4 packages of 2
# cores x 2 threads, CPUs 2, 5, 13 and 14 offline (mask 0x6024). The kernel removes an offline CPU's topology
# folder and lists only online siblings; cores: 0+8, 4+12, 1+9, 3+11, 7+15, and 6 and 10 alone.
OFFLINES = {
    "/sys/devices/system/cpu/online": "0-1,3-4,6-12,15\n",
    "/sys/devices/system/node/online": "0\n",
    "/sys/devices/system/node/node0/cpulist": "0-1,3-4,6-12,15\n",
    "/sys/devices/system/node/node1/cpulist": None,
    **{f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": None for c in (2, 5, 13, 14)},
    **{f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": f"{s}\n"
       for c, s in {0: "0,8", 8: "0,8", 4: "4,12", 12: "4,12", 1: "1,9", 9: "1,9", 3: "3,11", 11: "3,11", 7: "7,15",
                    15: "7,15", 6: "6", 10: "10"}.items()},
}  # fmt: skip


def test_reserved_cpus_that_are_offline_are_no_cores(tmp_path):
    """reservedSystemCPUs 2,10: CPU 2 is offline (no topology folder) and 10's sibling is offline. Two 'cores' of
    one thread each passed before; only online CPUs count, and the offline one is named."""
    config = HEAD + 'reservedSystemCPUs: "2,10"\n'
    got, message = verdicts(tmp_path, ["--config=/c.yaml"], {"/c.yaml": config, **OFFLINES})["KUBELET-RESERVED-CPUS"]
    assert got == "failed"
    assert "names CPU(s) 2 that are not online" in message and "holds 1 whole physical core(s) of online CPUs" in message
    config = HEAD + 'reservedSystemCPUs: "0,8,1,9"\n'
    got, _ = verdicts(tmp_path / "b", ["--config=/c.yaml"], {"/c.yaml": config, **OFFLINES})["KUBELET-RESERVED-CPUS"]
    assert got == "passed"


def _state(default: str, entries: dict[str, str]) -> str:
    return json.dumps({"policyName": "static", "defaultCpuSet": default,
                       "entries": {"uid-1": entries} if entries else {}, "checksum": 1})  # fmt: skip


@pytest.mark.parametrize(
    ("options", "default", "entries", "outcome", "says"),
    [
        ("", "0-11,14-15", {"app": "12-13"}, "passed", ""),
        ("", "1-7,9-11,14-15", {"app": "12-13"}, "failed", "reserved CPUs 0,8 are not in defaultCpuSet"),
        ("", "0-11", {"app": "12-13"}, "failed", "are not the CPUs the node has 0-15"),
        ("", "", {"app": "12-13"}, "failed", "defaultCpuSet is empty while CPUs are assigned"),
        ('cpuManagerPolicyOptions: {strict-cpu-reservation: "true"}\n', "0-11,14-15", {"app": "12-13"}, "failed",
         "strictly reserved CPUs 0,8 are in defaultCpuSet"),
        ('cpuManagerPolicyOptions: {strict-cpu-reservation: "true"}\n', "1-7,9-11,14-15", {"app": "12-13"}, "passed", ""),
    ],
)  # fmt: skip
def test_the_static_policys_own_start_up_rules_for_its_checkpoint(tmp_path, options, default, entries, outcome, says):
    """pkg/kubelet/cm/cpumanager/policy_static.go validateState: the kubelet refuses to start on a checkpoint whose
    reserved CPUs are not in the default set (under strict-cpu-reservation: are in it), or whose default set and
    assignments are not exactly the node's CPUs; KUBELET-CPU-STATE passed such checkpoints before."""
    config = HEAD + 'cpuManagerPolicy: static\nreservedSystemCPUs: "0,8"\n' + options
    files = {"/c.yaml": config, "/var/lib/kubelet/cpu_manager_state": _state(default, entries)}
    got, message = verdicts(tmp_path, ["--config=/c.yaml"], files)["KUBELET-CPU-STATE"]
    assert got == outcome and says in message, message


def test_an_irq_whose_configured_mask_reaches_exclusive_cpus_fails(tmp_path):
    """A NIC queue's effective target is reserved cpu0, but its smp_affinity_list still allows CPUs the CPU manager
    hands out exclusively (all but the reserved 0 and 8): the kernel may move it there at the next migration or
    hotplug event (irq-affinity.rst). It passed when
    only the effective target was judged. A kernel-managed NVMe queue is still judged where it is delivered."""
    state = json.dumps({"policyName": "static", "defaultCpuSet": "0-3,8-15", "entries": {"uid-1": {"app": "4-7"}},
                        "checksum": 1})  # fmt: skip
    files = {
        "/c.yaml": HEAD + 'cpuManagerPolicy: static\nreservedSystemCPUs: "0,8"\n',
        "/var/lib/kubelet/cpu_manager_state": state,
        "/proc/1/status": "Name:\tsystemd\nCpus_allowed_list:\t0,8\n",
        "/proc/cmdline": "BOOT_IMAGE=/vmlinuz quiet\n",
        "/proc/irq/31/smp_affinity_list": "0-7\n",
        "/proc/irq/31/effective_affinity_list": "0\n",
        "/proc/irq/31/mlx5_comp0@pci:0000:17:00.0/.keep": "",
        "/proc/irq/40/smp_affinity_list": "0-7\n",  # kernel-managed (an NVMe I/O queue): judged where it is delivered
        "/proc/irq/40/effective_affinity_list": "8\n",
        "/proc/irq/40/nvme0q1/.keep": "",
    }
    got, message = verdicts(tmp_path, ["--config=/c.yaml"], files)["NODE-SYSTEM-CPUS-ISOLATED"]
    assert got == "failed", message
    assert (
        "31 (mlx5_comp0@pci:0000:17:00.0) -> none now, smp_affinity_list 0-7" in message
        and "nvme0q1" not in message.split("|")[0]
    )
