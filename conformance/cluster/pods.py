"""GPU pods and what their containers see: the pod spec and status from the API, and one exec per
container (the client's websocket exec) running a read-only shell script that prints the exec'd
process's own CPU and memory sets, every process's and thread's affinity and last CPU, the thread-pool
variables of the container's processes (only the names the profile lists: no other environment value
leaves the container), the size of /dev/shm and the /dev/nvidia<N> nodes it can see."""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.cluster.dra import ContainerDra, DraReader, extended_resources
from conformance.collection.redact import env_value
from conformance.config.kubernetes import GPU_RESOURCE
from conformance.errors import FactUnavailable
from conformance.facts.cpulist import parse_cpulist

EXEC_TIMEOUT_S = 30.0
MAX_OUTPUT = 4 * 1024 * 1024

# Runs as `sh -c SCRIPT sh VAR...`: the variable names arrive as arguments, never as script text.
INSIDE = r"""
set -f
names=$*  # the thread-pool variables to read (the profile's pods.thread_env), as arguments: never script text
printf '@self\n'
while IFS= read -r l; do case $l in Cpus_allowed_list:*|Mems_allowed_list:*) printf '%s\n' "$l";; esac; done < /proc/self/status
me=$$
printf '@shm\n'
out=$(df -kP /dev/shm 2>/dev/null) && case $out in *"
"*) set -- ${out#*"
"}; printf '%s\n' "$2" ;; esac  # the second line's second field: the size in KiB
printf '@dev\n'
set +f
for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && printf '%s\n' "${d#/dev/nvidia}"; done
# The container's processes: those in this shell's cgroup, less the shell and its own children. One head reads
# every process's status and cgroup (its "==> FILE <==" headers mark where each file starts: no line of these
# files can begin so), one awk decides: no program per process or thread, whatever the container runs. This
# shell's helpers (the command substitution and what it runs) are its children and grandchildren: left out.
members=$(head -n 200 /proc/[0-9]*/status /proc/[0-9]*/cgroup 2>/dev/null | awk -v me="$me" '
  /^==> \/proc\/[0-9]+\/(status|cgroup) <==$/ {
    split($2, f, "/"); pid = f[3]; kind = f[4]
    if (kind == "cgroup") cg[pid] = ""  # a file read twice counts once
    next }
  kind == "status" && /^PPid:/ { ppid[pid] = $2 + 0; next }
  kind == "cgroup" && $0 != "" { cg[pid] = cg[pid] $0 ";"; seen[pid] = 1 }
  END { for (p in seen) if (p != me && ppid[p] != me && ppid[ppid[p]] != me && cg[p] == cg[me]) print p }')
tasks=; envs=
for p in $members; do
  tasks="$tasks /proc/$p/task/[0-9]*/status /proc/$p/task/[0-9]*/stat"
  envs="$envs /proc/$p/environ"
done
IFS=' '
# every thread's status (Name, Cpus_allowed_list) and stat (the CPU it last ran on): one head, one awk
[ -n "$tasks" ] && head -n 200 $tasks 2>/dev/null | awk '
  /^==> \/proc\/[0-9]+\/task\/[0-9]+\/(status|stat) <==$/ {
    split($2, f, "/"); key = f[3] " " f[5]; kind = f[6]
    if (!(key in known)) { known[key] = 1; order[++n] = key }
    next }
  kind == "status" && (/^Name:/ || /^Cpus_allowed_list:/) { lines[key] = lines[key] $0 "\n"; next }
  kind == "stat" && $0 != "" && !(key in st) { st[key] = $0 }
  END { for (i = 1; i <= n; i++) { k = order[i]; printf "@task %s\n%s", k, lines[k]; if (k in st) printf "stat %s\n", st[k] } }'
set -f
# The listed variables of every process of the container, by one grep: "FILE:NAME=VALUE" records ended by NUL
# (a value can hold a newline, never a NUL), so nothing in a value can pass for another record; the section
# ends with a NUL and a line no record can start with. Without grep (or -z), one tr per process.
pats=
for v in $names; do
  case $v in ''|[0-9]*|*[!A-Za-z0-9_]*) continue ;; esac  # a variable's name, nothing a pattern could read
  pats="$pats^$v=
"
done
if [ -n "$envs" ] && [ -n "$pats" ]; then
  # can this grep read NUL-ended records? (1: it can and /dev/null holds none; 2 or 127: no -z, or no grep). The
  # main grep's own status cannot tell: a process that ends before grep reads its environ also makes it 2.
  grep -a -z -H -e x /dev/null >/dev/null 2>&1; rc=$?
  printf '@environ\n'
  [ "$rc" -gt 1 ] || grep -a -z -H -e "${pats%?}" $envs 2>/dev/null
  printf '\000@endenv\n'
  if [ "$rc" -gt 1 ]; then
    for e in $envs; do
      p=${e#/proc/}; p=${p%%/*}
      printf '@env %s\n' "$p"
      tr '\0' '\n' < "$e" 2>/dev/null | while IFS= read -r kv; do
        for v in $names; do case $kv in "$v="*) printf '%s\n' "$kv";; esac; done
      done
    done
  fi
fi
unset IFS
printf '@sysctl\n'
# one awk reads the four values: procfs serves a sysctl in one read (a shell's byte-by-byte read sees its first
# byte only: a read past the start of an integer sysctl returns nothing)
set --
for s in net/ipv4/tcp_tw_reuse net/core/somaxconn net/ipv4/ip_local_port_range net/ipv4/ip_local_reserved_ports; do
  [ -r "/proc/sys/$s" ] && set -- "$@" "/proc/sys/$s"
done
[ $# -eq 0 ] || awk 'FNR == 1 { name = FILENAME; sub("^/proc/sys/", "", name); print name "=" $0 }' "$@" 2>/dev/null
printf '@cpu\n'
while IFS=: read -r _ ctrl path; do
  case ",$ctrl," in
    ,,) for d in "/sys/fs/cgroup$path" /sys/fs/cgroup; do
          [ -r "$d/cpu.max" ] || continue
          q=; { IFS= read -r q || :; } < "$d/cpu.max"; printf 'v2 %s\nmax %s\n' "$d" "$q"
          while IFS= read -r l; do printf 'stat %s\n' "$l"; done < "$d/cpu.stat"; break
        done ;;
    *,cpu,*) for d in "/sys/fs/cgroup/$ctrl$path" "/sys/fs/cgroup/cpu$path" "/sys/fs/cgroup/$ctrl" /sys/fs/cgroup/cpu; do
          [ -r "$d/cpu.cfs_quota_us" ] || continue
          q=; per=; { IFS= read -r q || :; } < "$d/cpu.cfs_quota_us"; { IFS= read -r per || :; } < "$d/cpu.cfs_period_us"
          printf 'v1 %s\nquota %s\nperiod %s\n' "$d" "$q" "$per"
          while IFS= read -r l; do printf 'stat %s\n' "$l"; done < "$d/cpu.stat"; break
        done ;;
  esac
done < /proc/self/cgroup
printf '@end\n'
"""


