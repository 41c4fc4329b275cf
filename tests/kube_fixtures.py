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
}
LIMITED_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "limited-nodes"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-node-conformance-nodes"},
    "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": "gpu-node-conformance"}],
}


def fake_api() -> FakeApiServer:
    return FakeApiServer([*RBAC, LIMITED_BINDING], TOKENS)
