"""The kubelet's effective configuration, built as the kubelet builds it.

Order (later wins): upstream defaults < the `--config` file < `--config-dir` drop-ins (sorted by name,
files ending in `.conf`) < command-line flags. Each key remembers which layer decided it, so a
verdict can say "cpuManagerPolicy = none (flag --cpu-manager-policy)".
"""

from __future__ import annotations

import copy
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import yaml

from conformance.config.kubelet_defaults import upstream_defaults
from conformance.config.units import parse_duration
from conformance.errors import ParseError

# The keys the checks read, with the upstream default of each: KubeletConfiguration v1beta1 as the kubelet's
# own defaulting writes it (conformance/config/kubelet_defaults.v1beta1.yaml, the fully defaulted round-trip
# test data of kubernetes/kubernetes), and the empty value of its type for a key that object leaves out.
CHECKED_KEYS = (
    "cpuManagerPolicy", "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod", "topologyManagerPolicy",
    "topologyManagerScope", "memoryManagerPolicy", "reservedMemory", "reservedSystemCPUs", "kubeReserved",
    "systemReserved", "cgroupDriver", "cgroupsPerQOS", "featureGates", "allowedUnsafeSysctls", "cpuCFSQuota",
)  # fmt: skip

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
    # names that do not camel-case to their field (cmd/kubelet/app/options/options.go AddKubeletConfigFlags binds
    # each flag to a field by hand: `fs.BoolVar(&c.FailCgroupV1, "fail-cgroupv1", ...)`,
    # `fs.BoolVar(&c.ServerTLSBootstrap, "rotate-server-certificates", ...)`, `&c.ContentType,
    # "kube-api-content-type"`; issue 53.6)
    "fail-cgroupv1": "failCgroupV1", "rotate-server-certificates": "serverTLSBootstrap", "runonce": "runOnce",
    "kube-api-content-type": "contentType",
}  # fmt: skip

UPSTREAM_DEFAULTS: dict[str, Any] = {
    k: upstream_defaults()[k] if k in upstream_defaults() else EXTRA_FIELDS[k]() for k in CHECKED_KEYS
}


def go_parse_bool(value: str) -> bool | None:
    """Go's strconv.ParseBool, which the kubelet uses for boolean flags and for the values of
    cpuManagerPolicyOptions (pkg/kubelet/cm/cpumanager/policy_options.go, NewStaticPolicyOptions):
    exactly these spellings; anything else is an error (None here)."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


@dataclass(frozen=True)
class Setting:
    """One effective key of the kubelet configuration and where its value came from."""

    key: str
    value: Any
    source: str

    def describe(self) -> str:
        return f"{self.key} = {json.dumps(self.value)} ({self.source})"


@dataclass
class KubeletArgs:
    """What the kubelet's command line says: config file, drop-in dir, root dir and flags."""

    argv: list[str]
    config: str | None = None
    config_dir: str | None = None
    root_dir: str = "/var/lib/kubelet"
    flags: dict[str, list[str | None]] = field(default_factory=dict)


def split_cmdline(raw: bytes) -> list[str]:
    """/proc/<pid>/cmdline: NUL-separated arguments."""
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def parse_kubelet_args(argv: list[str], cwd: str | None = None) -> KubeletArgs:
    """Parse a running kubelet's arguments without a list of its flags.

    pflag (github.com/spf13/pflag, flag.go parseLongArg/parseSingleShortArg) gives a flag without `=`
    the next argument as its value unless the flag is boolean (NoOptDefVal set), and a boolean flag
    never takes a separate value. The kubelet accepts no positional arguments: cmd/kubelet/app/server.go
    returns "unknown command" when cleanFlagSet.Args() is not empty, so a kubelet that runs has none.
    Hence, on a running kubelet's command line, an argument that does not start with '-' can only be
    the value of the flag before it, and one that starts with '-' is a flag of its own (a non-boolean
    flag would have swallowed it, leaving the next word positional, which the kubelet refuses)."""
    out = KubeletArgs(argv=list(argv))
    i = 1
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            break
        if not a.startswith("-") or a == "-":
            continue
        name, eq, val = a.lstrip("-").partition("=")
        name = name.replace("_", "-")
        value: str | None
        if eq:
            value = val
        elif i < len(argv) and not argv[i].startswith("-"):
            value = argv[i]
            i += 1
        else:
            value = None  # a boolean flag (or a value-less flag at the end)
        out.flags.setdefault(name, []).append(value)
    if out.flags.get("config"):
        out.config = _absolute(out.flags["config"][-1], cwd)
    if out.flags.get("config-dir"):
        out.config_dir = _absolute(out.flags["config-dir"][-1], cwd)
    if out.flags.get("root-dir") and out.flags["root-dir"][-1]:
        out.root_dir = _absolute(out.flags["root-dir"][-1], cwd) or out.root_dir
    return out


