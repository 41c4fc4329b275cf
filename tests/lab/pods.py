"""Lab "pods": real process trees inside a lab node's namespaces, each with its own mount and PID
namespaces, a private /dev (with /dev/shm of the chosen size and /dev/nvidia<N> nodes), its environment,
and CPU affinity really set with taskset (a thread may pin itself elsewhere). The fake API server's
exec runs commands in them with nsenter, with the container's CPUs, as an exec joins the container's
cgroup. The machine has two CPUs and one real NUMA node: the node's sysfs lays NUMA node 0 on cpu0
and node 1 on cpu1, and memory binding is real only on node 0 (so Mems_allowed_list reads 0)."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakeapi import pod_object
from tests.lab.builder import Lab


def containerd_config(handlers: dict[str, bool]) -> str:
    """A containerd 1.x config (version 2) with runc as the default and these handlers: name -> SystemdCgroup."""
    cri = 'plugins."io.containerd.grpc.v1.cri".containerd'
    out = ["version = 2", f"[{cri}]", '  default_runtime_name = "runc"']
    for name, systemd in {"runc": True, **handlers}.items():
        out += [f"[{cri}.runtimes.{name}]", '  runtime_type = "io.containerd.runc.v2"', f"[{cri}.runtimes.{name}.options]"]
        if name != "runc":
            out.append('  BinaryName = "/usr/bin/nvidia-container-runtime"')
        out.append(f"  SystemdCgroup = {'true' if systemd else 'false'}")
    return "\n".join(out) + "\n"


# The container's main program: a Python process with a worker thread that may pin itself elsewhere.
PROGRAM = """\
import os, sys, threading, time
stray = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "-" else None
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 0):  # busy workers: processes that never sleep
    if os.fork() == 0:
        spins = 0
        while True:
            spins += 1
def work():
    if stray is not None:
        os.sched_setaffinity(0, {stray})
    while True:
        time.sleep(0.02)
threading.Thread(target=work, daemon=True).start()
while True:
    time.sleep(0.02)
