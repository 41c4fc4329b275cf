"""A node's identity record: what peers in a pool should share (OS, kernel, kubelet, runtime, NVIDIA driver,
GPUs) and digests of the configuration the checks judge, all from the one collection.

Digests are SHA-256 over the canonical JSON of the parsed form (keys sorted, no whitespace), so a file's
formatting, comments and key order do not change them; their input is the collection's, where secrets are
already redacted (conformance.collection.redact). An attribute that could not be read is None, with the
reason in `errors`: unknown is never a value that matches or differs."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from conformance.errors import ConformanceError
from conformance.facts.canonical import digest
from conformance.facts.kubelet_effective import effective


def os_name(text: str) -> str | None:
    """PRETTY_NAME of os-release(5), else NAME and VERSION_ID."""
    fields = dict(re.findall(r'^([A-Z_]+)=["\']?(.*?)["\']?\s*$', text, re.M))
    return fields.get("PRETTY_NAME") or " ".join(x for x in (fields.get("NAME"), fields.get("VERSION_ID")) if x) or None


# KubeletConfiguration keys (k8s.io/kubelet/config/v1beta1 types.go) whose value names the node itself, left out
# of the kubelet_config digest so that peers configured alike digest alike:
# - providerID: the node's own instance ("aws:///us-west-2a/i-0abc..."; EKS AL2023's nodeadm writes it into the
#   config file of every node, awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go withCloudProvider);
# - podCIDR: the node's own pod range (standalone kubelets);
# - address, healthzBindAddress: only when set to one of the node's own unicast addresses (0.0.0.0, 127.0.0.1
#   and :: are shared settings and stay in).
# Every other string that holds the node's own name (tlsCertFile: /var/lib/kubelet/pki/kubelet-<node>.crt) is
# digested with the name replaced by "<node>".
NODE_OWN_KEYS = ("providerID", "podCIDR")
# Left out too: `logging` (verbosity, format, flush frequency: k8s.io/component-base/logs/api/v1
# LoggingConfiguration, what `-v` sets), which decides what the kubelet writes to its log and nothing it does;
# raising one node's verbosity to debug it is not drift.
DIAGNOSTIC_KEYS = ("logging",)
NODE_OWN_ADDRESS_KEYS = ("address", "healthzBindAddress")


def kubelet_digest(values: dict[str, Any], node: str) -> str:
    """The digest of a kubelet configuration less what names the node itself (NODE_OWN_KEYS above) and its log
    settings (DIAGNOSTIC_KEYS)."""
    kept = {k: v for k, v in values.items() if k not in NODE_OWN_KEYS and k not in DIAGNOSTIC_KEYS}
    for key in NODE_OWN_ADDRESS_KEYS:
        try:
            ip = ipaddress.ip_address(str(kept.get(key, "")))
        except ValueError:
            continue
        if not (ip.is_unspecified or ip.is_loopback):
            del kept[key]

    def anonymous(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(node, "<node>") if node else v
        if isinstance(v, dict):
            return {k: anonymous(x) for k, x in v.items()}
        if isinstance(v, list):
            return [anonymous(x) for x in v]
        return v

    return digest(anonymous(kept))


def identity(facts: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """(attribute -> value or None, attribute -> why it is None) of one node's NodeFacts."""
    b = facts.bundle
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}

    def take(name: str, read: Any) -> None:
        try:
            values[name] = read()
        except (ConformanceError, KeyError, ValueError) as e:
            values[name], errors[name] = None, str(e)

    def os_release() -> str | None:
        text = b.optional_text("/etc/os-release")
        if text is None:
            raise ConformanceError("/etc/os-release is missing or was not collected")
        return os_name(text)

    def runtime() -> str:
        name, _ = facts.runtime_name
        if name == "containerd":
            release = facts.containerd_release
            if release is None:
                raise ConformanceError(f"containerd's release: {facts.containerd_release_unknown}")
            return f"{name} {release}"
        if name == "docker":
            raise ConformanceError("Docker's release (behind cri-dockerd) is not read")
        release = facts.crio_release
        if release is None:
            raise ConformanceError("CRI-O's release is unknown (no /var/run/crio/version, and no package owns its executable)")
        return f"{name} {release}"

    def runtime_config() -> str:
        cfg = facts.runtime_config
        if cfg.effective is None:
            raise ConformanceError(f"the runtime refuses its configuration: {cfg.refused}")
        alternatives = getattr(cfg, "alternatives", None) or {}
        if alternatives:  # containerd's release unknown: a value only if every release reads the files alike
            seen = {
                label: (alt.effective if not isinstance(alt, Exception) else f"refused ({alt})")
                for label, alt in alternatives.items()
            }
            if len(set(seen.values())) > 1:
                raise ConformanceError(
                    f"containerd's release is unknown ({facts.containerd_release_unknown}) and its releases merge these "
                    "files differently: " + ", ".join(sorted(seen))
                )
        return cfg.effective

    take("os", os_release)
    take("kernel", lambda: b.command("uname").data.decode("utf-8", "replace").strip() or None)
    take("kubelet", lambda: ".".join(map(str, facts.kubelet_version)))
    take("runtime", runtime)

    def gpu(read: Any) -> Any:
        gpus = facts.gpus
        if not gpus.gpus and not gpus.pci_functions:
            return "no GPU"  # sysfs lists no NVIDIA display-class function: a value, not an unknown
        return read(gpus)

    def per_gpu(key: str) -> Any:
        def read(g: Any) -> str:
            values = set()
            for x in g.gpus:
                value = getattr(x, key)
                if value is None:
                    why = x.errors.get(key, "not in the GPU facts")
                    if why in ("not supported on this GPU", "function not in this driver's NVML"):
                        value = f"n/a ({why})"  # the same answer on every peer with this GPU and driver
                    else:
                        raise ConformanceError(f"GPU {x.index} {key}: {why}")
                values.add(value)
            return ", ".join(sorted(values))

        return gpu(read)

    take("driver", lambda: gpu(lambda g: g.driver))
    take("cuda_driver", lambda: gpu(lambda g: g.cuda_driver))
    take("gpu_count", lambda: len(facts.gpus.gpus))

    def products(g: Any) -> str:
        unread = [str(x.index) for x in g.gpus if not x.name]
        if unread:
            raise ConformanceError(f"the product name of GPU {', '.join(unread)} was not read")
        return ", ".join(sorted({x.name for x in g.gpus}))

    def mig(g: Any) -> str:
        modes = set()
        for x in g.gpus:
            if x.mig is not None:
                modes.add("on" if x.mig else "off")
                continue
            why = x.errors.get("mig", "not in the GPU facts")
            if why not in ("not supported on this GPU", "function not in this driver's NVML"):
                raise ConformanceError(f"the MIG mode of GPU {x.index} was not read ({why})")
            modes.add(f"n/a ({why})")  # a GPU without MIG: the same answer on every peer with this GPU
        return ", ".join(sorted(modes))

    take("gpu_products", lambda: gpu(products))
    take("gpu_vbios", lambda: per_gpu("vbios"))
    take("gpu_inforom", lambda: per_gpu("inforom"))
    take("mig", lambda: gpu(mig))

    def memory_mode(_: Any) -> str:
        mode = facts.gpu_memory_mode
        return "n/a (no NVLink-C2C GPU)" if mode is None else mode[0]

    take("gpu_memory_mode", lambda: gpu(memory_mode))

    # which reading the digest is of: configz holds the kubelet's defaulted object, the files only the keys they set,
    # so the two digest differently for one configuration; drift compares like with like (fleet_drift.reading)
    def kubelet_config() -> str:
        reading = "configz" if facts.configz is not None else "files"
        try:
            release = facts.kubelet_version
        except ConformanceError:
            release = None  # the newest release's defaults: a pool of one release digests alike either way
        return f"{reading}:" + kubelet_digest(effective(facts.kubelet_config, reading, release), facts.name)

    take("kubelet_config", kubelet_config)
    take("runtime_config", runtime_config)
    take("sysctls", lambda: digest(facts.sysctls))
    return values, errors