def _absolute(path: str | None, cwd: str | None) -> str | None:
    if not path:
        return None
    if path.startswith("/"):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd or "/", path))


def _parse_map(value: str, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        k, eq, v = item.partition("=")
        if not eq:
            raise ParseError(f"kubelet flag --{flag}: {item!r} is not key=value")
        out[k.strip()] = v.strip()
    return out


def _parse_bool(value: str | None, flag: str) -> bool:
    if value is None:
        return True
    parsed = go_parse_bool(value.strip())
    if parsed is None:
        raise ParseError(f"kubelet flag --{flag}: {value!r} is not a boolean the kubelet accepts (Go strconv.ParseBool)")
    return parsed


def _parse_reserved_memory(values: list[str | None]) -> list[dict[str, Any]]:
    """`--reserved-memory 0:memory=1Gi,hugepages-1M=2Gi` (repeatable; `;` separates NUMA nodes)."""
    out: list[dict[str, Any]] = []
    for value in values:
        for group in (value or "").split(";"):
            if not group.strip():
                continue
            numa, colon, rest = group.partition(":")
            if not colon or not numa.strip().isdigit():
                raise ParseError(f"kubelet flag --reserved-memory: {group!r} is not NUMA:resource=quantity")
            out.append({"numaNode": int(numa), "limits": _parse_map(rest, "reserved-memory")})
    return out


def _camel(flag: str) -> str:
    head, *rest = flag.split("-")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def field_of_flag(flag: str) -> str | None:
    """The configuration field a kubelet flag sets (dotted when nested), or None for a flag that sets none
    (`--node-ip`, `--hostname-override`, `--kubeconfig`, ...)."""
    if flag in IRREGULAR_FLAGS:
        return IRREGULAR_FLAGS[flag]
    name = _camel(flag)
    return name if name in upstream_defaults() or name in EXTRA_FIELDS else None


def _type_of(path: str) -> type:
    if path in EXTRA_FIELDS:
        return EXTRA_FIELDS[path]
    value: Any = upstream_defaults()
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return type(value) if value is not None else str


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


def _flag_value(flag: str, path: str, values: list[str | None]) -> Any:
    """A flag's text as its field's value, as the kubelet's flag types parse it: the last of a repeated scalar
    flag wins, map flags (cliflag MapStringString, MapStringBool) and string slices gather every occurrence."""
    last = values[-1]
    kind = _type_of(path)
    if path in ("evictionHard", "evictionSoft", "evictionMinimumReclaim"):  # --eviction-hard=memory.available<100Mi
        sep = "=" if path == "evictionMinimumReclaim" else "<"
        return {k.strip(): v.strip() for k, v in (_pair(i, flag, sep) for i in (last or "").split(",") if i.strip())}
    if path == "registerWithTaints":
        return _taints(values)
    if path == "reservedMemory":
        return _parse_reserved_memory(values)
    if kind is bool:
        return _parse_bool(last, flag)
    if kind in (int, float):
        try:
            return kind(last or "")
        except ValueError as e:
            raise ParseError(f"kubelet flag --{flag}: {last!r} is not a number") from e
    if kind is dict:
        merged: dict[str, Any] = {}
        for v in values:
            merged.update(_parse_map(v or "", flag))
        if path == "featureGates":  # map[string]bool: each value as Go's strconv.ParseBool reads it
            return {k: _parse_bool(v, f"{flag} {k}") for k, v in merged.items()}
        return merged
    if kind is list:
        return [x.strip() for v in values for x in (v or "").split(",") if x.strip()]
    return last or ""


def _pair(item: str, flag: str, sep: str) -> tuple[str, str]:
    k, found, v = item.partition(sep)
    if not found:
        raise ParseError(f"kubelet flag --{flag}: {item!r} is not signal{sep}quantity")
    return k, v


def flags_to_config(flags: dict[str, list[str | None]]) -> dict[str, tuple[Any, str]]:
    """The configuration fields that command-line flags set: field (dotted when nested) -> (value, "flag --name").
    A flag the kubelet would refuse (a number that is not one, a boolean Go does not read) is a ParseError: a
    running kubelet was not started with it."""
    out: dict[str, tuple[Any, str]] = {}
    for flag, values in flags.items():
        path = field_of_flag(flag)
        if path is not None:
            out[path] = (_flag_value(flag, path, values), f"flag --{flag}")
    return out


# libyaml's parser where PyYAML was built with it (its wheels are): the same safe constructor and
# resolver as yaml.safe_load, 8.7 times faster on the upstream KubeletConfiguration defaults sample
# (tests/samples, 2.4 KB: 0.41 against 3.54 ms).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_mapping(text: str, path: str, what: str) -> dict[str, Any]:
    """A YAML (or JSON) document that must be a mapping; an empty file is an empty mapping. Node files
    are untrusted: malformed or absurdly nested input is a ParseError naming the file, never a crash."""
    try:
        doc = yaml.load(text, Loader=SAFE_LOADER) if text.strip() else {}
    except yaml.YAMLError as e:
        raise ParseError(f"{path}: not valid YAML/JSON: {_one_line(e)}") from e
    except RecursionError as e:
        raise ParseError(f"{path}: nested too deeply") from e
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ParseError(f"{path}: expected {what}, got {type(doc).__name__}")
    return doc


def load_config_document(text: str, path: str) -> dict[str, Any]:
    """A KubeletConfiguration file (YAML or JSON). Raises ParseError naming the file."""
    if text == "":
        # the kubelet refuses an empty config file, --config or drop-in ("kubelet config file %q was empty",
        # pkg/kubelet/kubeletconfig/configfiles/configfiles.go): a running kubelet did not start from this
        raise ParseError(f"{path}: empty, and the kubelet refuses an empty config file: the running kubelet was not "
                         "started from what was read (the file changed since, or was read short)")  # fmt: skip
    doc = load_yaml_mapping(text, path, "a KubeletConfiguration mapping")
    kind = doc.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        raise ParseError(f"{path}: kind is {kind!r}, expected 'KubeletConfiguration'")
    return doc


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


def deep_merge(base: Any, over: Any) -> Any:
    """`over` merged into `base` as the kubelet merges its config files: maps key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = deep_merge(base.get(k), v) if k in base else v
        return out
    return over


@dataclass
class KubeletConfig:
    """The effective kubelet configuration: merged values, with the layer that set each key."""

    values: dict[str, Any]
    origins: dict[str, str]
    layers: list[str]
    drift: dict[str, str] = field(default_factory=dict)  # key -> what the node's files say instead (configz only)
    file_values: dict[str, Any] = field(default_factory=dict)  # what the --config file itself set (it alone is defaulted)

    def get(self, key: str) -> Setting:
        if key in self.values:
            return Setting(key, self.values[key], self.origins.get(key, "?"))
        return Setting(key, UPSTREAM_DEFAULTS.get(key), "upstream default (key not set)")

    def decided_by(self) -> str:
        return " < ".join(self.layers)


def k3s_kubelet_argv(k3s_argv: list[str], config_docs: list[tuple[str, str]]) -> list[str]:
    """The command line of the kubelet that k3s runs in its own process: `--kubelet-arg` values of k3s's
    config file (/etc/rancher/k3s/config.yaml, then config.yaml.d/*.yaml; later files win for plain keys
    and append to lists ending in '+') and of its command line (which wins), each `name=value` becoming
    `--name=value` (docs.k3s.io, "Configuration File" and the `--kubelet-arg` server/agent flag)."""
    args: list[str] = []
    for path, text in config_docs:
        doc = load_yaml_mapping(text, path, "a mapping of k3s flags")
        for key, value in doc.items():
            if key in ("kubelet-arg", "kubelet-arg+"):
                values = value if isinstance(value, list) else [value]
                args = (args if key.endswith("+") else []) + [str(v) for v in values]
    for i, a in enumerate(k3s_argv):
        if a.startswith("--kubelet-arg="):
            args.append(a.split("=", 1)[1])
        elif a == "--kubelet-arg" and i + 1 < len(k3s_argv):
            args.append(k3s_argv[i + 1])
    return ["kubelet (inside k3s)", *(f"--{a.lstrip('-')}" for a in args)]


def walk_order(root: str, paths: list[str]) -> list[str]:
    """Drop-ins in the order the kubelet applies them: filepath.WalkDir over --config-dir (recursive,
    each folder's entries in lexical order, a folder's contents where its name sorts), every file
    ending in .conf (cmd/kubelet/app/server.go, mergeKubeletConfigurations). Sorting by path
    components gives that order; sorting whole strings would not ('20-x.conf' < '20/a.conf')."""
    base = root.rstrip("/") + "/"
    return sorted(paths, key=lambda p: tuple(p[len(base) :].split("/")) if p.startswith(base) else (p,))


# Linux's default hard eviction thresholds (pkg/kubelet/apis/config/v1beta1/defaults_linux.go,
# DefaultEvictionHard), applied by SetDefaults_KubeletConfiguration when evictionHard is unset.
LINUX_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}
# What a kubelet started without --config runs with besides the v1beta1 defaults: cmd/kubelet/app/options/
# options.go NewKubeletConfiguration applies applyLegacyDefaults to "preserve the command line API" (anonymous
# requests allowed, no webhook authentication, authorization AlwaysAllow, the read-only port 10255). A loaded
# --config file is defaulted as v1beta1 only (server.go loadConfigFile), without these.
LEGACY_FLAG_DEFAULTS: dict[str, Any] = {
    "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
    "authorization": {"mode": "AlwaysAllow"},
    "readOnlyPort": 10255,
}
# Fields SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go) sets when they hold their
# zero value (`== zeroDuration`, `== 0`, `== ""`), so a loaded --config file that writes the zero value gets the
# default: kubeadm writes `cpuManagerReconcilePeriod: 0s`, and the kubelet runs with 10s (issue 53.19).
ZERO_DEFAULTED = (
    "syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "authentication.webhook.cacheTTL",
    "authorization.webhook.cacheAuthorizedTTL", "authorization.webhook.cacheUnauthorizedTTL",
    "streamingConnectionIdleTimeout", "nodeStatusUpdateFrequency", "imageMinimumGCAge", "volumeStatsAggPeriod",
    "cpuManagerReconcilePeriod", "runtimeRequestTimeout", "evictionPressureTransitionPeriod", "port", "registryBurst",
    "eventBurst", "nodeLeaseDurationSeconds", "maxPods", "maxOpenFiles", "kubeAPIBurst", "address",
    "authorization.mode", "healthzBindAddress", "cgroupDriver", "cpuManagerPolicy", "memoryManagerPolicy",
    "topologyManagerPolicy", "topologyManagerScope", "hairpinMode", "contentType", "containerLogMaxSize",
    "configMapAndSecretChangeDetectionStrategy", "volumePluginDir", "containerRuntimeEndpoint", "podLogsDir",
)  # fmt: skip


def is_zero(value: Any) -> bool:
    if value in (0, "", None) and value is not False:
        return True
    if isinstance(value, str):
        try:
            return parse_duration(value) == 0
        except ParseError:
            return False
    return False


def default_zero_values(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], list[str]]:
    """The --config file as the kubelet defaults it on loading: its zero values of ZERO_DEFAULTED fields replaced
    by the defaults (notes say which)."""
    out = copy.deepcopy(doc)
    notes = []
    for dotted in ZERO_DEFAULTED:
        *parents, leaf = dotted.split(".")
        holder: Any = out
        for part in parents:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or leaf not in holder or not is_zero(holder[leaf]):
            continue
        default: Any = upstream_defaults()
        for part in dotted.split("."):
            default = default.get(part) if isinstance(default, dict) else None
        if default is None:
            continue
        notes.append(f"{dotted}: {path} writes {holder[leaf]!r}, which the kubelet defaults to {default!r}")
        holder[leaf] = default
    return out, notes


LEGACY_ORIGIN = "legacy flag default (no --config file: cmd/kubelet/app/options/options.go applyLegacyDefaults)"


def effective_config(
    file_doc: tuple[str, dict[str, Any]] | None,
    dropins: list[tuple[str, dict[str, Any]]],
    flag_values: dict[str, tuple[Any, str]],
) -> KubeletConfig:
    """Merge the layers in the kubelet's order. `dropins` must already be sorted by file name.

    The base is what cmd/kubelet/app/server.go starts from: the loaded --config file defaulted as v1beta1, or
    without a file the legacy flag defaults (LEGACY_FLAG_DEFAULTS). Drop-ins are JSON merge patches over that
    defaulted base (mergeKubeletConfigurations, jsonpatch.MergePatch): a map they set merges key by key into
    the base's, so a drop-in's evictionHard adds to the defaulted thresholds (or the file's) instead of
    replacing them; the flags then apply last."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    layers = ["upstream defaults"]
    for k, v in UPSTREAM_DEFAULTS.items():
        values[k] = v
        origins[k] = "upstream default (key not set)"
    if file_doc is None:
        layers.append("legacy flag defaults (no --config file)")
        for k, v in LEGACY_FLAG_DEFAULTS.items():
            values[k] = deep_merge(values[k], v) if k in values and isinstance(values[k], dict) else v
            origins[k] = LEGACY_ORIGIN
    given = dict(file_doc[1]) if file_doc is not None else {}
    if file_doc is not None:
        defaulted, _ = default_zero_values(file_doc[1], file_doc[0])
        file_doc = (file_doc[0], defaulted)
    docs = ([file_doc] if file_doc else []) + list(dropins)
    for i, (path, doc) in enumerate(docs):
        label = f"file {path} (--config)" if file_doc and i == 0 else f"drop-in {path} (--config-dir)"
        layers.append(label)
        dropin = not (file_doc and i == 0)
        for k, v in doc.items():
            if k in ("kind", "apiVersion"):
                continue
            if dropin and k == "evictionHard" and isinstance(v, dict) and not isinstance(values.get(k), dict):
                values[k] = dict(LINUX_EVICTION_HARD)  # the defaulted base holds the defaults the patch merges into
            values[k] = deep_merge(values[k], v) if k in values else v
            origins[k] = label
    if flag_values:
        layers.append("command-line flags")
    for path, (v, label) in flag_values.items():
        k, _, rest = path.partition(".")
        if rest:  # a nested field (--anonymous-auth: authentication.anonymous.enabled)
            v = deep_merge(values.get(k), _nested(rest, v))
        elif k == "featureGates" and isinstance(values.get(k), dict):
            # the gates of --feature-gates add to the file's, they do not replace them: the kubelet re-parses its
            # flags over the loaded file and adds back the file's gates the flags did not set
            # (cmd/kubelet/app/server.go, kubeletConfigFlagPrecedence)
            v = {**values[k], **v}
        values[k] = v
        origins[k] = label
    file_values = {k: v for k, v in given.items() if k not in ("kind", "apiVersion")}
    return KubeletConfig(values=values, origins=origins, layers=layers, file_values=file_values)


CONFIGZ = "live kubelet (configz)"


def configz_config(doc: dict[str, Any], files: KubeletConfig | None, files_error: str | None) -> KubeletConfig:
    """The kubelet's running configuration (the `kubeletconfig` object of configz) as the source of
    truth. Where the node's files and flags say otherwise for a key the checks read, that is drift:
    the kubelet was not restarted after a change, or it reads another file."""
    values: dict[str, Any] = dict(UPSTREAM_DEFAULTS)
    origins = dict.fromkeys(UPSTREAM_DEFAULTS, f"{CONFIGZ}, key omitted: upstream default")
    for k, v in doc.items():
        values[k] = v
        origins[k] = CONFIGZ
    drift: dict[str, str] = {}
    if files is not None:
        for k in UPSTREAM_DEFAULTS:
            theirs = files.get(k)
            if _normal(theirs.value) != _normal(values.get(k)):
                drift[k] = f"{theirs.source} says {json.dumps(theirs.value)}"
                origins[k] = f"{CONFIGZ}; DRIFT: {drift[k]} (kubelet not restarted after a change, or it reads another file)"
        compared = f"node files compared: {len(drift)} checked key(s) differ"
    else:
        compared = f"node files not compared ({files_error})"
    return KubeletConfig(values=values, origins=origins, layers=[CONFIGZ, compared], drift=drift)


def _normal(v: Any) -> Any:
    """Compare as the kubelet reads: durations by length of time, numbers and booleans by value."""
    if isinstance(v, str):
        try:
            return ("duration", parse_duration(v))
        except ParseError:
            return v
    if isinstance(v, dict):
        return {k: _normal(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_normal(x) for x in v]
    return v
