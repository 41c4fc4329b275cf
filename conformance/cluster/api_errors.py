"""Kubernetes API failures as one line that names what to fix: the RBAC permission on a 403, the
credentials on a 401, the object on a 404, the API server otherwise."""

from __future__ import annotations

import json


def explain(e: Exception, verb: str, resource: str, name: str | None = None) -> str:
    """One line naming what failed and what to fix; for a 403, the RBAC rule that is missing."""
    from kubernetes.client.exceptions import ApiException

    target = f"{resource} {name}" if name else resource
    if isinstance(e, ApiException):
        reason = ""
        try:
            reason = json.loads(e.body or "{}").get("message", "")
        except ValueError:
            reason = (e.body or "")[:200] if isinstance(e.body, str) else ""
        if e.status == 403:
            return (
                f"Kubernetes API refused '{verb} {resource}' (403 Forbidden): the suite's identity lacks the RBAC "
                f"permission {verb} on {resource} (see deploy/rbac.yaml){': ' + reason if reason else ''}"
            )
        if e.status == 401:
            return "Kubernetes API: 401 Unauthorized: the kubeconfig's credentials were not accepted"
        if e.status == 404:
            return f"Kubernetes API: {target} not found (404)"
        return f"Kubernetes API: {verb} {target} failed with HTTP {e.status} {e.reason}{': ' + reason if reason else ''}"
    return f"Kubernetes API: {verb} {target}: {type(e).__name__}: {e}"
