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

from conformance.config.kubelet_defaults import upstream_defaults
from conformance.config.units import parse_duration, parse_quantity
from conformance.errors import ParseError
from conformance.facts.kubelet import KubeletConfig, go_parse_bool

# Linux's default hard eviction thresholds (pkg/kubelet/apis/config/v1beta1/defaults_linux.go,
# DefaultEvictionHard), applied by SetDefaults_KubeletConfiguration when evictionHard is unset.
LINUX_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}

# v1beta1 fields (k8s.io/kubelet/config/v1beta1 types.go) that the defaulted object does not hold, with
# their JSON type: what a flag's text becomes.
EXTRA_FIELDS: dict[str, type] = {
    "staticPodPath": str, "staticPodURL": str, "staticPodURLHeader": dict, "readOnlyPort": int, "providerID": str,
    "tlsCertFile": str, "tlsPrivateKeyFile": str, "tlsCipherSuites": list, "tlsMinVersion": str,
    "rotateCertificates": bool, "serverTLSBootstrap": bool, "enableContentionProfiling": bool, "clusterDomain": str,
    "clusterDNS": list, "kubeletCgroups": str, "systemCgroups": str, "cgroupRoot": str, "cpuManagerPolicyOptions": dict,
    "topologyManagerPolicyOptions": dict, "qosReserved": dict, "podCIDR": str, "runOnce": bool,
    "maxParallelImagePulls": int, "evictionHard": dict, "evictionSoft": dict, "evictionSoftGracePeriod": dict,
    "evictionMaxPodGracePeriod": int, "evictionMinimumReclaim": dict, "podsPerCore": int, "protectKernelDefaults": bool,
    "featureGates": dict, "systemReserved": dict, "kubeReserved": dict, "reservedSystemCPUs": str,
    "systemReservedCgroup": str, "kubeReservedCgroup": str, "allowedUnsafeSysctls": list,
    "kernelMemcgNotification": bool, "reservedMemory": list, "registerWithTaints": list, "singleProcessOOMKill": bool,
    "imageServiceEndpoint": str, "showHiddenMetricsForVersion": str, "shutdownGracePeriodByPodPriority": list,
    "imagePullCredentialsVerificationPolicy": str, "preloadedImagesVerificationAllowlist": list,
}  # fmt: skip

# Flags whose field is not the flag's name in camel case (cmd/kubelet/app/options/options.go,
# AddKubeletConfigFlags); a dotted field is nested.
IRREGULAR_FLAGS = {
    "reserved-cpus": "reservedSystemCPUs", "event-qps": "eventRecordQPS", "registry-qps": "registryPullQPS",
    "kube-api-qps": "kubeAPIQPS", "kube-api-burst": "kubeAPIBurst", "cgroups-per-qos": "cgroupsPerQOS",
    "cpu-cfs-quota": "cpuCFSQuota", "cpu-cfs-quota-period": "cpuCFSQuotaPeriod",
    "image-gc-high-threshold": "imageGCHighThresholdPercent", "image-gc-low-threshold": "imageGCLowThresholdPercent",
    "minimum-image-ttl-duration": "imageMinimumGCAge", "pod-max-pids": "podPidsLimit", "cluster-dns": "clusterDNS",
    "provider-id": "providerID", "pod-cidr": "podCIDR", "make-iptables-util-chains": "makeIPTablesUtilChains",
    "pod-manifest-path": "staticPodPath", "manifest-url": "staticPodURL", "manifest-url-header": "staticPodURLHeader",
    "contention-profiling": "enableContentionProfiling", "anonymous-auth": "authentication.anonymous.enabled",
    "authentication-token-webhook": "authentication.webhook.enabled",
    "authentication-token-webhook-cache-ttl": "authentication.webhook.cacheTTL",
    "client-ca-file": "authentication.x509.clientCAFile", "authorization-mode": "authorization.mode",
    "authorization-webhook-cache-authorized-ttl": "authorization.webhook.cacheAuthorizedTTL",
    "authorization-webhook-cache-unauthorized-ttl": "authorization.webhook.cacheUnauthorizedTTL",
    "v": "logging.verbosity", "log-flush-frequency": "logging.flushFrequency", "logging-format": "logging.format",
}  # fmt: skip

# Fields holding a map of quantities (or percentages), of durations, and the fields (and map values) that are
# durations though their default is not held: the ones normalised by amount or by length of time.
QUANTITY_MAPS = ("kubeReserved", "systemReserved", "evictionHard", "evictionSoft", "evictionMinimumReclaim", "qosReserved")
DURATION_MAPS = ("evictionSoftGracePeriod",)
EXTRA_DURATIONS = ("crashLoopBackOff.maxContainerRestartPeriod",)
QUANTITIES = ("containerLogMaxSize",)
# Fields whose value is a map or list as a whole: a set value replaces the default, never merges into it.
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