@dataclass
class ContainerRef:
    node: str
    namespace: str
    pod: str
    container: str
    uid: str

    @property
    def id(self) -> str:
        return f"{self.node}/{self.namespace}/{self.pod}/{self.container}"


@dataclass
class PodInfo:
    """What the API says about one GPU pod."""

    namespace: str
    name: str
    uid: str
    node: str
    qos: str | None
    runtime_class: str | None
    share_pid: bool
    # name, cpu_request, cpu_limit, mem_request, mem_limit, gpus (device plugin and DRA), plugin_gpus,
    # dra (ContainerDra: the GPUs of its ResourceClaims)
    containers: list[dict[str, Any]]
    init_containers: dict[str, bool] = field(default_factory=dict)  # name -> restartable (a sidecar: restartPolicy Always)
    host_network: bool = False  # spec.hostNetwork: the pod shares the node's network namespace (and sysctls)
    # spec.resources (KEP-2837 pod-level resources): cpu_request, cpu_limit, mem_request, mem_limit; None: not set
    pod_resources: dict[str, Any] | None = None
    resize: str | None = None  # a pending or in-progress in-place resize (status.conditions), in words


@dataclass
class Task:
    pid: int
    tid: int
    name: str
    cpus: frozenset[int] | None
    last_cpu: int | None


@dataclass
class InsideFacts:
    """What the container sees, from one exec."""

    cpus: frozenset[int]
    mems: frozenset[int]
    shm_bytes: int | None
    gpu_minors: list[int]
    tasks: list[Task]
    env: dict[int, dict[str, str]]  # pid -> the listed variables it has
    sysctls: dict[str, str] = field(default_factory=dict)  # net/ipv4/tcp_tw_reuse -> value, as the container's netns has it
    cfs: CfsBandwidth | None = None  # the container cgroup's CFS bandwidth and throttling


