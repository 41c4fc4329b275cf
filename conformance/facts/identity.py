"""A node's identity record: what peers in a pool should share (OS, kernel, kubelet, runtime, NVIDIA driver,
GPUs) and digests of the configuration the checks judge, all from the one collection.

Digests are SHA-256 over the canonical JSON of the parsed form (keys sorted, no whitespace), so a file's
formatting, comments and key order do not change them; their input is the collection's, where secrets are
already redacted (conformance.collection.redact). An attribute that could not be read is None, with the
reason in `errors`: unknown is never a value that matches or differs."""

from __future__ import annotations

import re
from typing import Any

from conformance.errors import ConformanceError
from conformance.facts.canonical import digest


def os_name(text: str) -> str | None:
    """PRETTY_NAME of os-release(5), else NAME and VERSION_ID."""
    fields = dict(re.findall(r'^([A-Z_]+)=["\']?(.*?)["\']?\s*$', text, re.M))
    return fields.get("PRETTY_NAME") or " ".join(x for x in (fields.get("NAME"), fields.get("VERSION_ID")) if x) or None


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
        release = facts.containerd_release if name == "containerd" else None
        if name == "containerd" and release is None:
            raise ConformanceError("containerd did not answer --version")
        return f"{name} {release}" if release else name

    def runtime_config() -> str:
        cfg = facts.runtime_config
        if cfg.effective is None:
            raise ConformanceError(f"the runtime refuses its configuration: {cfg.refused}")
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
    take("gpu_products", lambda: gpu(lambda g: ", ".join(sorted({x.name or "?" for x in g.gpus}))))
    take("gpu_vbios", lambda: per_gpu("vbios"))
    take("gpu_inforom", lambda: per_gpu("inforom"))
    take("mig", lambda: gpu(lambda g: ", ".join(sorted({"on" if x.mig else "off" if x.mig is False else "?" for x in g.gpus}))))
    take("kubelet_config", lambda: digest(facts.kubelet_config.values))
    take("runtime_config", runtime_config)
    take("sysctls", lambda: digest(facts.sysctls))
    return values, errors
