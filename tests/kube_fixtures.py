"""Shared set-up for tests against the fake API server: the repository's RBAC manifest, and identities
that hold all of it or only part of it."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.fakeapi import FakeApiServer, Subject

RBAC = list(yaml.safe_load_all((Path(__file__).resolve().parent.parent / "deploy" / "rbac.yaml").read_text()))
SA = "system:serviceaccount:gpu-node-conformance:gpu-node-conformance"
LIMITED = "system:serviceaccount:gpu-node-conformance:limited"
TOKENS = {
    "full-token": Subject(SA),  # every binding of deploy/rbac.yaml
    "limited-token": Subject(LIMITED),  # only the nodes role: no nodes/proxy (configz)
    "nobody-token": Subject("system:serviceaccount:default:nobody"),  # authenticated, no role
    "noexec-token": Subject("system:serviceaccount:gpu-node-conformance:noexec"),  # nodes and pods, but no pods/exec
    # nodes, and the unbound nodes/proxy fallback role of deploy/rbac.yaml (configz: proxy), bound as its comment says
    "proxy-token": Subject("system:serviceaccount:gpu-node-conformance:proxy"),
    # nodes and runtime classes cluster-wide; the pods role only in namespace "inference", through a RoleBinding
    "scoped-token": Subject("system:serviceaccount:gpu-node-conformance:scoped"),
}
LIMITED_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "limited-nodes"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-node-conformance-nodes"},
    "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": "gpu-node-conformance"}],
}


NOEXEC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "pods-read-only"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    },
    *[
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"noexec-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "noexec", "namespace": "gpu-node-conformance"}],
        }
        for role in ("gpu-node-conformance-nodes", "pods-read-only")
    ],
]


def _binding(kind: str, name: str, role: str, account: str, namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-node-conformance"}],
    }


PROXY = [
    _binding("ClusterRoleBinding", "proxy-nodes", "gpu-node-conformance-nodes", "proxy"),
    _binding("ClusterRoleBinding", "gpu-node-conformance-kubelet-proxy", "gpu-node-conformance-kubelet-proxy-fallback", "proxy"),
]
SCOPED = [
    _binding("ClusterRoleBinding", "scoped-nodes", "gpu-node-conformance-nodes", "scoped"),
    _binding("ClusterRoleBinding", "scoped-configz", "gpu-node-conformance-kubelet-configz", "scoped"),
    _binding("RoleBinding", "gpu-node-conformance-pods", "gpu-node-conformance-pods", "scoped", namespace="inference"),
]


def fake_api() -> FakeApiServer:
    return FakeApiServer([*RBAC, LIMITED_BINDING, *NOEXEC, *PROXY, *SCOPED], TOKENS)
