"""In-cluster mode: the Kubernetes objects that run the suite on the nodes themselves, for fleets
where SSH is not allowed. Each pod audits its own node with the local transport, reading the host's
root mounted read-only at /host, and prints its results.json to its log between markers, from where
`conformance merge` collects them (`kubectl logs`)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from conformance import __version__

LABEL = "app.kubernetes.io/name"
APP = "gpu-node-conformance"
NODE_LABEL = "gpu-node-conformance/node"
DEFAULT_IMAGE = f"gpu-node-conformance:{__version__}"  # build it from the Containerfile, push it to your registry
RESULTS_BEGIN = "===GNC-RESULTS-BEGIN==="
RESULTS_END = "===GNC-RESULTS-END==="


def _job_name(node: str) -> str:
    """A valid Job name (DNS label, 63 characters) for a node name, unique by a short hash."""
    base = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")[:40] or "node"
    return f"gnc-audit-{base}-{hashlib.sha256(node.encode()).hexdigest()[:6]}"


def _container(image: str, profile: str | None, keep_running: bool) -> dict[str, Any]:
    run = ["conformance", "run", "--host-root", "/host", "--output", "/tmp/out", "--print-results"]
    if profile:
        run += ["--profile", profile]
    command: list[str] = run
    if keep_running:  # a DaemonSet's pod must not exit: report once, then wait for the next rollout
        command = ["sh", "-c", '"$@"; exec sleep infinity', "sh", *run]
    return {
        "name": "audit",
        "image": image,
        "command": command,
        "env": [
            {"name": "GNC_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            # The NVIDIA container runtime mounts the driver's libraries and device nodes for NVML
            # without the pod requesting (and taking) a GPU, as dcgm-exporter does.
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility,compute"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "runAsUser": 0,  # kubelet state files and runtime configs are root's
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {
                "drop": ["ALL"],
                # DAC_READ_SEARCH: read root-only config files (0600) without write access to anything;
                # SYS_PTRACE: read /proc/<kubelet>/cwd and cmdline to resolve the kubelet's relative --config.
                "add": ["DAC_READ_SEARCH", "SYS_PTRACE"],
            },
        },
        "volumeMounts": [
            {"name": "host", "mountPath": "/host", "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def _pod_spec(image: str, profile: str | None, keep_running: bool, runtime_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": APP,
        "automountServiceAccountToken": False,  # the node-level audit makes no API call
        "hostPID": True,  # /proc of the host: the kubelet's and the runtime's command lines
        "hostNetwork": True,  # network sysctls are per network namespace: read the host's
        "dnsPolicy": "ClusterFirstWithHostNet",
        "tolerations": [{"operator": "Exists"}],  # GPU nodes are usually tainted; audit them all the same
        "containers": [_container(image, profile, keep_running)],
        "volumes": [
            {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return spec


def build(
    nodes: list[str],
    *,
    daemonset: bool = False,
    namespace: str = APP,
    image: str = DEFAULT_IMAGE,
    profile: str | None = None,
    runtime_class: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Namespace, ServiceAccount, and one Job per node (pinned by nodeName) or one DaemonSet."""
    labels = {LABEL: APP}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": APP, "namespace": namespace, "labels": labels},
            "automountServiceAccountToken": False,
        },
    ]
    if daemonset:
        spec = _pod_spec(image, profile, True, runtime_class)
        spec["nodeSelector"] = node_selector or {"nvidia.com/gpu.present": "true"}
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "gnc-audit", "namespace": namespace, "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": spec},
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                },
            }
        )
        return objects
    for node in nodes:
        spec = _pod_spec(image, profile, False, runtime_class)
        spec["nodeName"] = node  # pinned: no scheduler decision, no dependency on labels
        spec["restartPolicy"] = "Never"
        pod_labels = {**labels, NODE_LABEL: re.sub(r"[^A-Za-z0-9._-]", "_", node)[:63].strip("._-") or "node"}
        objects.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": _job_name(node), "namespace": namespace, "labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,  # an audit is not retried blindly: a failed pod is a finding
                    "activeDeadlineSeconds": 900,
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec},
                },
            }
        )
    return objects


def results_in_log(text: str, cut: list[tuple[int, str | None]] | None = None) -> list[str]:
    """The results.json documents a pod printed between the markers (several after restarts). A block cut
    short is a ValueError naming it, never a node that silently vanishes: a begin marker with no end (the
    log was truncated, or the pod killed while printing: `kubectl logs --limit-bytes`, rotation under
    `--tail`), or an end marker with no begin before it (the log's start was rotated away). A block followed
    by another begin before its end is cut: a run cut by a restart whose rerun printed in full (the rerun
    counts), or, in a log of several pods (`kubectl logs -l ...`), another node's block cut short. Each cut
    block is appended to `cut` as (its number, the node its text names, or None): a node whose only block was
    cut is then named as such, not as never reported."""
    out = []
    begin, end = RESULTS_BEGIN + "\n", "\n" + RESULTS_END
    at = text.find(begin)
    first_end = text.find(end)
    if first_end >= 0 and (at < 0 or first_end < at):
        raise ValueError("the log holds the end of a results block whose beginning is not in it (rotated away?)")
    n = 0
    while at >= 0:  # str.find: a 10 MB log of 100 pods in milliseconds (a lazy regex over it took 80 ms)
        n += 1
        start = at + len(begin)
        stop = text.find(end, start)
        if stop < 0:
            raise ValueError(f"results block {n} begins but never ends: the log was cut short (truncated or rotated)")
        nested = text.rfind(begin, start, stop)  # a block cut short: the later one is the block
        if nested >= 0 and cut is not None:
            m = CUT_NODE.search(text, start, nested)
            cut.append((n, m.group(1) if m else None))
            n += 1
        start = nested + len(begin) if nested >= 0 else start
        out.append(text[start:stop])
        at = text.find(begin, stop + len(end))
    return out


# the first node a (cut) results document names: {"nodes": [{"name": "..."
CUT_NODE = re.compile(r'"nodes":\s*\[\s*\{\s*"name":\s*"([^"\\]{1,253})"')


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML without anchors (kubectl accepts them; people reading the file should not need to)."""
    import yaml

    class NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump_all(objects, Dumper=NoAliases, sort_keys=False)
