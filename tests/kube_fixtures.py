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


def fake_api() -> FakeApiServer:
    return FakeApiServer([*RBAC, LIMITED_BINDING, *NOEXEC], TOKENS)