@dataclass
class CfsBandwidth:
    """The container cgroup's CPU bandwidth limit and how often it was throttled: cgroup v2 cpu.max
    ("QUOTA PERIOD" or "max PERIOD") and cpu.stat (nr_periods, nr_throttled, throttled_usec); cgroup v1
    cpu.cfs_quota_us (-1: none), cpu.cfs_period_us and cpu.stat (throttled_time in ns)
    (Documentation/admin-guide/cgroup-v2.rst "CPU"; Documentation/scheduler/sched-bwc.rst)."""

    cgroup: str
    quota_us: int | None  # None: no quota
    period_us: int
    nr_periods: int | None  # None: not read (never 0: an unread counter is unknown, issue 53.4)
    nr_throttled: int | None
    throttled_us: int | None
    unread: tuple[str, ...] = ()  # what could not be read, naming the file and the value


def _allocated_cpu(status: Any) -> Any:
    if status is None:
        return None
    allocated = getattr(status, "allocated_resources", None) or {}
    if allocated.get("cpu") is not None:
        return allocated.get("cpu")
    held = getattr(status, "resources", None)
    return ((getattr(held, "requests", None) or {}) if held is not None else {}).get("cpu")


def _pod_resources(spec: Any) -> dict[str, Any] | None:
    """spec.resources of a pod (pod-level resources, KEP-2837: beta in 1.34); None where it sets none."""
    res = getattr(spec, "resources", None)
    if res is None or not (res.requests or res.limits):
        return None
    req, lim = res.requests or {}, res.limits or {}
    return {"cpu_request": req.get("cpu"), "cpu_limit": lim.get("cpu"), "mem_request": req.get("memory"),
            "mem_limit": lim.get("memory")}  # fmt: skip


def _resize_state(status: Any) -> str | None:
    """A pending or in-progress resize: the PodResizePending / PodResizeInProgress conditions (1.33+; reason
    Infeasible or Deferred), else the older status.resize field."""
    for cond in (getattr(status, "conditions", None) or []) if status is not None else []:
        if cond.type in ("PodResizePending", "PodResizeInProgress") and str(cond.status) == "True":
            why = f" ({cond.reason}: {cond.message})" if cond.reason else ""
            return f"{cond.type}{why}"
    old = getattr(status, "resize", None) if status is not None else None
    return f"status.resize {old}" if old else None


def _resource_health(status: Any) -> list[tuple[str, str, str]]:
    out = []
    for rs in (getattr(status, "allocated_resources_status", None) or []) if status is not None else []:
        for h in rs.resources or []:
            out.append((str(rs.name), str(h.resource_id), str(h.health or "Unknown")))
    return out


def _gpus(resources: Any, resource: str) -> int:
    for part in ("limits", "requests"):
        v = (getattr(resources, part, None) or {}).get(resource) if resources else None
        if v is not None:
            try:
                return int(str(v))
            except ValueError:
                return 0
    return 0


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """An equality-based label selector (`a=b,c!=d,e`) against a pod's labels; None matches nothing."""
    if not selector:
        return False
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term not in labels:
            return False
    return True