"""


@dataclass
class LabPod:
    name: str
    uid: str
    cpus: str  # what taskset gives the container (its cgroup's cpuset, in a real node)
    gpus: list[int] = field(default_factory=list)  # /dev/nvidia<N> minors it sees
    env: dict[str, str] = field(default_factory=dict)
    shm_mib: int = 64
    requests: dict[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "1Gi"})
    limits: dict[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "1Gi"})
    gpu_count: int = 1
    runtime_class: str | None = "nvidia"
    share_pid: bool = False  # PID 1 is the pause process, as with shareProcessNamespace
    init: str | None = None  # an init container's name (its CPUs in cpu_manager_state only)
    restartable_init: str | None = None  # a sidecar init container (restartPolicy: Always), pinned with the app
    sidecar: str | None = None  # a second app container with a fractional CPU request (shared pool, no process)
    stray_cpu: int | None = None  # a worker thread pins itself here
    has_shell: bool = True
    running: bool = True  # False: known to the API only (it vanishes, or has no shell)
    namespace: str = "inference"
    container: str = "app"
    pid: int | None = None
    cgroup: Path | None = None  # the container's cgroup (its main process and every exec join it)
    host_network: bool = False  # True: the node's network namespace; else one of its own (kernel defaults)
    sysctls: dict[str, str] = field(default_factory=dict)  # set in its own network namespace (securityContext.sysctls)
    cfs_quota_us: int | None = None  # a CFS quota per 100 ms period on its CPU cgroup (the kubelet's, from the CPU limit)
    busy: int = 0  # busy worker processes: with a quota below them, the container is really throttled
    cpu_cgroup: Path | None = None  # its cgroup in the machine's cgroup v1 cpu hierarchy
    # DRA: pod claim entry -> ResourceClaim name (spec.resourceClaims[].resourceClaimName), and entries made
    # from a template (resourceClaimTemplateName; the claim's name in status.resourceClaimStatuses)
    claims: dict[str, str] = field(default_factory=dict)
    claim_templates: dict[str, str] = field(default_factory=dict)
    # DRA extended resources (KEP-5004): the special claim the scheduler made for the container's nvidia.com/gpu
    # request, named in status.extendedResourceClaimStatus with the request it maps to
    extended_claim: tuple[str, str] | None = None

    def api_object(self, node: str) -> dict[str, Any]:
        gpu = {"nvidia.com/gpu": str(self.gpu_count)} if self.gpu_count else {}
        resources: dict[str, Any] = {"requests": {**self.requests, **gpu}, "limits": {**self.limits, **gpu}}
        entries = [*self.claims, *self.claim_templates]
        if entries:
            resources["claims"] = [{"name": e} for e in entries]
        pod_claims = [{"name": e, "resourceClaimName": c} for e, c in self.claims.items()]
        pod_claims += [{"name": e, "resourceClaimTemplateName": f"{e}-template"} for e in self.claim_templates]
        made = [{"name": e, "resourceClaimName": c} for e, c in self.claim_templates.items()]
        own = {"requests": self.requests, "limits": self.limits}
        inits = [{"name": self.init, "resources": own}] if self.init else []
        if self.restartable_init:
            inits.append({"name": self.restartable_init, "resources": own, "restartPolicy": "Always"})
        containers = [{"name": self.container, "resources": resources}]
        if self.sidecar:
            small = {"cpu": "100m", "memory": "64Mi"}
            containers.append({"name": self.sidecar, "resources": {"requests": small, "limits": small}})
        return pod_object(self.namespace, self.name, self.uid, node, containers, init_containers=inits or None,
                          runtime_class=self.runtime_class, share_pid=self.share_pid, host_network=self.host_network,
                          resource_claims=pod_claims or None, claim_statuses=made or None,
                          extended_claim=self._extended())  # fmt: skip

    def _extended(self) -> dict | None:
        if self.extended_claim is None:
            return None
        claim, request = self.extended_claim
        mapping = {"containerName": self.container, "resourceName": "nvidia.com/gpu", "requestName": request}
        return {"resourceClaimName": claim, "requestMappings": [mapping]}


def cpu_hierarchy() -> tuple[Path, str] | None:
    """The machine's cgroup v1 hierarchy with the cpu controller: (mount point, its mount options)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] == "cgroup" and "cpu" in parts[3].split(","):
            known = {"cpu", "cpuacct"}
            return Path(parts[1]), ",".join(o for o in parts[3].split(",") if o in known)
    return None


