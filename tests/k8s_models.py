"""Strict validation of Kubernetes objects against the official `kubernetes` client's generated
models (which mirror the API's OpenAPI schema): every field must exist in the model, scalars must
have the model's type, and required fields must be present (the models' own client-side check).
The API server rejects unknown fields under `kubectl apply --validate=strict`; so does this."""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client
from kubernetes.client import ApiClient

SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}
KIND_MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("batch/v1", "Job"): "V1Job",
    ("batch/v1", "CronJob"): "V1CronJob",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
# Fields the models type loosely ("object") whose OpenAPI form is int-or-string or a quantity.
INT_OR_STRING = {"object"}


def problems(obj: Any) -> list[str]:
    key = (obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    model = KIND_MODELS.get(key)  # type: ignore[arg-type]
    if model is None:
        return [f"no model for apiVersion/kind {key}"]
    out: list[str] = []
    _walk(obj, model, obj.get("kind", "?"), out)
    if not out:
        try:
            ApiClient()._ApiClient__deserialize(obj, model)  # type: ignore[attr-defined]
        except ValueError as e:
            out.append(f"{obj.get('kind')}: {e}")
    return out


def _walk(value: Any, type_name: str, where: str, out: list[str]) -> None:
    if type_name in SCALARS:
        if not isinstance(value, SCALARS[type_name]) or (type_name == "int" and isinstance(value, bool)):
            out.append(f"{where}: {value!r} is not {type_name}")
        return
    if type_name in INT_OR_STRING:
        return
    m = re.fullmatch(r"[lL]ist\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            out.append(f"{where}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(item, m.group(1), f"{where}[{i}]", out)
        return
    m = re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", type_name)
    if m:
        if not isinstance(value, dict):
            out.append(f"{where}: expected a mapping")
            return
        for k, item in value.items():
            _walk(item, m.group(1) or m.group(2), f"{where}.{k}", out)
        return
    cls = getattr(kubernetes.client, type_name)
    if not isinstance(value, dict):
        out.append(f"{where}: expected an object ({type_name})")
        return
    by_json = {j: attr for attr, j in cls.attribute_map.items()}
    for k, item in value.items():
        if k not in by_json:
            out.append(f"{where}.{k}: unknown field in {type_name}")
            continue
        _walk(item, cls.openapi_types[by_json[k]], f"{where}.{k}", out)
