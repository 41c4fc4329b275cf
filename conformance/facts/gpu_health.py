"""GPU health facts: ECC mode and error counts, row remapping or page retirement, NVLink state and error
counters, NVLink fabric registration, persistence mode and clock event reasons, per GPU, from the NVML
probe's JSON or from `nvidia-smi -q -x`.

Meanings (NVML API reference, "Device Queries" and "NvLink Methods"; nvml.h):
- nvmlDeviceGetEccMode: current and pending ECC mode (pending applies after the next reboot);
- nvmlDeviceGetTotalEccErrors: corrected / uncorrected counts, volatile (since the driver loaded) and
  aggregate (the GPU's lifetime, kept in the InfoROM); nvmlDeviceGetMemoryErrorCounter per location;
- nvmlDeviceGetRemappedRows (Ampere and later): rows remapped for correctable and uncorrectable errors,
  `isPending` (a remap waits for a GPU reset) and `failureOccurred` (a remap failed: the memory cannot be
  repaired); older GPUs retire pages instead (nvmlDeviceGetRetiredPages, ...PendingStatus);
- nvmlDeviceGetNvLinkState / nvmlDeviceGetNvLinkErrorCounter (DL replay, recovery, CRC flit, CRC data);
- nvmlDeviceGetGpuFabricInfo: nvmlGpuFabricState_t 0 not supported, 1 not started, 2 in progress,
  3 completed; `status` an nvmlReturn_t once completed;
- nvmlDeviceGetCurrentClocksEventReasons: the nvmlClocksEventReason* bitmask.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from conformance.config.gpu_health_terms import CLOCK_REASONS, NVLINK_COUNTERS

FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
NOT_SUPPORTED = "not supported on this GPU"  # as the NVML probe names NVML_ERROR_NOT_SUPPORTED
# a driver older than the fabric API (nvmlDeviceGetGpuFabricInfo; nvidia-smi -q -x then prints no <fabric>)
NO_FABRIC_API = ("function not in this driver's NVML", "nvidia-smi -q -x prints no <fabric> (a driver before the fabric API)")
# nvidia-smi prints "N/A" where NVML answers NOT_SUPPORTED (or the value does not apply to the GPU)
SMI_NA = "N/A"
# nvmlDeviceGpuRecoveryAction_t (nvml.h; NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230): what the driver says
# must still happen before the GPU can be trusted again. NVIDIA's memory error management guide
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html): "None: no recovery
# action is needed. The GPU can be immediately used again by starting a new GPU process."
RECOVERY_ACTIONS = {
    0: "none", 1: "GPU reset", 2: "node reboot", 3: "drain P2P", 4: "drain P2P and reset the GPU",
    5: "recover the IMEX domain", 6: "reset the GPU's PCIe bus", 7: "system reboot",
}  # fmt: skip
# nvidia-smi -q -x <gpu_recovery_action> as drivers print it ("None", "Drain and Reset", ...), to the same codes
SMI_RECOVERY_ACTIONS = {
    "none": 0, "reset": 1, "gpu reset": 1, "reboot": 2, "node reboot": 2, "drain p2p": 3, "drain and reset": 4,
    "recover imex domain": 5, "bus reset": 6, "system reboot": 7,
}  # fmt: skip


@dataclass
class NvLink:
    link: int
    active: bool | None  # None: the link's state could not be read (state_error says why)
    errors: dict[str, int] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)  # counter -> why it could not be read (not 0)
    state_error: str | None = None


@dataclass
class GpuHealth:
    ecc_enabled: bool | None = None  # None: ECC not supported or not read
    ecc_pending: bool | None = None
    # {"volatile": {"corrected": n, "uncorrected": n}, "aggregate": {...}}; missing counts are absent
    ecc_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    ecc_uncorrected_by_location: dict[str, dict[str, int]] = field(default_factory=dict)
    remapped_rows: dict[str, int] | None = None  # corrected, uncorrected, pending, failure
    retired_pages: dict[str, int] | None = None  # sbe, dbe, pending
    nvlinks: list[NvLink] | None = None  # None: not read; []: the GPU has no NVLink
    fabric: dict[str, Any] | None = None  # state, status, clique, cluster
    persistence: bool | None = None
    clock_reasons: int | None = None
    recovery_action: int | None = None  # RECOVERY_ACTIONS; None: not read (older drivers do not report it)
    unread: dict[str, str] = field(default_factory=dict)  # value -> why it is not known

    def active_clock_reasons(self) -> list[str]:
        if self.clock_reasons is None:
            return []
        return [name for bit, name in CLOCK_REASONS.items() if self.clock_reasons & bit]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def health_from_nvml(g: dict[str, Any], errors: dict[str, str]) -> GpuHealth:
    """The health part of one GPU entry of the NVML probe's document."""
    h = GpuHealth()
    mode = g.get("ecc_mode")
    if isinstance(mode, list) and len(mode) == 2 and all(_int(x) is not None for x in mode):
        h.ecc_enabled, h.ecc_pending = bool(mode[0]), bool(mode[1])
    for counter in ("volatile", "aggregate"):
        for kind in ("corrected", "uncorrected"):
            n = _int(g.get(f"ecc_{counter}_{kind}"))
            if n is not None:
                h.ecc_counts.setdefault(counter, {})[kind] = n
    where = g.get("ecc_uncorrected_by_location")
    if isinstance(where, dict):
        h.ecc_uncorrected_by_location = {
            str(loc): {str(k): v for k, v in c.items() if _int(v) is not None} for loc, c in where.items() if isinstance(c, dict)
        }
    rows = g.get("remapped_rows")
    if isinstance(rows, list) and len(rows) == 4 and all(_int(x) is not None for x in rows):
        h.remapped_rows = dict(zip(("corrected", "uncorrected", "pending", "failure"), rows, strict=True))
    if all(_int(g.get(f"retired_pages_{k}")) is not None for k in ("sbe", "dbe")):
        h.retired_pages = {"sbe": g["retired_pages_sbe"], "dbe": g["retired_pages_dbe"]}
        if _int(g.get("retired_pages_pending")) is not None:
            h.retired_pages["pending"] = g["retired_pages_pending"]
    links = g.get("nvlinks")
    if isinstance(links, list):
        h.nvlinks = [_nvlink(x) for x in links if isinstance(x, dict) and _int(x.get("link")) is not None]
    elif errors.get("nvlinks") == "not supported on this GPU":
        h.nvlinks = []
    fab = g.get("fabric")
    if isinstance(fab, dict) and _int(fab.get("state")) is not None:
        h.fabric = fab
    if _int(g.get("persistence_mode")) is not None:
        h.persistence = bool(g["persistence_mode"])
    h.clock_reasons = _int(g.get("clock_event_reasons"))
    h.recovery_action = _int(g.get("recovery_action"))
    for key in ("ecc_mode", "remapped_rows", "nvlinks", "fabric", "persistence_mode", "clock_event_reasons", "recovery_action"):
        if key in errors:
            h.unread[key] = errors[key]
    return h


