"""The kubelet's upstream defaults: KubeletConfiguration v1beta1 as its own defaulting writes it
(`kubelet_defaults.v1beta1.yaml` beside this module, the fully defaulted round-trip test data of
kubernetes/kubernetes), read once from the package."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def upstream_defaults() -> dict[str, Any]:
    """The fully defaulted KubeletConfiguration (kind and apiVersion left out)."""
    text = resources.files("conformance.config").joinpath("kubelet_defaults.v1beta1.yaml").read_text("utf-8")
    doc = yaml.load(text, Loader=SAFE_LOADER)
    return {k: v for k, v in doc.items() if k not in ("kind", "apiVersion")}
