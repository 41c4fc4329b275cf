"""The acceptance test pod (opt-in, `conformance run --acceptance-pod`): on each audited node, a
short-lived Guaranteed pod (whole CPUs, equal memory request and limit, one GPU, the profile's runtime
class and /dev/shm) that the pod checks then examine. It proves that a brand-new node's kubelet hands
out exclusive, NUMA-local CPUs, memory and a GPU. This is the only write the suite makes to a cluster:
the pod is deleted after the run, also on failure or interrupt, and has a deadline of its own."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.config.profile import Profile
from conformance.errors import FactUnavailable

LABEL = "gpu-node-conformance/acceptance"
APP = "gpu-node-conformance"


class AcceptanceFailed(FactUnavailable):
    """The acceptance pod did not come up; `pod` is the record of the one created (and deleted), if any."""

    def __init__(self, message: str, pod: AcceptancePod | None = None) -> None:
        super().__init__(message)
        self.pod = pod


@dataclass
class AcceptancePod:
    node: str
    namespace: str
    name: str
    created_at: str
    deleted: bool = False
    error: str | None = None
    sizing: str | None = None  # how many CPUs it asked for, and why

    def to_json(self) -> dict[str, Any]:
        out = {
            "pod": f"{self.namespace}/{self.name}",
            "created_at": self.created_at,
            "deleted": self.deleted,
            "error": self.error,
        }
        if self.sizing:
            out["sizing"] = self.sizing
        return out


def size_cpus(wanted: int, threads_per_core: int | None) -> tuple[int, str]:
    """The acceptance pod's CPUs: the profile's number rounded up to whole physical cores. With
    full-pcpus-only the static policy rejects a container whose CPU request is not a multiple of the
    threads per core (SMTAlignmentError, pkg/kubelet/cm/cpumanager/policy_static.go), so a 1-CPU pod
    would fail on a correct SMT node; without the option whole cores are still what a GPU pod should get."""
    if not threads_per_core:
        return wanted, f"{wanted} CPU(s) as the profile says (threads per core unknown on this node)"
    cpus = -(-wanted // threads_per_core) * threads_per_core
    if cpus == wanted:
        return cpus, f"{cpus} CPU(s): the profile's {wanted}, whole cores of {threads_per_core} thread(s)"
    return cpus, (
        f"{cpus} CPU(s): the profile's {wanted} rounded up to whole cores of {threads_per_core} threads "
        "(full-pcpus-only rejects a request that is not a multiple of the threads per core: SMTAlignmentError)"
    )


def pod_sysctls(profile: Profile) -> dict[str, str]:
    """The network sysctls the profile wants in a pod's own network namespace (POD-SYSCTL-*)."""
    lo, hi = profile.get("sysctl.local_port_range")
    np_lo, np_hi = profile.get("sysctl.nodeport_range")
    out = {
        "net.ipv4.tcp_tw_reuse": str(profile.get("sysctl.tcp_tw_reuse")),
        "net.core.somaxconn": str(profile.get("sysctl.min_somaxconn")),
        "net.ipv4.ip_local_port_range": f"{lo} {hi}",
    }
    if max(lo, np_lo) <= min(hi, np_hi):
        out["net.ipv4.ip_local_reserved_ports"] = f"{np_lo}-{np_hi}"
    return out


def manifest(
    node: str, profile: Profile, namespace: str, image: str, gpu_resource: str, cpus_n: int | None = None
) -> dict[str, Any]:
    cpus = str(cpus_n if cpus_n is not None else profile.get("pods.acceptance_cpus"))
    memory = str(profile.get("pods.acceptance_memory"))
    shm = str(profile.get("pods.shm_min"))
    name = f"gnc-acceptance-{hashlib.sha256(node.encode()).hexdigest()[:10]}"
    resources = {"cpu": cpus, "memory": memory, gpu_resource: "1"}
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": 900,  # gone by itself even if the suite is killed
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "probe",
                "image": image,
                "command": ["sh", "-c", "exec sleep 900"],
                "env": [{"name": "OMP_NUM_THREADS", "value": cpus}, {"name": "MKL_NUM_THREADS", "value": cpus}],
                "resources": {"requests": resources, "limits": resources},
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}],
    }
    if profile.get("pods.runtime_class"):
        spec["runtimeClassName"] = profile.get("pods.runtime_class")
    if profile.get("pods.sysctls_set_by") == "pod":
        # a pod gets network sysctls only by setting them (its network namespace starts from kernel defaults):
        # the acceptance pod sets what the profile wants, as GPU pods should, so the node must admit them
        spec["securityContext"] = {"sysctls": [{"name": k, "value": v} for k, v in pod_sysctls(profile).items()]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL: "true", "app.kubernetes.io/name": "gpu-node-conformance"},
        },
        "spec": spec,
    }


def create(api: Any, body: dict[str, Any], timeout: float, stop: threading.Event | None = None) -> AcceptancePod:
    """Create the pod and wait until it runs. On any failure the pod is deleted and the error raised."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    meta = body["metadata"]
    node = body["spec"]["nodeName"]
    try:
        core.create_namespaced_pod(meta["namespace"], body, _request_timeout=15)
    except Exception as e:
        raise FactUnavailable(
            f"acceptance pod on {node}: {explain(e, 'create', 'pods', meta['namespace'] + '/' + meta['name'])}"
        ) from None
    pod = AcceptancePod(node, meta["namespace"], meta["name"], datetime.now(UTC).isoformat(timespec="seconds"))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                got = core.read_namespaced_pod(meta["name"], meta["namespace"], _request_timeout=15)
            except Exception as e:  # a refused or timed-out read: named, and the pod still deleted below
                where = meta["namespace"] + "/" + meta["name"]
                raise FactUnavailable(f"acceptance pod on {node}: {explain(e, 'get', 'pods', where)}") from None
            phase = got.status.phase if got.status else None
            if phase == "Running":
                return pod
            if phase in ("Failed", "Succeeded"):
                reason = (got.status.reason or "") + (f": {got.status.message}" if got.status.message else "")
                raise FactUnavailable(f"acceptance pod on {node} did not run: phase {phase} {reason}".rstrip())
            if time.monotonic() > deadline:
                raise FactUnavailable(f"acceptance pod on {node} was not running after {timeout:g} s (phase {phase})")
            if stop is not None and stop.wait(0.5):
                raise FactUnavailable(f"acceptance pod on {node}: interrupted while waiting for it to run")
            if stop is None:
                time.sleep(0.5)
    except BaseException as e:
        pod.error = str(e) if isinstance(e, FactUnavailable) else f"interrupted: {type(e).__name__}"
        delete(api, pod)
        if isinstance(e, FactUnavailable):
            raise AcceptanceFailed(str(e), pod) from None
        raise


def delete(api: Any, pod: AcceptancePod) -> None:
    """Delete the pod now (grace period 0); a pod already gone counts as deleted."""
    from kubernetes import client

    if pod.deleted:
        return
    try:
        client.CoreV1Api(api).delete_namespaced_pod(pod.name, pod.namespace, grace_period_seconds=0, _request_timeout=15)
        pod.deleted = True
    except Exception as e:
        if getattr(e, "status", None) == 404:
            pod.deleted = True
        else:
            failure = f"could not delete it: {explain(e, 'delete', 'pods', pod.name)}"
            pod.error = f"{pod.error}; {failure}" if pod.error else failure
