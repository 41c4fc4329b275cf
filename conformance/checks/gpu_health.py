"""Judging the GPU health facts (conformance.facts.gpu_health, conformance.facts.xid) against the profile.

Each judge returns a Verdict: failures (the check fails), unknowns (a fact could not be read: error when
nothing failed), the evidence lines, and how many GPUs the check applied to (none: the check skips)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.config.gpu_health_terms import CLASSES
from conformance.facts.gpu import DaemonSeen, Gpu
from conformance.facts.gpu_health import FABRIC_STATES, NO_FABRIC_API, NOT_SUPPORTED, RECOVERY_ACTIONS
from conformance.facts.xid import XID_LINES_KEPT, XidCount, XidEvent, XidLog, pci_key

# nvmlReturn_t values a fabric registration reports in `status` (nvml.h)
NVML_RETURNS = {
    0: "SUCCESS", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION", 6: "NOT_FOUND", 8: "TIMEOUT", 15: "GPU_IS_LOST", 999: "UNKNOWN"
}  # fmt: skip


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
        # A GPU that remaps rows (Ampere and later; it retires no pages) repairs a row and keeps the error in its
        # lifetime count forever: there, remap failures and pending remaps decide (GPU-ROW-REMAP), as NVIDIA's
        # memory error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/) sets out.
        if _remaps_rows(g):
            if agg.get("uncorrected", 0) > aggregate_limit:
                v.lines.append(
                    f"{g.label}: lifetime uncorrected count {agg['uncorrected']} not judged: this GPU remaps rows "
                    "(GPU-ROW-REMAP judges remap failures and pending remaps)"
                )
        elif agg.get("uncorrected", 0) > aggregate_limit:
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


def _remaps_rows(g: Gpu) -> bool:
    """The GPU repairs memory by row remapping (Ampere and later): it reports remapped rows, or it does not
    support page retirement (which row remapping replaced)."""
    return g.health.remapped_rows is not None or _unread(g, "retired_pages_sbe") == NOT_SUPPORTED


def judge_row_remap(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    v = Verdict()
    limit = int(gp.get("retired_pages_limit", 10))
    for g in gpus:
        h = g.health
        if h.remapped_rows is not None:
            v.applied += 1
            r = h.remapped_rows
            shown = {k: "?" if r.get(k) is None else r[k] for k in ("corrected", "uncorrected")}
            v.lines.append(
                f"{g.label}: row remapping: {shown['corrected']} row(s) for correctable, {shown['uncorrected']} for "
                f"uncorrectable errors; pending {'yes' if r['pending'] else 'no'}; failure {'yes' if r['failure'] else 'no'}"
            )
            if r["failure"]:
                v.failures.append(f"{g.label}: a row remapping failed: the memory cannot be repaired (replace the GPU)")
            if r["pending"]:
                # NVML (nvmlDeviceGetRemappedRows): "A reset will be required to actually remap the row ... A pending
                # remapping won't affect future work on the GPU since error-containment and dynamic page
                # blacklisting will take care of that"; NVIDIA's memory error management guide: unaffected
                # applications keep running and new workloads can be launched.
                v.failures.append(
                    f"{g.label}: a row remap is pending: it takes effect at the next GPU reset (running and new work are "
                    "kept off the bad row until then by error containment and page blacklisting); reset the GPU "
                    "(nvidia-smi -r) in a maintenance window so that the spare row is used"
                )
        elif h.retired_pages is not None:
            v.applied += 1
            p = h.retired_pages
            total = p["sbe"] + p["dbe"]
            pending = p.get("pending")
            v.lines.append(
                f"{g.label}: retired pages: {p['sbe']} for single-bit, {p['dbe']} for double-bit errors; "
                f"pending {'unknown' if pending is None else 'yes' if pending else 'no'}"
            )
            if pending is None:
                v.unknowns.append(
                    f"{g.label}: whether a page retirement is pending could not be read ({_unread(g, 'retired_pages_pending')})"
                )
            if pending:
                v.failures.append(f"{g.label}: a page retirement is pending: reset the GPU or reload the driver")
            if total > limit:
                v.failures.append(f"{g.label}: {total} retired pages, above the limit of {limit}")
        else:
            why_rows, why_pages = _unread(g, "remapped_rows"), _unread(g, "retired_pages_sbe")
            neither = why_rows in (NOT_SUPPORTED, "function not in this driver's NVML") and why_pages == NOT_SUPPORTED
            if neither and g.mig:
                # nvmlDeviceGetRemappedRows: "On MIG-enabled GPUs with active instances, querying the number of
                # remapped rows is not supported" (NVML API reference): the GPU remaps rows, unseen here.
                v.unknowns.append(
                    f"{g.label}: row remapping is not reported while MIG is enabled with active instances "
                    "(nvmlDeviceGetRemappedRows); read it with MIG disabled, and see GPU-XID-EVENTS for Xid 63/64"
                )
            elif neither:
                v.lines.append(f"{g.label}: neither row remapping nor page retirement is supported")
            else:
                v.unknowns.append(f"{g.label}: row remapping ({why_rows}) and page retirement ({why_pages}) not read")
    if not v.applied and not v.unknowns:
        v.why_not = "no GPU on this node remaps rows or retires pages"
    return v


def _counts_from_lines(events: list[XidEvent]) -> list[XidCount]:
    """Per-GPU counts from the lines alone (snapshots of a collector before it counted on the node)."""
    counts: dict[tuple[str, int], XidCount] = {}
    for e in events:
        old = counts.get((e.pci, e.xid))
        counts[(e.pci, e.xid)] = (
            XidCount(e.xid, e.pci, 1, e, e) if old is None else XidCount(e.xid, e.pci, old.count + 1, old.first, e)
        )
    return list(counts.values())


def _cleared_after(c: Any, counts: list[Any]) -> Any:
    """The Xid 154 event that set the GPU's recovery action to none after `c`'s last occurrence, if the log shows
    one (its place among the boot's Xid lines comes from the collector; an older collector's record has none,
    and nothing is cleared then)."""
    if c.last_at is None:
        return None
    for other in counts:
        if (
            other.xid == 154
            and other.pci == c.pci
            and other.last.cls == "informational"
            and other.last_at is not None
            and other.last_at > c.last_at
        ):
            return other.last
    return None


def judge_xids(log: XidLog, gpus: list[Gpu], gp: dict[str, Any], shown: int = 20) -> Verdict:
    """Every Xid number of this boot on every GPU (counted on the node), classed by NVIDIA's catalogue; the
    profile's classes fail. The driver's GPU recovery action, where it reports one, says whether action is
    still needed: anything but "none" fails. "None" is no evidence that a reset happened: the driver raises the
    recovery action for uncorrectable memory errors and some GSP faults, and many reset-class Xids (46, 62,
    109, 119/120, 136, 143, the NVLink 74 and 144-150) leave it at none. A reset-class Xid counts unless the
    log shows the GPU's recovery action changed to none after it (Xid 154, "GPU recovery action changed from
    0x1 (GPU Reset Required) to 0x0 (None)", which the driver logs when the action it asked for was carried
    out; NVIDIA's Xid catalogue, Xid 154). A log that does not reach back to this boot's start is unknown."""
    v = Verdict(applied=1)
    failing = set(gp["xid_fail"] if gp.get("xid_fail") is not None else ["fatal"])  # [] fails no class: as written
    by_pci = {pci_key(g.bus_id): g for g in gpus}
    counts = log.counts if log.counts is not None else _counts_from_lines(log.events)
    per_class = dict.fromkeys(CLASSES, 0)
    for c in counts:
        per_class[c.last.cls] += c.count
    kept = min(log.total, XID_LINES_KEPT)
    v.lines.append(
        f"read: {log.source} ({log.detail}); {log.total} line(s) since boot mention an Xid"
        + (f" (every one counted on the node, the newest {kept} kept as lines)" if kept < log.total else "")
        + f", {sum(c.count for c in counts)} of them the driver's"
    )
    v.lines.append(
        "by class: " + ", ".join(f"{c} {n}" for c, n in per_class.items()) + f"; failing classes: {', '.join(sorted(failing))}"
    )
    for g in gpus:
        if g.health.recovery_action is not None:
            name = RECOVERY_ACTIONS.get(g.health.recovery_action, f"code {g.health.recovery_action}")
            v.lines.append(f"{g.label}: the driver's GPU recovery action: {name}")
            if g.health.recovery_action != 0:
                v.failures.append(f"{g.label}: the driver asks for recovery action '{name}' (NVML GPU recovery action)")
    order = {c: i for i, c in enumerate(CLASSES)}
    per_gpu: dict[str, list[str]] = {}
    for c in sorted(counts, key=lambda c: (order[c.last.cls], c.pci, c.xid)):
        g = by_pci.get(c.pci)
        label = g.label if g else f"PCI {c.pci}"
        cls = c.last.cls
        fails = cls in failing
        note = ""
        cleared = _cleared_after(c, counts) if fails and cls == "reset" else None
        if cleared is not None:
            fails, note = False, f" (not failing: the driver changed its recovery action to none after it, at {cleared.when})"
        times = f"{c.count} time(s), first {c.first.when}, last {c.last.when}" if c.count > 1 else f"at {c.last.when}"
        v.lines.append(
            f"{'FAILS: ' if fails else ''}Xid {c.xid} [{cls}: {c.last.meaning}] on "
            f"{label if g else label + ' (not a GPU NVML lists)'}: {times}: {c.last.text}{note}"
        )
        if fails:
            when = f"at {c.last.when}" + (f" ({c.count} times since boot, first at {c.first.when})" if c.count > 1 else "")
            per_gpu.setdefault(label, []).append(f"Xid {c.xid} {when}")
    v.failures.extend(f"{gpu}: {', '.join(x)}" for gpu, x in per_gpu.items())
    newest = log.events[-shown:]
    if newest:
        v.lines.append(f"the newest {len(newest)} Xid line(s) read:")
        v.lines.extend(f"  {e.when}: Xid {e.xid} on {e.pci}: {e.text}" for e in newest)
    v.unknowns.extend(log.gaps)
    return v


def judge_nvlink(gpus: list[Gpu], gp: dict[str, Any]) -> Verdict:
    """Each link on its own (as DCGM reads them): a link whose state could not be read is unknown, a counter
    the profile limits that could not be read is unknown (never 0), a counter the GPU does not support is
    shown and not judged; the links that were read are judged whatever happened to the others."""
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
        read = [x for x in links if x.active is not None]
        down = [x.link for x in read if not x.active]
        for x in links:
            if x.active is None:
                v.unknowns.append(f"{g.label}: NVLink link {x.link}: state not read ({x.state_error})")
        totals = {k: sum(x.errors.get(k, 0) for x in read) for k in ("replay", "recovery", "crc_flit", "crc_data")}
        v.lines.append(
            f"{g.label}: {len(links)} link(s), {len(read) - len(down)} up"
            + (f", down: {', '.join(map(str, down))}" if down else "")
            + (f", state unknown: {', '.join(str(x.link) for x in links if x.active is None)}" if len(read) < len(links) else "")
            + "; errors (links read): "
            + ", ".join(f"{k} {n}" for k, n in totals.items())
        )
        want_up = gp.get("nvlink_links_up", "all")
        up = len(read) - len(down)
        if want_up == "all" and down:
            v.failures.append(f"{g.label}: NVLink link(s) {', '.join(map(str, down))} down of {len(links)}")
        elif want_up != "all" and up < int(want_up):
            v.failures.append(f"{g.label}: {up} NVLink link(s) up, gpu.nvlink_links_up wants {want_up} (down: {down})")
        for x in read:
            over = [f"{k} {n} > {limits[k]}" for k, n in sorted(x.errors.items()) if k in limits and n > limits[k]]
            if over:
                v.failures.append(f"{g.label}: link {x.link}: {', '.join(over)}")
            for k, why in sorted(x.unread.items()):
                if k not in limits:
                    continue
                if why == NOT_SUPPORTED:
                    v.lines.append(f"{g.label}: link {x.link}: counter {k} not supported by this GPU (not judged)")
                else:
                    v.unknowns.append(f"{g.label}: NVLink link {x.link}: error counter {k} not read ({why})")
    if not v.applied and not v.unknowns:
        v.why_not = "no GPU on this node has NVLink"
    return v


def judge_fabric(gpus: list[Gpu], nvswitches: list[str], fabric_manager: DaemonSeen | list[int]) -> Verdict:
    """NVLink fabric registration. The GPUs' own fabric state decides (issue 58); the fabric manager's process is
    evidence (it may run in the GPU Operator's driver container, which is no host process, and a container's
    process is never evidence of absence). A GPU whose fabric state could not be read is unknown even where this
    node's PCI bus shows no NVSwitch: on multi-node NVLink systems (GB200 NVL72) the NVSwitches sit in other trays,
    and only the GPU's own fabric state tells. A registration that completed without a readable status is unknown
    too (a missing <status> is no success). Not supported by the GPU, or a driver that predates the fabric API
    (nvmlDeviceGetGpuFabricInfo) with no NVSwitch here: not applicable. With NVSwitches here and no GPU reporting a
    fabric state (A100 systems, drivers before R525), the fabric manager is the only evidence: verified on the host,
    it passes; no process of that name anywhere fails; one only in a container is unknown."""
    v = Verdict()
    fm = DaemonSeen.of(fabric_manager)
    supported = [g for g in gpus if g.health.fabric is not None and g.health.fabric.get("state") != 0]
    # a driver without the fabric API (before R525; A100 systems): the fabric manager decides, and where no NVSwitch
    # is on the bus it predates multi-node NVLink altogether
    unread = [g for g in gpus if g.health.fabric is None and _unread(g, "fabric") not in (NOT_SUPPORTED, *NO_FABRIC_API)]
    if not nvswitches and not supported and not unread:
        v.why_not = "no NVSwitch on this node's PCI bus and no GPU reports an NVLink fabric"
        return v
    v.applied = len(supported) or 1
    if nvswitches:
        v.lines.append(f"NVSwitch PCI functions: {', '.join(nvswitches)}")
        v.lines.append(f"nvidia-fabricmanager: {fm.describe()}")
        if not supported and not unread:
            if fm.nowhere:
                v.failures.append("NVSwitches are on this node's PCI bus, no GPU reports a fabric state, and no "
                                  "nvidia-fabricmanager runs on the node (on the host or in a container)")  # fmt: skip
            elif not fm.host:
                v.unknowns.append(f"NVSwitches are on this node's PCI bus and no GPU reports a fabric state (a driver "
                                  f"before R525, or GPUs without it): nvidia-fabricmanager is {fm.describe()}, which no "
                                  "GPU confirms")  # fmt: skip
    hint = " (and no nvidia-fabricmanager runs on the node, on the host or in a container)" if nvswitches and fm.nowhere else ""
    for g in gpus:
        f = g.health.fabric
        if f is None:
            why = _unread(g, "fabric")
            v.lines.append(f"{g.label}: fabric registration not reported ({why})")
            if g in unread:
                v.unknowns.append(f"{g.label}: NVLink fabric state not read ({why})")
            continue
        state = FABRIC_STATES.get(int(f.get("state", -1)), f"state {f.get('state')}")
        status = f.get("status")
        status_name = (
            "not read" if status is None else NVML_RETURNS.get(status, str(status)) if isinstance(status, int) else str(status)
        )
        v.lines.append(f"{g.label}: fabric {state}, status {status_name}, clique {f.get('clique', '?')}")
        if f.get("state") == 0:
            continue
        if f.get("state") != 3:
            v.failures.append(f"{g.label}: fabric registration {state}{hint}")
        elif status is None:
            v.unknowns.append(f"{g.label}: fabric registration completed, but its status was not read")
        elif status not in (0, "0"):
            v.failures.append(f"{g.label}: fabric registration completed with status {status_name}{hint}")
        mask = f.get("health_mask")
        if isinstance(mask, int):
            health = fabric_health(mask)
            v.lines.append(f"{g.label}: fabric health mask 0x{mask:x}: {', '.join(health) or 'nothing reported'}")
            v.failures += [f"{g.label}: NVLink fabric {h}" for h in health if not h.endswith(("not supported", "no"))]
    return v


# nvmlGpuFabricInfo_v3 healthMask fields (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): (shift, width, name, values);
# a field of value 0 is "not supported" by this GPU or driver; 1 TRUE / 2 FALSE for the flags.
HEALTH_FLAGS = ((0, "degraded bandwidth"), (2, "route recovery in progress"), (4, "route unhealthy"),
                (6, "access timeout recovery in progress"))  # fmt: skip
INCORRECT_CONFIGURATION = {
    2: "incorrect configuration: incorrect system GUID", 3: "incorrect configuration: incorrect chassis serial number",
    4: "incorrect configuration: no partition", 5: "incorrect configuration: insufficient NVLinks",
    6: "incorrect configuration: incompatible GPU firmware", 7: "incorrect configuration: invalid location",
    8: "incorrect configuration: GPU state invalid",
}  # fmt: skip


def fabric_health(mask: int) -> list[str]:
    """The conditions a v3 fabric health mask reports: "<condition>" when set, "<condition>: no" when clear,
    "<condition>: not supported" when the driver does not report it."""
    out = []
    for shift, name in HEALTH_FLAGS:
        value = (mask >> shift) & 0x3
        out.append(name if value == 1 else f"{name}: no" if value == 2 else f"{name}: not supported")
    config = (mask >> 8) & 0xF
    if config in INCORRECT_CONFIGURATION:
        out.append(INCORRECT_CONFIGURATION[config])
    else:
        out.append("incorrect configuration: no" if config == 1 else "incorrect configuration: not supported")
    return out


def judge_persistence(gpus: list[Gpu], gp: dict[str, Any], daemon: DaemonSeen | list[int]) -> Verdict:
    """Persistence: each GPU's persistence mode (NVML) decides; nvidia-persistenced is evidence. NVIDIA's unit runs
    it with --user (not as root) and the GPU Operator inside its driver container: such a daemon is found (issue
    58), a container's as present but not verified, and that one counts where every GPU's persistence mode is on."""
    v = Verdict(applied=len(gpus))
    seen = DaemonSeen.of(daemon)
    want = gp.get("persistence", "mode_or_daemon")
    off = [g.label for g in gpus if g.health.persistence is False]
    unknown = [g.label for g in gpus if g.health.persistence is None]
    v.lines.append(f"nvidia-persistenced: {seen.describe()}")
    v.lines.extend(
        f"{g.label}: persistence mode {'on' if g.health.persistence else 'off' if g.health.persistence is False else 'unknown'}"
        for g in gpus
    )
    v.lines.append(f"profile gpu.persistence: {want}")
    all_on = not off and not unknown
    if want == "any" or (want == "mode_or_daemon" and seen.host):
        return v
    if want == "daemon":
        if seen.host or (seen.contained and all_on):
            return v
        if seen.contained:
            if off:
                v.failures.append(f"nvidia-persistenced runs only in a container and persistence mode is off on {', '.join(off)}")
            else:
                v.unknowns.append("nvidia-persistenced runs only in a container (not verified), and the persistence "
                                  f"mode of {', '.join(unknown)} was not read to confirm it")  # fmt: skip
            return v
        v.failures.append("nvidia-persistenced is not running" + ("" if seen.nowhere else " (no verified process of that name)"))
        return v
    if off:
        tail = "" if seen.host or want == "mode" else " and nvidia-persistenced is not running on the host"
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
        if "processes" in g.errors:  # an unread process list is not an idle GPU
            v.unknowns.append(f"{g.label}: its compute processes could not be read ({g.errors['processes']}): idle unknown")
            continue
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
