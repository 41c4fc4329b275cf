"""The kubelet's effective configuration in one canonical form, however it was read, for the fleet's
identity digest (conformance.facts.identity.kubelet_digest).

configz serves the kubelet's defaulted object (every defaulted key, zero values of `omitempty` fields left
out); the node's files hold only the keys they set, and command-line flags override both. Read either way,
one configuration must give one digest. So:

- files: the upstream defaults (KubeletConfiguration v1beta1 as the kubelet's own defaulting writes it:
  conformance/config/kubelet_defaults.v1beta1.yaml, the fully defaulted round-trip test data of
  kubernetes/kubernetes) under
  the keys the files set, under every kubelet flag that sets a configuration field (the kubelet re-applies
  its command line over the loaded file: cmd/kubelet/app/server.go, kubeletConfigFlagPrecedence), with the
  defaults that depend on other keys applied as pkg/kubelet/apis/config/v1beta1/defaults.go does
  (nodeStatusReportFrequency follows a set nodeStatusUpdateFrequency; serializeImagePulls is false when
  maxParallelImagePulls >= 2; a negative podPidsLimit is -1; an unset evictionHard is the Linux default of
  defaults_linux.go);
- configz: as served;
- both: durations by length of time (`1m` = `60s` = `1m0s`), quantities by amount (`1Gi` = `1024Mi`),
  integral numbers as integers, empty values left out (an explicit `""`, `[]` or `{}` is what `omitempty`
  leaves out of configz), and a false or zero value of a field the defaults do not hold left out (the
  field's zero value is its default).

Flags that set no configuration field (`--hostname-override`, `--node-ip`, `--node-labels`,
`--kubeconfig`, `--root-dir`, ...) are not part of the configuration and not of the digest.

Defaults change between kubelet releases (eventRecordQPS, for one); configz shows the running release's,
the table here is one release's. The digest says which reading it is of, and FLEET-CONSISTENT reports a
node read the other way than its group whose digest differs as an error naming both readings, never as a
failure (conformance.checks.fleet_drift)."""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

from conformance.config.kubelet_defaults import RELEASE_DEFAULTS, defaults_for, upstream_defaults
from conformance.config.units import parse_duration, parse_quantity
from conformance.errors import ParseError
from conformance.facts.kubelet import LINUX_EVICTION_HARD, KubeletConfig, deep_merge, is_zero

# Fields holding a map of quantities (or percentages), of durations, and the fields (and map values) that are
# durations though their default is not held: the ones normalised by amount or by length of time.
QUANTITY_MAPS = ("kubeReserved", "systemReserved", "evictionHard", "evictionSoft", "evictionMinimumReclaim", "qosReserved")
DURATION_MAPS = ("evictionSoftGracePeriod",)
EXTRA_DURATIONS = ("crashLoopBackOff.maxContainerRestartPeriod",)
QUANTITIES = ("containerLogMaxSize",)
# Fields whose value is a map as a whole (normalised as one value, not walked key by key as a struct).
WHOLE_VALUES = frozenset((*QUANTITY_MAPS, *DURATION_MAPS, "featureGates", "cpuManagerPolicyOptions",
                          "topologyManagerPolicyOptions", "staticPodURLHeader"))  # fmt: skip


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v and path not in WHOLE_VALUES:
            out.update(_leaves(v, path + "."))
        else:
            out[path] = v
    return out


@functools.cache
def _default_paths() -> dict[str, Any]:
    return _leaves(upstream_defaults())


@functools.cache
def _duration_paths() -> frozenset[str]:
    """The defaulted leaves whose value is a Go duration ("10s", "4h0m0s"): read by length of time."""
    out = set(EXTRA_DURATIONS)
    for path, v in _default_paths().items():
        if isinstance(v, str) and v[-1:] in ("s", "m", "h") and v[:1].isdigit():
            try:
                parse_duration(v)
            except ParseError:
                continue
            out.add(path)
    return frozenset(out)