def _camel(flag: str) -> str:
    head, *rest = flag.split("-")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def field_of_flag(flag: str) -> str | None:
    """The configuration field a kubelet flag sets (dotted when nested), or None for a flag that sets none."""
    if flag in IRREGULAR_FLAGS:
        return IRREGULAR_FLAGS[flag]
    name = _camel(flag)
    return name if name in upstream_defaults() or name in EXTRA_FIELDS else None


def _type_of(path: str) -> type:
    if path in EXTRA_FIELDS:
        return EXTRA_FIELDS[path]
    default = _default_paths().get(path, upstream_defaults().get(path))
    return type(default) if default is not None else str


def _map(values: list[str | None], flag: str, sep: str = "=") -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        for item in (value or "").split(","):
            if not item.strip():
                continue
            k, found, v = item.partition(sep)
            if not found:
                raise ParseError(f"kubelet flag --{flag}: {item!r} is not key{sep}value")
            out[k.strip()] = v.strip()
    return out


def _taints(values: list[str | None]) -> list[dict[str, str]]:
    """`--register-with-taints key=value:Effect,key:Effect` as the v1.Taint list the field holds."""
    out = []
    for item in (x.strip() for v in values for x in (v or "").split(",")):
        if not item:
            continue
        kv, colon, effect = item.rpartition(":")
        if not colon:
            raise ParseError(f"kubelet flag --register-with-taints: {item!r} is not key[=value]:Effect")
        key, _, value = kv.partition("=")
        out.append({"key": key, **({"value": value} if value else {}), "effect": effect})
    return out


def flag_fields(flags: dict[str, list[str | None]]) -> dict[str, Any]:
    """The configuration fields the kubelet's flags set: dotted path -> value, typed as the field is."""
    from conformance.facts.kubelet import _parse_reserved_memory

    out: dict[str, Any] = {}
    for flag, values in flags.items():
        path = field_of_flag(flag)
        if path is None:
            continue
        last = values[-1]
        kind = _type_of(path)
        if path in ("evictionHard", "evictionSoft"):
            value: Any = _map(values[-1:], flag, "<")
        elif path == "registerWithTaints":
            value = _taints(values)
        elif path == "reservedMemory":
            value = _parse_reserved_memory(values)
        elif path == "featureGates":
            value = {}
            for k, v in _map(values, flag).items():
                b = go_parse_bool(v)
                if b is None:
                    raise ParseError(f"kubelet flag --feature-gates: {k}={v!r} is not a boolean")
                value[k] = b
        elif kind is bool:
            b = True if last is None else go_parse_bool(last.strip())
            if b is None:
                raise ParseError(f"kubelet flag --{flag}: {last!r} is not a boolean the kubelet accepts")
            value = b
        elif kind in (int, float):
            try:
                value = kind(last or "")
            except ValueError as e:
                raise ParseError(f"kubelet flag --{flag}: {last!r} is not a number") from e
        elif kind is dict:
            value = _map(values, flag)
        elif kind is list:
            value = [x.strip() for v in values for x in (v or "").split(",") if x.strip()]
        else:
            value = last or ""
        out[path] = value
    return out


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        child = tree.get(p)
        tree[p] = child = dict(child) if isinstance(child, dict) else {}
        tree = child
    tree[leaf] = value


def _merge(base: Any, over: Any, path: str = "") -> Any:
    if isinstance(base, dict) and isinstance(over, dict) and path not in WHOLE_VALUES:
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v, f"{path}.{k}" if path else k) if k in base else v
        return out
    return over


def effective(cfg: KubeletConfig, reading: str, flags: dict[str, list[str | None]] | None) -> dict[str, Any]:
    """The canonical effective configuration of a `configz` or `files` reading (see the module's text)."""
    if reading == "configz":
        tree = {k: v for k, v in cfg.values.items() if k not in ("kind", "apiVersion")}
    else:
        chosen = {k: v for k, v in cfg.values.items()
                  if k not in ("kind", "apiVersion") and not cfg.origins.get(k, "").startswith("upstream default")}  # fmt: skip
        for path, value in flag_fields(flags or {}).items():
            if path == "featureGates":  # flags add to the file's gates, they do not replace them (server.go)
                value = {**(chosen.get("featureGates") or {}), **value}
            _set(chosen, path, value)
        tree = _merge(upstream_defaults(), chosen)
        if "evictionHard" not in chosen:
            tree["evictionHard"] = dict(LINUX_EVICTION_HARD)
        if "nodeStatusReportFrequency" not in chosen and "nodeStatusUpdateFrequency" in chosen:
            tree["nodeStatusReportFrequency"] = chosen["nodeStatusUpdateFrequency"]
        if "serializeImagePulls" not in chosen and _int(chosen.get("maxParallelImagePulls")) >= 2:
            tree["serializeImagePulls"] = False
        if _int(tree.get("podPidsLimit")) < 0:
            tree["podPidsLimit"] = -1
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