def _nvlink(x: dict[str, Any]) -> NvLink:
    """One link of the probe's list. Probes before per-link reading wrote only state and counters; a counter
    they could not read was left out, which reads here as unread, never as 0."""
    errors = {str(k): v for k, v in (x.get("errors") or {}).items() if _int(v) is not None}
    unread = {str(k): str(v) for k, v in (x.get("unread") or {}).items()}
    for name in NVLINK_COUNTERS:
        if name not in errors:
            unread.setdefault(name, "not reported")
    if x.get("state_error") is not None or not isinstance(x.get("active"), bool):
        return NvLink(int(x["link"]), None, errors, unread, str(x.get("state_error") or "state not reported"))
    return NvLink(int(x["link"]), x["active"], errors, unread)


# -- nvidia-smi -q -x (nvsmi_device_v12.dtd as driver 575 writes it; older drivers: clocks_throttle_reasons) --


def _yes(text: str | None) -> bool | None:
    t = (text or "").strip().lower()
    return {"enabled": True, "disabled": False, "yes": True, "no": False, "active": True, "not active": False}.get(t)


def _num(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*", text or "")
    return int(m.group(1)) if m else None


def _ecc_sums(section: ET.Element | None) -> dict[str, int]:
    """Corrected / uncorrected totals of one <volatile> or <aggregate> block. Drivers since R535 list
    sram_correctable, sram_uncorrectable[_parity|_secded], dram_correctable, dram_uncorrectable; older ones
    single_bit/double_bit with a <total>."""
    if section is None:
        return {}
    sums: dict[str, int] = {}
    for child in section:
        tag = child.tag
        if tag in ("single_bit", "double_bit"):
            n = _num(child.findtext("total"))
            kind = "corrected" if tag == "single_bit" else "uncorrected"
        elif tag.endswith("_correctable") or "_uncorrectable" in tag:
            n = _num(child.text)
            kind = "uncorrected" if "_uncorrectable" in tag else "corrected"
        else:
            continue
        if n is not None:
            sums[kind] = sums.get(kind, 0) + n
    return sums


def _smi_unread(text: str | None) -> str:
    """Why nvidia-smi gave no value: N/A is its rendering of NOT_SUPPORTED; anything else is unknown."""
    if text is None:
        return "not in nvidia-smi's output"
    return NOT_SUPPORTED if text.strip() == SMI_NA else f"nvidia-smi printed {text.strip()[:40]!r}"


def health_from_smi(g: ET.Element, driver: str | None = None) -> GpuHealth:
    """Health from one <gpu> of `nvidia-smi -q -x`. A value nvidia-smi prints as N/A is recorded as not
    supported (as NVML's NOT_SUPPORTED), one it leaves out or prints otherwise as unread: never as 0 or no.
    Row remapping came with the R450 drivers (NVML nvmlDeviceGetRemappedRows, "Ampere or newer", driver 450):
    a driver before it prints no <remapped_rows>, and that is not supported, not unread."""
    h = GpuHealth()
    h.ecc_enabled = _yes(g.findtext("ecc_mode/current_ecc"))
    h.ecc_pending = _yes(g.findtext("ecc_mode/pending_ecc"))
    if h.ecc_enabled is None:
        h.unread["ecc_mode"] = _smi_unread(g.findtext("ecc_mode/current_ecc"))
    for counter in ("volatile", "aggregate"):
        sums = _ecc_sums(g.find(f"ecc_errors/{counter}"))
        if sums:
            h.ecc_counts[counter] = sums
    for counter in ("volatile", "aggregate"):
        block = g.find(f"ecc_errors/{counter}")
        for child in block if block is not None else []:
            if "_uncorrectable" in child.tag and _num(child.text) is not None:
                loc = "device_memory" if child.tag.startswith("dram") else "sram"
                where = h.ecc_uncorrected_by_location.setdefault(loc, {})
                where[counter] = where.get(counter, 0) + (_num(child.text) or 0)
    rows = g.find("remapped_rows")
    pend = fail = None
    if rows is not None:
        corr, unc = _num(rows.findtext("remapped_row_corr")), _num(rows.findtext("remapped_row_unc"))
        pend, fail = _yes(rows.findtext("remapped_row_pending")), _yes(rows.findtext("remapped_row_failure"))
        if pend is not None and fail is not None:  # the counts are shown only; pending and failure decide
            h.remapped_rows = {"corrected": corr, "uncorrected": unc, "pending": int(pend), "failure": int(fail)}
    if h.remapped_rows is None:
        h.unread["remapped_rows"] = _smi_unread(
            None if rows is None else rows.text if len(rows) == 0 else rows.findtext("remapped_row_pending")
        )
        major = int(driver.split(".")[0]) if driver and driver.split(".")[0].isdigit() else None
        if rows is None and major is not None and major < 450:
            h.unread["remapped_rows"] = NOT_SUPPORTED  # the driver predates row remapping
    sbe_text = g.findtext("retired_pages/multiple_single_bit_retirement/retired_count")
    sbe, dbe = _num(sbe_text), _num(g.findtext("retired_pages/double_bit_retirement/retired_count"))
    if sbe is not None and dbe is not None:
        pending_text = g.findtext("retired_pages/pending_retirement") or g.findtext("retired_pages/pending_blacklist")
        pending = _yes(pending_text)
        h.retired_pages = {"sbe": sbe, "dbe": dbe, **({"pending": int(pending)} if pending is not None else {})}
        if pending is None:
            h.unread["retired_pages_pending"] = _smi_unread(pending_text)
    else:
        h.unread["retired_pages_sbe"] = _smi_unread(sbe_text)
    h.unread["nvlinks"] = "nvidia-smi -q -x does not report NVLink state (NVML probe needed)"
    state_text = g.findtext("fabric/state")
    state = (state_text or "").strip().lower()
    codes = {v: k for k, v in FABRIC_STATES.items()}
    if state in codes:
        # the status is success only where nvidia-smi says so: a missing or N/A status of a registration that
        # ran is not read (None), never taken for success
        status = (g.findtext("fabric/status") or "").strip()
        h.fabric = {"state": codes[state], "status": 0 if status.lower() == "success" else status or None}
        if h.fabric["status"] is not None and status.upper() == SMI_NA:
            h.fabric["status"] = None
    else:
        h.unread["fabric"] = NO_FABRIC_API[1] if state_text is None else _smi_unread(state_text)
    h.persistence = _yes(g.findtext("persistence_mode"))
    reasons = g.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = g.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if reasons is not None:
        bits = 0
        by_name = {name: bit for bit, name in CLOCK_REASONS.items()}
        by_name["display_clock_setting"] = 0x100
        for child in reasons:
            name = child.tag.removeprefix(prefix)
            if _yes(child.text) and name in by_name:
                bits |= by_name[name]
        h.clock_reasons = bits
    action = g.findtext("gpu_recovery_action")
    code = SMI_RECOVERY_ACTIONS.get((action or "").strip().lower())
    if code is not None:
        h.recovery_action = code
    else:
        h.unread["recovery_action"] = _smi_unread(action)
    return h


# -- nvidia-smi nvlink -s / -e (the fallback's NVLink view) ------------------------------------------
# `nvidia-smi nvlink -s` prints, per GPU, "GPU 0: <name> (UUID: ...)" and one line per link the GPU
# has: "Link 0: 26.562 GB/s" or "Link 4: <inactive>"; `-e` prints "Link 0: Replay Errors: 0",
# "Link 0: Recovery Errors: 0", "Link 0: CRC Errors: 0" (layout as in stas00/ml-engineering,
# compute/accelerator/nvidia/debug.md). A GPU without NVLink gets its header line and no link line.
GPU_LINE = re.compile(r"^GPU (\d+):")
LINK_LINE = re.compile(r"^\s*Link (\d+): (.*)$")
SMI_COUNTERS = {"replay errors": "replay", "recovery errors": "recovery", "crc errors": "crc_flit", "crc data errors": "crc_data"}


def parse_smi_nvlink(status: str, errors: str = "", errors_unread: str | None = None) -> dict[int, list[NvLink]]:
    """{GPU index: its links} from `nvidia-smi nvlink -s`, with `-e`'s counters where given. Every counter a link
    should have (NVLINK_COUNTERS) that `-e` did not print for it is unread, with why: `errors_unread` when the
    command failed or did not run, NOT_SUPPORTED when `-e` printed it for none of the GPU's links, else that
    this link's lines lack it. Unread is never 0."""
    links: dict[int, dict[int, NvLink]] = {}
    gpu = None
    for line in status.splitlines():
        m = GPU_LINE.match(line)
        if m:
            gpu = int(m.group(1))
            links.setdefault(gpu, {})
            continue
        m = LINK_LINE.match(line)
        if m and gpu is not None:
            state = m.group(2).strip().lower()
            links[gpu][int(m.group(1))] = NvLink(
                int(m.group(1)), active=not (state == "<inactive>" or state.startswith("0 gb/s"))
            )
    gpu = None
    for line in errors.splitlines():
        m = GPU_LINE.match(line)
        if m:
            gpu = int(m.group(1))
            continue
        m = LINK_LINE.match(line)
        if m and gpu is not None and int(m.group(1)) in links.get(gpu, {}):
            name, _, value = m.group(2).rpartition(":")
            key = SMI_COUNTERS.get(name.strip().lower())
            if key and value.strip().isdigit():
                links[gpu][int(m.group(1))].errors[key] = int(value)
    for ls in links.values():
        # A counter `-e` prints for none of a GPU's links is one the tool does not report for that GPU generation
        # (current drivers print Replay, Recovery and CRC Errors and no CRC data counter, which NVML does not
        # support from Ampere on): not supported, not judged, as on the NVML path. One it prints for some links
        # and not others stays unread, and so does every counter when it printed none for the GPU at all.
        printed = {key for x in ls.values() for key in x.errors}
        for x in ls.values():
            for key in NVLINK_COUNTERS:
                if key in x.errors:
                    continue
                if errors_unread:
                    x.unread[key] = errors_unread
                elif printed and key not in printed:
                    x.unread[key] = NOT_SUPPORTED
                else:
                    x.unread[key] = "not in the output of nvidia-smi nvlink -e for this link"
    return {g: [ls[i] for i in sorted(ls)] for g, ls in links.items()}