def effective(cfg: KubeletConfig, reading: str, release: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The canonical effective configuration of a `configz` or `files` reading (see the module's text); a files
    reading's KubeletConfig already holds what the flags set (conformance.facts.kubelet.flags_to_config). A files
    reading is defaulted as the kubelet of `release` defaults (config.kubelet_defaults.defaults_for)."""
    if reading == "configz":
        tree = {k: v for k, v in cfg.values.items() if k not in ("kind", "apiVersion")}
    else:
        chosen = {k: v for k, v in cfg.values.items()
                  if k not in ("kind", "apiVersion") and not cfg.origins.get(k, "").startswith("upstream default")}  # fmt: skip
        tree = deep_merge(defaults_for(release), chosen)  # the defaults hold no map a set value would merge into
        if "evictionHard" not in chosen:
            tree["evictionHard"] = dict(LINUX_EVICTION_HARD)
        # Defaults that follow another key are applied when the --config file is loaded and defaulted, before the
        # drop-ins merge and the flags re-apply (cmd/kubelet/app/server.go): they follow the file's own value only.
        given = cfg.file_values
        if "nodeStatusReportFrequency" not in chosen and not is_zero(given.get("nodeStatusUpdateFrequency")):
            tree["nodeStatusReportFrequency"] = given["nodeStatusUpdateFrequency"]
        if "serializeImagePulls" not in chosen and _int(given.get("maxParallelImagePulls")) >= 2:
            tree["serializeImagePulls"] = False
        if _int(tree.get("podPidsLimit")) < 0:
            tree["podPidsLimit"] = -1
    # A default that changed between releases counts as the newest release's: what a node's release defaults is
    # told apart by the `kubelet` attribute, not again here. So a pool in the middle of an upgrade digests alike
    # where its files do, and a configz of an older release (eventRecordQPS 5 on 1.26) equals its files read
    # under that release's defaults.
    if release is not None:
        own, newest = defaults_for(release), defaults_for(None)
        for key in RELEASE_DEFAULTS:
            if key in tree and tree[key] == own[key]:
                tree[key] = newest[key]
    return _canonical(tree, "")


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _duration(v: Any, path: str) -> str:
    seconds = Decimal(str(parse_duration(v, what=f"kubelet {path}")))
    return f"{seconds.normalize():f}s"


def _quantity(v: Any, path: str) -> Any:
    if isinstance(v, str) and v.strip().endswith("%"):
        return v.strip()
    return f"{parse_quantity(v, what=f'kubelet {path}').normalize():f}"


def _canonical(v: Any, path: str) -> Any:
    """Normalised values, empty ones and zero values of fields without a default left out (None: leave out)."""
    top = path.split(".", 1)[0]
    if isinstance(v, dict):
        if top in QUANTITY_MAPS and path == top:
            out = {k: _quantity(x, f"{path}.{k}") for k, x in v.items()}
        elif top in DURATION_MAPS and path == top:
            out = {k: _duration(x, f"{path}.{k}") for k, x in v.items()}
        elif path in WHOLE_VALUES:
            out = {k: _number(x) for k, x in v.items()}
        else:
            out = {}
            for k, x in v.items():
                c = _canonical(x, f"{path}.{k}" if path else str(k))
                if c is not None:
                    out[k] = c
        return out or None
    if isinstance(v, list):
        if top == "reservedMemory" and path == top:
            v = [{**m, "limits": {k: _quantity(q, f"reservedMemory.limits.{k}") for k, q in (m.get("limits") or {}).items()}}
                 if isinstance(m, dict) else m for m in v]  # fmt: skip
        return [_number(x) for x in v] or None
    if v is None or v == "":
        return None
    if path in _duration_paths():
        v = _duration(v, path)
    elif path in QUANTITIES:
        v = _quantity(v, path)
    v = _number(v)
    if path not in _default_paths() and (v is False or v == "0s" or (type(v) in (int, float) and v == 0)):
        return None  # a field without a default: its zero value is what the kubelet has when it is omitted
    return v


def _number(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _number(x) for k, x in v.items()}
    return v
