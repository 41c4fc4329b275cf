"""The kubelet's upstream defaults: KubeletConfiguration v1beta1 as its own defaulting writes it
(`kubelet_defaults.v1beta1.yaml` beside this module, the fully defaulted round-trip test data of
kubernetes/kubernetes), read once from the package, corrected where that test data is not what the defaulting
code writes, and per kubelet minor release where the defaulting code changed (defaults_for)."""

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


# Where the defaulting code (pkg/kubelet/apis/config/v1beta1/defaults.go, SetDefaults_KubeletConfiguration) differs
# from the round-trip test data, and how it changed between minor releases. Each entry: field -> [(first minor
# release, default from it on)], oldest first; the last one holds for later releases.
# - eventRecordQPS 50 and eventBurst 100, kubeAPIQPS 50 and kubeAPIBurst 100 from 1.27 (5, 10, 5, 10 before;
#   kubernetes/kubernetes PR 116121, CHANGELOG-1.27 "kubelet: increase the default QPS and burst"). The
#   round-trip data still holds 5 and 10 for the two event fields: not the defaulting output of its own commit
#   (030891da: `obj.EventRecordQPS = ptr.To[int32](50)`, `obj.EventBurst = 100`).
# - failCgroupV1 true from 1.35 (KEP-5573, cgroup v1 unsupported: `obj.FailCgroupV1 = ptr.To(true)`), false before.
RELEASE_DEFAULTS: dict[str, list[tuple[tuple[int, int], object]]] = {
    "eventRecordQPS": [((1, 0), 5), ((1, 27), 50)],
    "eventBurst": [((1, 0), 10), ((1, 27), 100)],
    "kubeAPIQPS": [((1, 0), 5), ((1, 27), 50)],
    "kubeAPIBurst": [((1, 0), 10), ((1, 27), 100)],
    "failCgroupV1": [((1, 0), False), ((1, 35), True)],
}
NEWEST = (1, 37)  # the newest minor release these tables were checked against


def defaults_for(release: tuple[int, ...] | None) -> dict[str, Any]:
    """The defaulted KubeletConfiguration of one kubelet minor release (None: the newest known)."""
    minor = tuple(release[:2]) if release else NEWEST
    out = dict(upstream_defaults())
    for key, steps in RELEASE_DEFAULTS.items():
        value = steps[0][1]
        for since, v in steps:
            if minor >= since:
                value = v
        out[key] = value
    return out