def gpu_pods(
    api: Any,
    node: str,
    resource: str = GPU_RESOURCE,
    selector: str | None = None,
    namespaces: list[str] | None = None,
    dra: DraReader | None = None,
    dra_drivers: tuple[str, ...] = (),
    cpu_drivers: tuple[str, ...] = (),
) -> list[PodInfo]:
    """The running pods on `node` whose containers request `resource` through the device plugin, hold a
    GPU of `dra_drivers` through a ResourceClaim (or use a claim that could not be read: unknown is not
    "no GPU"), or whose labels match the profile's `selector` (then every container is checked); only in
    `namespaces` when given, so that list pods and pods/exec may be granted there alone."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    lists = [(f"pods in namespace {ns}", partial(core.list_namespaced_pod, ns)) for ns in namespaces or []]
    pods = []
    for what, list_pods in lists or [("pods", core.list_pod_for_all_namespaces)]:
        try:
            pods += list_pods(field_selector=f"spec.nodeName={node}", _request_timeout=15).items
        except Exception as e:
            raise FactUnavailable(explain(e, "list", what)) from None
    out = []
    for p in pods:
        spec = p.spec
        containers = []
        statuses = {s.name: s for s in (getattr(p.status, "container_statuses", None) or [])} if p.status else {}
        statuses.update({s.name: s for s in (getattr(p.status, "init_container_statuses", None) or [])} if p.status else {})
        # restartable init containers (sidecars, restartPolicy Always; KEP-753, GA 1.33) run beside the containers for
        # the pod's life and hold their CPUs throughout: judged like containers (issue 52 item 8); the other init
        # containers have finished before any container runs
        sidecars = [c for c in spec.init_containers or [] if getattr(c, "restart_policy", None) == "Always"]
        for c in [*sidecars, *(spec.containers or [])]:
            req = (c.resources.requests or {}) if c.resources else {}
            lim = (c.resources.limits or {}) if c.resources else {}
            containers.append(
                {
                    "name": c.name,
                    "cpu_request": req.get("cpu"),
                    "cpu_limit": lim.get("cpu"),
                    "mem_request": req.get("memory"),
                    "mem_limit": lim.get("memory"),
                    "gpus": _gpus(c.resources, resource),
                    # what the kubelet allocated (KEP-1287 in-place resize, GA 1.35): the spec is the desired size,
                    # status.containerStatuses[].allocatedResources (else .resources.requests) what the container holds
                    "cpu_allocated": _allocated_cpu(statuses.get(c.name)),
                    # the kubelet's record of its devices' health (KEP-4680, containerStatuses[].allocatedResourcesStatus):
                    # (resource name, resource ID: a device plugin's device ID or DRA's driver/pool/device, health)
                    "health": _resource_health(statuses.get(c.name)),
                    **({"sidecar": True} if c in sidecars else {}),
                }
            )
        if not p.status or p.status.phase != "Running":
            continue  # nothing to exec into yet (Pending: also a pod whose claims are not allocated) or any more
        claims = dra.containers(p, node, dra_drivers, cpu_drivers) if dra is not None else {}
        served = extended_resources(p)
        for c in containers:
            if resource in served.get(c["name"], []):
                c["gpus"] = 0  # its GPU resource is a DRA extended resource: its GPUs are the special claim's
                c["extended"] = True
            c["plugin_gpus"] = c["gpus"]
            c["dra"] = claims.get(c["name"], ContainerDra())
            c["gpus"] += len(c["dra"].devices)
        selected = selector_matches(selector, dict(p.metadata.labels or {}))
        if not any(c["gpus"] or c["dra"].error for c in containers) and not selected:
            continue
        if selected:
            for c in containers:
                c["selected"] = True
        out.append(
            PodInfo(
                namespace=p.metadata.namespace,
                name=p.metadata.name,
                uid=p.metadata.uid,
                node=node,
                qos=p.status.qos_class if p.status else None,
                runtime_class=spec.runtime_class_name,
                share_pid=bool(spec.share_process_namespace),
                containers=containers,
                init_containers={c.name: getattr(c, "restart_policy", None) == "Always" for c in spec.init_containers or []},
                host_network=bool(spec.host_network),
                pod_resources=_pod_resources(spec),
                resize=_resize_state(p.status),
            )
        )
    return sorted(out, key=lambda x: (x.namespace, x.name))


PROGRAM = "{\n" + INSIDE + "\n} </dev/null\nexit\n"  # what the exec's shell reads on its stdin


def exec_inside(api: Any, ref: ContainerRef, variables: list[str], timeout: float = EXEC_TIMEOUT_S) -> InsideFacts:
    """One exec into the container; the script's output parsed. Failures name the pod and the cause."""
    from kubernetes import client
    from kubernetes.stream import stream

    where = f"pod {ref.namespace}/{ref.pod} container {ref.container}"
    try:
        ws = stream(
            client.CoreV1Api(api).connect_get_namespaced_pod_exec,
            ref.pod,
            ref.namespace,
            container=ref.container,
            # The program goes on stdin, as the SSH path sends the collector: a command line of 10 KB of
            # `command=` parameters would land in the API server's audit log for every exec and exceed the
            # request line of common proxies in front of API servers (issue 53.13). Only the variable names
            # travel as arguments. The shell runs the program as a group whose own stdin is /dev/null (nothing
            # it starts can read the rest of the program) and then exits: no close of stdin is needed, which
            # the v4 channel protocol cannot send.
            command=["sh", "-s", "--", *variables],
            stderr=True,
            stdin=True,
            stdout=True,
            tty=False,
            _preload_content=False,
            _request_timeout=timeout,
        )
    except Exception as e:
        raise FactUnavailable(_exec_failure(e, ref, where)) from None
    deadline = time.monotonic() + timeout
    out, err = [], []
    ended = False
    try:
        with contextlib.suppress(Exception):  # the exec already ended (no /bin/sh): its status says why, read below
            ws.write_stdin(PROGRAM)
        while ws.is_open() and time.monotonic() < deadline:
            try:
                ws.update(timeout=1)
            except OSError:  # the server ended the exec and closed before our close reached it: what came stays
                ended = True
                break
            out.append(ws.read_stdout(timeout=0) if ws.peek_stdout() else "")
            err.append(ws.read_stderr(timeout=0) if ws.peek_stderr() else "")
        timed_out = ws.is_open() and not ended
        status = ws.read_channel(3)
    finally:
        with contextlib.suppress(OSError):  # the server closed first (the exec ended, or never started)
            ws.close()
    if timed_out:
        raise FactUnavailable(f"{where}: exec did not finish within {timeout:g} s")
    stdout = "".join(out)
    if status:
        doc = json.loads(status) if status.strip().startswith("{") else {}
        if doc.get("status") == "Failure":
            msg = doc.get("message") or doc.get("reason") or "exec failed"
            if "executable file not found" in msg or "no such file" in msg.lower():
                raise FactUnavailable(f"{where}: the container has no /bin/sh, so nothing can be read inside it ({msg})")
            if "@end" not in stdout:
                raise FactUnavailable(f"{where}: exec failed: {msg}; stderr: {''.join(err)[-300:]}")
    if "@end" not in stdout:
        raise FactUnavailable(f"{where}: exec output ended early (container restarted or exec interrupted)")
    return parse_inside(stdout, where)


