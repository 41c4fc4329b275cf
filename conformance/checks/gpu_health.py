"""Judging the GPU health facts (conformance.facts.gpu_health, conformance.facts.xid) against the profile.

Each judge returns a Verdict: failures (the check fails), unknowns (a fact could not be read: error when
nothing failed), the evidence lines, and how many GPUs the check applied to (none: the check skips)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.facts.gpu import Gpu
from conformance.facts.gpu_health import FABRIC_STATES
from conformance.facts.xid import CLASSES, XidLog, pci_key

# nvmlReturn_t values a fabric registration reports in `status` (nvml.h)
NVML_RETURNS = {
    0: "SUCCESS", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION", 6: "NOT_FOUND", 8: "TIMEOUT", 15: "GPU_IS_LOST", 999: "UNKNOWN"
}  # fmt: skip
NOT_SUPPORTED = "not supported on this GPU"
XID_LINES_KEPT = 500  # the collector sends the newest 500 lines that mention an Xid


@dataclass
class Verdict:
    failures: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    applied: int = 0
    why_not: str = ""  # when nothing applied: why the check does not apply here


def _unread(g: Gpu, key: str) -> str:
    return g.health.unread.get(key) or g.errors.get(key) or "not reported"


def judge_ecc(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    v = Verdict()
    corrected_limit = gp.get("ecc_corrected_limit")
    aggregate_limit = int(gp.get("ecc_aggregate_uncorrected_limit") or 0)
    for g in gpus:
        h = g.health
        if h.ecc_enabled is None:
            why = _unread(g, "ecc_mode")
            if why == NOT_SUPPORTED:
                v.lines.append(f"{g.label}: ECC not supported by this GPU")
            else:
                v.unknowns.append(f"{g.label}: ECC mode unknown ({why})")
            continue
        v.applied += 1
        vol, agg = h.ecc_counts.get("volatile", {}), h.ecc_counts.get("aggregate", {})
        where = ", ".join(
            f"{loc} " + " ".join(f"{k} {n}" for k, n in sorted(c.items()))
            for loc, c in sorted(h.ecc_uncorrected_by_location.items())
            if any(c.values())
        )
        v.lines.append(
            f"{g.label}: ECC {'on' if h.ecc_enabled else 'off'} (pending {'on' if h.ecc_pending else 'off'}); "
            f"volatile corrected {vol.get('corrected', '?')} uncorrected {vol.get('uncorrected', '?')}; "
            f"aggregate corrected {agg.get('corrected', '?')} uncorrected {agg.get('uncorrected', '?')}"
            + (f"; uncorrected by location: {where}" if where else "")
        )
        if not h.ecc_enabled:
            if gp.get("ecc_required", True):
                v.failures.append(f"{g.label}: ECC is off" + (" (on after the next reboot)" if h.ecc_pending else ""))
            continue
        if "uncorrected" not in vol or "uncorrected" not in agg:
            v.unknowns.append(f"{g.label}: uncorrected ECC counts not read ({_unread(g, 'ecc_volatile_uncorrected')})")
        if vol.get("uncorrected", 0) > 0:
            v.failures.append(f"{g.label}: {vol['uncorrected']} uncorrected ECC error(s) since the driver loaded")
        if agg.get("uncorrected", 0) > aggregate_limit:
            v.failures.append(
                f"{g.label}: {agg['uncorrected']} uncorrected ECC error(s) in the GPU's lifetime (limit {aggregate_limit})"
            )
        if corrected_limit is not None and vol.get("corrected", 0) > int(corrected_limit):
            v.failures.append(
                f"{g.label}: {vol['corrected']} corrected ECC errors since the driver loaded (limit {corrected_limit})"
            )
    if not v.applied and not v.unknowns:
        v.why_not = "no GPU on this node supports ECC"
    return v


def judge_row_remap(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    v = Verdict()
    limit = int(gp.get("retired_pages_limit", 10))
    for g in gpus:
        h = g.health
        if h.remapped_rows is not None:
            v.applied += 1
            r = h.remapped_rows
            v.lines.append(
                f"{g.label}: row remapping: {r['corrected']} row(s) for correctable, {r['uncorrected']} for uncorrectable "
                f"errors; pending {'yes' if r['pending'] else 'no'}; failure {'yes' if r['failure'] else 'no'}"
            )
            if r["failure"]:
                v.failures.append(f"{g.label}: a row remapping failed: the memory cannot be repaired (replace the GPU)")
            if r["pending"]:
                v.failures.append(f"{g.label}: a row remap is pending: reset the GPU before its memory is used")
        elif h.retired_pages is not None:
            v.applied += 1
            p = h.retired_pages
            total = p["sbe"] + p["dbe"]
            v.lines.append(
                f"{g.label}: retired pages: {p['sbe']} for single-bit, {p['dbe']} for double-bit errors; "
                f"pending {'yes' if p.get('pending') else 'no'}"
            )
            if p.get("pending"):
                v.failures.append(f"{g.label}: a page retirement is pending: reset the GPU or reload the driver")
            if total > limit:
                v.failures.append(f"{g.label}: {total} retired pages, above the limit of {limit}")
        else:
            why_rows, why_pages = _unread(g, "remapped_rows"), _unread(g, "retired_pages_sbe")
            if why_rows in (NOT_SUPPORTED, "function not in this driver's NVML") and why_pages == NOT_SUPPORTED:
                v.lines.append(f"{g.label}: neither row remapping nor page retirement is supported")
            else:
                v.unknowns.append(f"{g.label}: row remapping ({why_rows}) and page retirement ({why_pages}) not read")
    if not v.applied and not v.unknowns:
        v.why_not = "no GPU on this node remaps rows or retires pages"
    return v


def judge_xids(log: XidLog, gpus: list[Gpu], gp: dict[str, Any], shown: int = 20) -> Verdict:
    v = Verdict(applied=1)
    failing = set(gp.get("xid_fail") or ["fatal"])
    by_pci = {pci_key(g.bus_id): g.label for g in gpus}
    counts = dict.fromkeys(CLASSES, 0)
    for e in log.events:
        counts[e.cls] += 1
    read = min(log.total, XID_LINES_KEPT)
    v.lines.append(
        f"read: {log.source} ({log.detail}); {log.total} line(s) since boot mention an Xid"
        + (f" (the newest {read} travel)" if read < log.total else "")
        + f", {len(log.events)} of them the driver's"
    )
    by_class = ", ".join(f"{c} {n}" for c, n in counts.items())
    v.lines.append(f"by class: {by_class}; failing classes: {', '.join(sorted(failing))}")
    bad = [e for e in log.events if e.cls in failing]
    others = [e for e in log.events if e.cls not in failing]
    listed = bad[-shown:] + others[-max(0, shown - len(bad)) :] if shown > len(bad) else bad[-shown:]
    for e in sorted(listed, key=log.events.index):
        gpu = by_pci.get(e.pci, f"PCI {e.pci} (not a GPU NVML lists)")
        mark = "FAILS: " if e.cls in failing else ""
        v.lines.append(f"{mark}{e.when}: Xid {e.xid} [{e.cls}: {e.meaning}] on {gpu}: {e.text}")
    if len(log.events) > len(listed):
        v.lines.append(f"... and {len(log.events) - len(listed)} older event(s) not listed")
    if bad:
        per_gpu: dict[str, list[str]] = {}
        for e in bad:
            per_gpu.setdefault(by_pci.get(e.pci, f"PCI {e.pci}"), []).append(f"Xid {e.xid} at {e.when}")
        v.failures.extend(f"{gpu}: {', '.join(sorted(set(x)))}" for gpu, x in per_gpu.items())
    return v


def judge_nvlink(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    v = Verdict()
    limits = {str(k): int(x) for k, x in (gp.get("nvlink_error_limits") or {}).items()}
    for g in gpus:
        links = g.health.nvlinks
        if links is None:
            v.unknowns.append(f"{g.label}: NVLink state not read ({_unread(g, 'nvlinks')})")
            continue
        if not links:
            v.lines.append(f"{g.label}: no NVLink")
            continue
        v.applied += 1
        down = [x.link for x in links if not x.active]
        totals = {k: sum(x.errors.get(k, 0) for x in links) for k in ("replay", "recovery", "crc_flit", "crc_data")}
        v.lines.append(
            f"{g.label}: {len(links)} link(s), {len(links) - len(down)} up"
            + (f", down: {', '.join(map(str, down))}" if down else "")
            + "; errors (all links): "
            + ", ".join(f"{k} {n}" for k, n in totals.items())
        )
        want_up = gp.get("nvlink_links_up", "all")
        up = len(links) - len(down)
        if want_up == "all" and down:
            v.failures.append(f"{g.label}: NVLink link(s) {', '.join(map(str, down))} down of {len(links)}")
        elif want_up != "all" and up < int(want_up):
            v.failures.append(f"{g.label}: {up} NVLink link(s) up, gpu.nvlink_links_up wants {want_up} (down: {down})")
        for x in links:
            over = [f"{k} {n} > {limits[k]}" for k, n in sorted(x.errors.items()) if k in limits and n > limits[k]]
            if over:
                v.failures.append(f"{g.label}: link {x.link}: {', '.join(over)}")
    if not v.applied and not v.unknowns:
        v.why_not = "no GPU on this node has NVLink"
    return v


def judge_fabric(gpus: list[Gpu], nvswitches: list[str], fabric_manager: list[int]) -> Verdict:
    v = Verdict()
    supported = [g for g in gpus if g.health.fabric is not None and g.health.fabric.get("state") != 0]
    if not nvswitches and not supported:
        v.why_not = "no NVSwitch on this node's PCI bus and no GPU reports an NVLink fabric"
        return v
    v.applied = len(supported) or 1
    if nvswitches:
        v.lines.append(f"NVSwitch PCI functions: {', '.join(nvswitches)}")
        state = f"running (pid {', '.join(map(str, fabric_manager))})" if fabric_manager else "not running"
        v.lines.append(f"nvidia-fabricmanager: {state}")
        if not fabric_manager:
            v.failures.append("NVSwitches are on this node's PCI bus but nvidia-fabricmanager is not running")
    for g in gpus:
        f = g.health.fabric
        if f is None:
            v.lines.append(f"{g.label}: fabric registration not reported ({_unread(g, 'fabric')})")
            continue
        state = FABRIC_STATES.get(int(f.get("state", -1)), f"state {f.get('state')}")
        status = f.get("status", 0)
        status_name = NVML_RETURNS.get(status, str(status)) if isinstance(status, int) else str(status)
        v.lines.append(f"{g.label}: fabric {state}, status {status_name}, clique {f.get('clique', '?')}")
        if f.get("state") == 0:
            continue
        if f.get("state") != 3:
            v.failures.append(f"{g.label}: fabric registration {state}")
        elif status not in (0, "0"):
            v.failures.append(f"{g.label}: fabric registration completed with status {status_name}")
    return v


def judge_persistence(gpus: list[Gpu], gp: dict[str, Any], daemon: list[int]) -> Verdict:
    v = Verdict(applied=len(gpus))
    want = gp.get("persistence", "mode_or_daemon")
    off = [g.label for g in gpus if g.health.persistence is False]
    unknown = [g.label for g in gpus if g.health.persistence is None]
    v.lines.append(f"nvidia-persistenced: {'running (pid ' + ', '.join(map(str, daemon)) + ')' if daemon else 'not running'}")
    v.lines.extend(
        f"{g.label}: persistence mode {'on' if g.health.persistence else 'off' if g.health.persistence is False else 'unknown'}"
        for g in gpus
    )
    v.lines.append(f"profile gpu.persistence: {want}")
    if want == "any" or (want == "mode_or_daemon" and daemon):
        return v
    if want == "daemon":
        if not daemon:
            v.failures.append("nvidia-persistenced is not running")
        return v
    if off:
        tail = "" if daemon or want == "mode" else " and nvidia-persistenced is not running"
        v.failures.append(f"persistence mode off on {', '.join(off)}{tail}")
    v.unknowns.extend(f"{label}: persistence mode not read" for label in unknown)
    return v


def judge_clock_events(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    v = Verdict()
    failing = set(gp.get("clock_events_fail") or [])
    for g in gpus:
        reasons = g.health.active_clock_reasons()
        if g.health.clock_reasons is None:
            v.unknowns.append(f"{g.label}: clock event reasons not read ({_unread(g, 'clock_event_reasons')})")
            continue
        shown = ", ".join(reasons) or "none"
        if g.processes:
            v.lines.append(f"{g.label}: busy ({len(g.processes)} compute process(es)): not judged; active reasons: {shown}")
            continue
        v.applied += 1
        v.lines.append(f"{g.label}: idle; active clock event reasons: {shown}")
        bad = [r for r in reasons if r in failing]
        if bad:
            v.failures.append(f"{g.label}: {', '.join(bad)} active while idle")
    if not v.applied and not v.unknowns:
        v.why_not = "every GPU is busy: clock events are judged only on idle GPUs"
    return v