def start(lab: Lab, node_name: str, pod: LabPod) -> None:
    """Start the pod's process tree in the node's mount namespace, in a network namespace of its own
    (or the node's, for hostNetwork), with its CPU cgroup (and CFS quota) in the cgroup v1 cpu hierarchy."""
    node_pid = lab.node_pid(node_name)
    q = shlex.quote
    env = " ".join(q(f"{k}={v}") for k, v in pod.env.items())
    stray = str(pod.stray_cpu) if pod.stray_cpu is not None else "-"
    main = f"env -i PATH=/usr/bin:/bin {env} taskset -c {q(pod.cpus)} python3 -c {q(PROGRAM)} {stray} {pod.busy}"
    lines = [
        "set -e",
        "mount -t tmpfs -o size=4m,mode=755 dev /dev",
        "mknod -m 666 /dev/null c 1 3",
        "mkdir /dev/shm",
        f"mount -t tmpfs -o size={pod.shm_mib}m shm /dev/shm",
        *[f"mknod -m 666 /dev/nvidia{m} c 195 {m}" for m in pod.gpus],
        "mknod -m 666 /dev/nvidiactl c 195 255",
        *[f"echo {q(v)} > /proc/sys/{q(k.replace('.', '/'))}" for k, v in pod.sysctls.items()],
    ]
    hierarchy = cpu_hierarchy()
    if hierarchy is not None:
        mount, opts = hierarchy
        rel = f"{lab.cg_dir.name}/pods/{pod.uid}/{pod.container}"
        pod.cpu_cgroup = mount / rel
        pod.cpu_cgroup.mkdir(parents=True)
        if pod.cfs_quota_us is not None:
            (pod.cpu_cgroup / "cpu.cfs_quota_us").write_text(str(pod.cfs_quota_us))
        # the container sees the cpu hierarchy where a v1 node mounts it, and runs in its own cgroup there
        lines += [
            "mount -t tmpfs -o size=1m cgroup /sys/fs/cgroup",
            f"mkdir /sys/fs/cgroup/{opts}",
            f"mount -t cgroup -o {opts} cgroup /sys/fs/cgroup/{opts}",
            f"echo $$ > /sys/fs/cgroup/{opts}/{q(rel)}/cgroup.procs",
        ]
    lines.append(f"{main} & exec {q(str(lab.root / 'bin' / 'pause'))}" if pod.share_pid else f"exec {main}")
    own_net = [] if pod.host_network else ["--net"]
    p = subprocess.Popen(
        ["nsenter", "-t", str(node_pid), "-m", "-n", "--", "unshare", "--mount", "--pid", "--fork", "--mount-proc", *own_net,
         "sh", "-c", "\n".join(lines)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    pod.pid = p.pid  # unshare; the pod's PID 1 is its child
    # Each container in its own cgroup, the sandbox (pause) in another, as the kubelet lays them out: an
    # exec joins the container's cgroup, which is how the pod checks tell its processes from the rest.
    base = lab.cg_dir / "pods" / pod.uid
    pod.cgroup = base / pod.container
    pod.cgroup.mkdir(parents=True)
    (base / "sandbox").mkdir()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        first = kids[0] if kids else None
        main = subprocess.run(["pgrep", "-P", first], capture_output=True, text=True).stdout.split() if first else []
        comm = Path(f"/proc/{first}/comm").read_text().strip() if first else ""
        if first and (comm == "python3" or (comm == "pause" and main)):
            break
        time.sleep(0.05)
    else:
        raise RuntimeError(f"lab pod {pod.name} did not start")
    if comm == "pause":
        (base / "sandbox" / "cgroup.procs").write_text(first)
        (pod.cgroup / "cgroup.procs").write_text(main[0])
    else:
        (pod.cgroup / "cgroup.procs").write_text(first)


def wait_until_strayed(pod: LabPod, timeout: float = 30.0) -> None:
    """Wait for the event a stray pod's test depends on: its worker thread has pinned itself to the
    stray CPU (a thread of the pod's main process whose affinity is exactly that CPU)."""
    if pod.stray_cpu is None:
        return
    main_pid = subprocess.run(["pgrep", "-P", str(pod.pid)], capture_output=True, text=True).stdout.split()
    pids = (
        main_pid + subprocess.run(["pgrep", "-P", main_pid[0]], capture_output=True, text=True).stdout.split() if main_pid else []
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    status = (task / "status").read_text()
                except OSError:
                    continue
                line = next((x for x in status.splitlines() if x.startswith("Cpus_allowed_list:")), "")
                if line.split(":", 1)[-1].strip() == str(pod.stray_cpu):
                    return
        time.sleep(0.02)
    raise RuntimeError(f"lab pod {pod.name}: no thread pinned itself to cpu{pod.stray_cpu} within {timeout} s")


def wait_until_throttled(pod: LabPod, timeout: float = 30.0) -> None:
    """Wait for the event a quota-bound pod's test depends on: its CPU cgroup counted a throttled period."""
    if pod.cfs_quota_us is None or not pod.busy or pod.cpu_cgroup is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = dict(line.split() for line in (pod.cpu_cgroup / "cpu.stat").read_text().splitlines() if line.strip())
        if int(stat.get("nr_throttled", "0")) > 0:
            return
        time.sleep(0.02)
    raise RuntimeError(f"lab pod {pod.name}: not throttled within {timeout} s under a quota of {pod.cfs_quota_us} us")


def stop_one(lab: Lab, pod: LabPod) -> None:
    """Kill one pod's processes and remove its cgroups (as the kubelet does on delete)."""
    if pod.pid:
        subprocess.run(["kill", "-9", "--", f"-{pod.pid}"], capture_output=True)
        pod.pid = None
    if pod.cpu_cgroup is not None:
        _remove_cgroups(pod.cpu_cgroup, pod.cpu_cgroup.parent.parent.parent)
        pod.cpu_cgroup = None
    base = lab.cg_dir / "pods" / pod.uid
    deadline = time.monotonic() + 10
    for d in [x for x in base.glob("*") if x.is_dir()] + [base]:
        _rmdir_when_empty(d, deadline)


def _rmdir_when_empty(d: Path, deadline: float) -> None:
    """rmdir a cgroup once the kernel lets it go (its processes were killed: the event is the rmdir
    succeeding), failing at the deadline."""
    while d.exists():
        try:
            d.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _remove_cgroups(leaf: Path, stop_at: Path) -> None:
    """rmdir the pod's cgroup, then its parents up to `stop_at` while they are empty (another pod's
    cgroup keeps them)."""
    _rmdir_when_empty(leaf, time.monotonic() + 10)
    d = leaf.parent
    while True:
        try:
            d.rmdir()
        except OSError:
            return
        if d == stop_at:
            return
        d = d.parent


def stop(lab: Lab, pods: list[LabPod]) -> None:
    for pod in pods:
        stop_one(lab, pod)
    root = lab.cg_dir / "pods"
    if root.exists():
        root.rmdir()


def pid1(pod: LabPod) -> int:
    out = subprocess.run(["pgrep", "-P", str(pod.pid)], capture_output=True, text=True).stdout.split()
    return int(out[0])


def exec_in(pod: LabPod, argv: list[str], stdin: Any = None) -> tuple[int, bytes, bytes] | None:
    """An exec: the command in the pod's mount and PID namespaces, on the container's CPUs; `stdin` what the
    exec's client streams (None: no stdin attached, as the kubelet does without stdin=true)."""
    if not pod.has_shell:
        return None
    # join the container's cgroups first (and its CPU cgroup), then its mount, PID and network namespaces
    join = 'echo $$ > "$1/cgroup.procs" && { [ -z "$2" ] || echo $$ > "$2/cgroup.procs"; } && shift 2 && exec "$@"'
    nsenter = ["nsenter", "-t", str(pid1(pod)), "-m", "-p", "-n", "--", "taskset", "-c", pod.cpus, *argv]
    cpu = str(pod.cpu_cgroup) if pod.cpu_cgroup else ""
    p = subprocess.run(["sh", "-c", join, "sh", str(pod.cgroup), cpu, *nsenter], capture_output=True, timeout=60,
                       stdin=stdin if stdin is not None else subprocess.DEVNULL)  # fmt: skip
    return p.returncode, p.stdout, p.stderr


def cpu_manager_state(pods: list[LabPod], default: str = "") -> str:
    entries: dict[str, dict[str, str]] = {}
    for pod in pods:
        if pod.limits.get("cpu") == pod.requests.get("cpu") and pod.requests.get("cpu", "").isdigit():
            entries[pod.uid] = {pod.container: pod.cpus, **{n: pod.cpus for n in (pod.init, pod.restartable_init) if n}}
    return json.dumps({"policyName": "static", "defaultCpuSet": default, "entries": entries, "checksum": 1})


def dra_checkpoint(entries: list[dict[str, Any]]) -> str:
    """The kubelet's DRA checkpoint (dra_manager_state) as pkg/kubelet/cm/dra/state/checkpoint.go writes it:
    Data is the JSON of {kind, apiVersion, Entries}, Checksum its CRC-32 (IEEE)."""
    data = json.dumps({"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": entries},
                      separators=(",", ":"))  # fmt: skip
    return json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())}, separators=(",", ":"))