def _exec_failure(e: Exception, ref: ContainerRef, where: str) -> str:
    """The websocket handshake's refusal in words: the pod gone, or the permission missing."""
    text = str(e)
    m = re.search(r"Handshake status (\d{3})", text)
    status = int(m.group(1)) if m else getattr(e, "status", 0)
    if status == 404:
        return f"{where}: the pod is gone (deleted or replaced during the run)"
    if status == 403:
        reason = re.search(r'"message": "([^"]*)"', text)
        return (
            f"{where}: Kubernetes API refused the exec (403 Forbidden): the suite's identity lacks the RBAC permission "
            f"create and get on pods/exec (see deploy/rbac.yaml){': ' + reason.group(1) if reason else ''}"
        )
    return explain(e, "create", "pods/exec", f"{ref.namespace}/{ref.pod}")


ENVIRON = re.compile(r"/proc/(\d+)/environ:([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


def _environ_section(text: str) -> tuple[str, dict[int, dict[str, str]]]:
    """The text less its `@environ` section, and that section's records: "/proc/PID/environ:NAME=VALUE", each
    ended by a NUL (grep -z -H), the section by a NUL and "@endenv". A value may hold newlines, never a NUL."""
    start = text.find("\n@environ\n")
    if start < 0:
        return text, {}
    body_at = start + len("\n@environ\n")
    end = text.find("\0@endenv\n", body_at - 1)
    if end < 0:
        raise FactUnavailable("the environment section of the exec's output is not closed (output cut short)")
    env: dict[int, dict[str, str]] = {}
    for record in text[body_at:end].split("\0"):
        m = ENVIRON.fullmatch(record)
        if m:
            env.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return text[: start + 1] + text[end + len("\0@endenv\n") :], env


def parse_inside(text: str, where: str) -> InsideFacts:
    text, environ = _environ_section(text)
    section, cpus, mems, shm = "", None, None, None
    sysctls: dict[str, str] = {}
    cpu: dict[str, str] = {}
    cpu_stat: dict[str, int] = {}
    minors: list[int] = []
    tasks: list[Task] = []
    env: dict[int, dict[str, str]] = {}
    cur_env: dict[str, str] | None = None
    task: Task | None = None
    for line in text.splitlines():
        if line.startswith("@"):
            parts = line.split()
            section = parts[0]
            if section == "@task" and len(parts) == 3:
                task = Task(int(parts[1]), int(parts[2]), "", None, None)
                tasks.append(task)
            elif section == "@env" and len(parts) == 2:
                cur_env = env.setdefault(int(parts[1]), {})
            continue
        if section == "@self":
            if line.startswith("Cpus_allowed_list:"):
                cpus = parse_cpulist(line.split(":", 1)[1], what=f"{where} Cpus_allowed_list")
            elif line.startswith("Mems_allowed_list:"):
                mems = parse_cpulist(line.split(":", 1)[1], what=f"{where} Mems_allowed_list")
        elif section == "@shm" and line.strip().isdigit():
            shm = int(line.strip()) * 1024
        elif section == "@dev" and line.strip().isdigit():
            minors.append(int(line.strip()))
        elif section == "@task" and task is not None:
            if line.startswith("Name:"):
                task.name = line.split(":", 1)[1].strip()
            elif line.startswith("Cpus_allowed_list:"):
                task.cpus = parse_cpulist(line.split(":", 1)[1], what=f"{where} task {task.tid} Cpus_allowed_list")
            elif line.startswith("stat "):
                task.last_cpu = last_cpu(line[5:])
        elif section == "@sysctl" and "=" in line:
            k, v = line.split("=", 1)
            sysctls[k] = " ".join(v.split())
        elif section == "@cpu":
            k, _, v = line.partition(" ")
            if k == "stat":
                name, _, n = v.partition(" ")
                if n.strip().isdigit():
                    cpu_stat[name] = int(n)
            else:
                cpu[k] = v.strip()
        elif section == "@env" and cur_env is not None and "=" in line:
            k, v = line.split("=", 1)
            cur_env[k] = env_value(k, v)  # only the profile's names are read; a secret-looking one is still masked
    for pid, found in environ.items():  # only the profile's names were asked for; a secret-looking one is masked
        env.setdefault(pid, {}).update({k: env_value(k, v) for k, v in found.items()})
    if cpus is None or mems is None:
        raise FactUnavailable(f"{where}: /proc/self/status gave no Cpus_allowed_list/Mems_allowed_list")
    return InsideFacts(cpus, mems, shm, sorted(minors), tasks, env, sysctls, _cfs(cpu, cpu_stat))


def _cfs(cpu: dict[str, str], stat: dict[str, int]) -> CfsBandwidth | None:
    """The bandwidth files as read; a value that is absent or not a number is named in `unread`, never taken as
    0 or as "no quota" (a throttled container whose cpu.stat could not be read must not pass)."""
    unread: list[str] = []

    def counter(name: str, file: str, scale: int = 1) -> int | None:
        if name not in stat:
            unread.append(f"{file} {name}")
            return None
        return stat[name] // scale

    if "v2" in cpu and "max" in cpu:
        quota, _, period = cpu["max"].partition(" ")
        if quota != "max" and not quota.isdigit():
            unread.append(f"{cpu['v2']}/cpu.max quota {quota!r}")
        if not period.strip().isdigit():
            unread.append(f"{cpu['v2']}/cpu.max period {period!r}")
        stat_file = f"{cpu['v2']}/cpu.stat"
        return CfsBandwidth(
            cgroup=cpu["v2"],
            quota_us=int(quota) if quota.isdigit() else None,
            period_us=int(period) if period.strip().isdigit() else 100000,
            nr_periods=counter("nr_periods", stat_file),
            nr_throttled=counter("nr_throttled", stat_file),
            throttled_us=counter("throttled_usec", stat_file),
            unread=tuple(unread),
        )
    if "v1" in cpu and "quota" in cpu:
        text = cpu["quota"]
        if not text.lstrip("-").isdigit():
            unread.append(f"{cpu['v1']}/cpu.cfs_quota_us {text!r}")
        quota = int(text) if text.lstrip("-").isdigit() else -1
        if not cpu.get("period", "").isdigit():
            unread.append(f"{cpu['v1']}/cpu.cfs_period_us {cpu.get('period', '')!r}")
        stat_file = f"{cpu['v1']}/cpu.stat"
        return CfsBandwidth(
            cgroup=cpu["v1"],
            quota_us=None if quota < 0 else quota,
            period_us=int(cpu["period"]) if cpu.get("period", "").isdigit() else 100000,
            nr_periods=counter("nr_periods", stat_file),
            nr_throttled=counter("nr_throttled", stat_file),
            throttled_us=counter("throttled_time", stat_file, 1000),  # v1 counts nanoseconds
            unread=tuple(unread),
        )
    return None


def last_cpu(stat: str) -> int | None:
    """Field 39 (`processor`) of /proc/<pid>/stat, counted after the command name's last ')'."""
    rest = stat[stat.rfind(")") + 1 :].split()
    # rest[0] is field 3 (state); field 39 is rest[36]
    return int(rest[36]) if len(rest) > 36 and re.fullmatch(r"-?\d+", rest[36]) else None
