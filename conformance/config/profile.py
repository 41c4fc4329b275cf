"""Profiles: the expected values and thresholds, from YAML. Checks never hard-code them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from conformance.config.check_contract import SEVERITIES
from conformance.config.fleet import IDENTITY_ATTRIBUTES
from conformance.config.gpu_health_terms import CLASSES as XID_CLASSES
from conformance.config.gpu_health_terms import CLOCK_REASONS, NVLINK_COUNTERS
from conformance.config.units import parse_duration, parse_quantity
from conformance.errors import ParseError, UsageError

BUNDLED = "default"


class Profile:
    """Effective profile values, read as `profile.get("kubelet.cpu_manager_policy")`."""

    def __init__(self, name: str, values: dict[str, Any], source: str) -> None:
        self.name = name
        self.values = values
        self.source = source

    def get(self, dotted: str) -> Any:
        cur: Any = self.values
        for part in dotted.split("."):
            cur = cur[part]
        return cur


def bundled_names() -> list[str]:
    folder = resources.files("conformance.config").joinpath("profiles")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _read(ref: str) -> tuple[str, dict[str, Any], str]:
    """Resolve a profile name (bundled) or a path to (name, document, source)."""
    path = Path(ref).expanduser()
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"profile {ref}: cannot read it: {e.strerror}") from None
        source, name = str(path), path.stem
    else:
        if ref not in bundled_names():
            raise UsageError(f"profile {ref!r}: no such bundled profile (bundled: {', '.join(bundled_names())})")
        text = resources.files("conformance.config").joinpath("profiles", f"{ref}.yaml").read_text(encoding="utf-8")
        source, name = f"bundled profile {ref}", ref
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise UsageError(f"{source}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: a profile must be a mapping")
    return name, doc, source


def _overlay(base: dict[str, Any], over: dict[str, Any], source: str, prefix: str = "") -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        key = f"{prefix}{k}"
        if k not in base:
            raise UsageError(f"{source}: unknown key {key!r}")
        if key == "site":  # free-form: site check ids to threshold fields (checked against each rule when used)
            if not isinstance(v, dict):
                raise UsageError(f"{source}: site must be a mapping of site check ids to their fields")
            out[k] = {**base[k], **v}
            continue
        if key == "fleet.pin":  # attribute -> value, checked against the attribute names in _validate
            if not isinstance(v, dict):
                raise UsageError(f"{source}: fleet.pin must be a mapping of identity attributes to values")
            out[k] = {**base[k], **v}
            continue
        if isinstance(base[k], dict):
            if not isinstance(v, dict):
                raise UsageError(f"{source}: {key} must be a mapping")
            out[k] = _overlay(base[k], v, source, key + ".")
        else:
            out[k] = v
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _validate(values: dict[str, Any], source: str) -> None:
    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise UsageError(f"{source}: {key} must be {what}")

    k = values["kubelet"]
    need("kubelet.cpu_manager_policy", k["cpu_manager_policy"] in ("none", "static"), "none or static")
    valid_topo = {"none", "best-effort", "restricted", "single-numa-node"}
    need(
        "kubelet.topology_manager_policies",
        isinstance(k["topology_manager_policies"], list) and set(k["topology_manager_policies"]) <= valid_topo,
        f"a list drawn from {sorted(valid_topo)}",
    )
    need("kubelet.topology_manager_scope", k["topology_manager_scope"] in ("container", "pod"), "container or pod")
    need("kubelet.memory_manager_policy", k["memory_manager_policy"] in ("None", "Static"), "None or Static")
    need(
        "kubelet.min_reserved_physical_cores",
        isinstance(k["min_reserved_physical_cores"], int) and k["min_reserved_physical_cores"] >= 0,
        "an integer >= 0",
    )
    try:
        parse_duration(k["max_cpu_manager_reconcile_period"])
    except Exception:
        need("kubelet.max_cpu_manager_reconcile_period", False, "a Go duration such as 10s")
    g = values["gpu"]
    modes = ("mode_or_daemon", "mode", "daemon", "any")
    need("gpu.persistence", g["persistence"] in modes, " or ".join(modes))
    xid_ok = isinstance(g["xid_fail"], list) and set(g["xid_fail"]) <= set(XID_CLASSES)
    need("gpu.xid_fail", xid_ok, f"a list drawn from {list(XID_CLASSES)}")
    need(
        "gpu.clock_events_fail",
        isinstance(g["clock_events_fail"], list) and set(g["clock_events_fail"]) <= set(CLOCK_REASONS.values()),
        f"a list drawn from {sorted(CLOCK_REASONS.values())}",
    )
    limits = g["nvlink_error_limits"]
    need(
        "gpu.nvlink_error_limits",
        isinstance(limits, dict)
        and set(limits) <= set(NVLINK_COUNTERS)
        and all(isinstance(x, int) and x >= 0 for x in limits.values()),
        f"a mapping of {list(NVLINK_COUNTERS)} to integers >= 0",
    )
    up = g["nvlink_links_up"]
    need("gpu.nvlink_links_up", up == "all" or (isinstance(up, int) and not isinstance(up, bool) and up >= 0), "all or a number")
    for key in ("retired_pages_limit", "ecc_aggregate_uncorrected_limit"):
        need(f"gpu.{key}", isinstance(g[key], int) and g[key] >= 0, "an integer >= 0")
    interval = g["dcgm_max_interval_ms"]
    interval_ok = interval is None or (isinstance(interval, int) and not isinstance(interval, bool) and interval > 0)
    need("gpu.dcgm_max_interval_ms", interval_ok, "null or a number of milliseconds")
    corrected = g["ecc_corrected_limit"]
    corrected_ok = corrected is None or (isinstance(corrected, int) and corrected >= 0)
    need("gpu.ecc_corrected_limit", corrected_ok, "null or an integer >= 0")
    need("pods.sysctls_set_by", values["pods"]["sysctls_set_by"] in ("pod", "cni"), "pod or cni")
    files = values["site_checks"]
    need("site_checks", isinstance(files, list) and all(isinstance(f, str) and f for f in files), "a list of rule files")
    s = values["sysctl"]
    for key in ("local_port_range", "nodeport_range"):
        r = s[key]
        need(
            f"sysctl.{key}",
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) and 0 < r[0] <= r[1] <= 65535,
            "[low, high] port numbers",
        )
    need("sysctl.min_somaxconn", isinstance(s["min_somaxconn"], int), "an integer")
    need("sysctl.tcp_tw_reuse", s["tcp_tw_reuse"] in (0, 1, 2), "0, 1 or 2")
    lat = values["latency"]
    need("latency.max_jitter_coefficient", _is_number(lat["max_jitter_coefficient"]), "a number")
    need("latency.max_p99_ms", lat["max_p99_ms"] is None or _is_number(lat["max_p99_ms"]), "a number or null")
    need("latency.max_error_rate", _is_number(lat["max_error_rate"]) and 0 <= lat["max_error_rate"] <= 1, "a number from 0 to 1")
    g = values["gpu"]
    need(
        "gpu.expected_count",
        g["expected_count"] is None or (isinstance(g["expected_count"], int) and g["expected_count"] >= 0),
        "a number of GPUs or null",
    )
    need("gpu.pcie_generation", g["pcie_generation"] in (None, 1, 2, 3, 4, 5, 6), "a PCIe generation (1-6) or null")
    need("gpu.pcie_width", g["pcie_width"] in (1, 2, 4, 8, 16, 32), "a link width (1-32)")
    need(
        "gpu.h2d_floor_gbps",
        isinstance(g["h2d_floor_gbps"], dict) and all(_is_number(v) for v in g["h2d_floor_gbps"].values()),
        "a mapping of PCIe generation to GB/s",
    )
    need("gpu.h2d_floor_c2c_gbps", g["h2d_floor_c2c_gbps"] is None or _is_number(g["h2d_floor_c2c_gbps"]), "GB/s or null")
    need("gpu.mig", g["mig"] in ("any", "off", "on"), "any, off or on")
    need("gpu.memory_mode", g["memory_mode"] in ("driver", "any"), "driver or any")
    need("gpu.cdi", g["cdi"] in ("auto", "required"), "auto or required")
    need(
        "gpu.dra_drivers",
        isinstance(g["dra_drivers"], list) and all(isinstance(v, str) and v for v in g["dra_drivers"]),
        "a list of DRA driver names such as gpu.nvidia.com ([]: no DRA driver hands out GPUs)",
    )
    need("gpu.measure_bandwidth", isinstance(g["measure_bandwidth"], bool), "true or false")
    need("gpu.pcie_replay_limit", isinstance(g["pcie_replay_limit"], int), "an integer")
    for key in ("h2d_buffer_mib", "h2d_copies", "h2d_samples", "h2d_warmup"):
        need(f"gpu.{key}", isinstance(g[key], int) and g[key] >= (0 if key == "h2d_warmup" else 1), "a positive integer")
    need("gpu.h2d_warmup_s", _is_number(g["h2d_warmup_s"]) and g["h2d_warmup_s"] >= 0, "a number of seconds")
    need("gpu.h2d_budget_s", _is_number(g["h2d_budget_s"]) and g["h2d_budget_s"] > 0, "a number of seconds")
    need("gpu.h2d_matrix_tolerance", _is_number(g["h2d_matrix_tolerance"]) and g["h2d_matrix_tolerance"] >= 0, "a fraction")
    p = values["pods"]
    for key in ("shm_min", "shm_min_multi_gpu"):
        try:
            parse_quantity(p[key])
        except ParseError:
            need(f"pods.{key}", False, "a size such as 2Gi")
    need(
        "pods.thread_env",
        isinstance(p["thread_env"], list) and all(isinstance(v, str) for v in p["thread_env"]),
        "a list of environment variable names",
    )
    need("runtime.gpu_handlers", isinstance(values["runtime"]["gpu_handlers"], list), "a list of handler names")
    need("pods.acceptance_pod", isinstance(p["acceptance_pod"], bool), "true or false")
    need("pods.numa_alignment", p["numa_alignment"] in ("single", "gpus"), "single or gpus")
    need("pods.dra_cpu_coselection", isinstance(p["dra_cpu_coselection"], bool), "true or false")
    need("pods.cpu_source", p["cpu_source"] in ("kubelet", "dra"), "kubelet or dra")
    need(
        "pods.dra_cpu_drivers",
        isinstance(p["dra_cpu_drivers"], list) and all(isinstance(v, str) and v for v in p["dra_cpu_drivers"]),
        "a list of DRA CPU driver names such as dra.cpu",
    )
    need(
        "pods.namespaces",
        isinstance(p["namespaces"], list) and all(isinstance(v, str) and v for v in p["namespaces"]),
        "a list of namespace names ([]: every namespace)",
    )
    need("pods.selector", p["selector"] is None or isinstance(p["selector"], str), "a label selector such as app=llm, or null")
    need("pods.exec_timeout_s", _is_number(p["exec_timeout_s"]) and p["exec_timeout_s"] > 0, "a number of seconds")
    need("pods.acceptance_cpus", isinstance(p["acceptance_cpus"], int) and p["acceptance_cpus"] >= 1, "a whole number of CPUs")
    need("pods.acceptance_timeout_s", _is_number(p["acceptance_timeout_s"]), "a number of seconds")
    need("pods.acceptance_image", p["acceptance_image"] is None or isinstance(p["acceptance_image"], str), "an image or null")
    f = values["fleet"]
    need("fleet.severity", f["severity"] in SEVERITIES, " or ".join(SEVERITIES))
    need(
        "fleet.attributes",
        isinstance(f["attributes"], list) and set(f["attributes"]) <= set(IDENTITY_ATTRIBUTES),
        f"a list drawn from {list(IDENTITY_ATTRIBUTES)}",
    )
    need(
        "fleet.pin",
        isinstance(f["pin"], dict) and set(f["pin"]) <= set(IDENTITY_ATTRIBUTES),
        f"a mapping of attributes ({', '.join(IDENTITY_ATTRIBUTES)}) to the value every node must have",
    )
    if isinstance(f["pin"], dict) and isinstance(f["attributes"], list):
        unjudged = sorted(set(f["pin"]) - set(f["attributes"]))
        need(
            "fleet.pin",
            not unjudged,
            f"attributes that fleet.attributes also lists (a pin on {', '.join(unjudged)} would never be judged: "
            "add it to fleet.attributes or drop the pin)",
        )


def load_profile(ref: str | None) -> Profile:
    """Load a profile by bundled name or path, following `extends` (default: the default profile)."""
    ref = ref or BUNDLED
    chain: list[tuple[str, dict[str, Any], str]] = []
    seen: set[str] = set()
    cur: str | None = ref
    while cur is not None:
        if cur in seen:
            raise UsageError(f"profile {ref}: 'extends' loops through {cur}")
        seen.add(cur)
        name, doc, source = _read(cur)
        chain.append((name, doc, source))
        parent = doc.get("extends")
        if parent is None and name != BUNDLED:
            parent = BUNDLED
        cur = parent
    base_doc = chain[-1][1]
    values = {k: v for k, v in base_doc.items() if k != "extends"}
    for _, doc, source in reversed(chain[:-1]):
        values = _overlay(values, {k: v for k, v in doc.items() if k != "extends"}, source)
    _validate(values, chain[0][2])
    return Profile(chain[0][0], values, chain[0][2])
