"""Xid events of the NVIDIA driver, read from the node's kernel log, and their classification.

The driver logs `NVRM: Xid (PCI:<domain>:<bus>:<device>): <xid>, <text>` for each event (NVIDIA, "Xid
Errors", docs.nvidia.com/deploy/xid-errors/). Real lines this parser is tested on (tests/samples/README.md):
  May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
      (NVIDIA/open-gpu-kernel-modules issue 1151)
  NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
      (stas00/ml-engineering, compute/accelerator/nvidia/debug.md)
  Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000
      (pastebin.com/NGng33SB; older drivers write the address without "PCI:")

Classes, from the "Resolution Bucket (Immediate Action)" of NVIDIA's Xid catalogue for Ampere and later GPUs
(conformance.facts.xid_catalog cites it):
- fatal: the node must be restarted (RESTART_BM, RESTART_VM: 79 fallen off the bus, 151, 160);
- reset: the GPU must be reset (RESET_GPU and the reset workflows: 46, 48, 62, 64, 74, 95, 109, 119, 120, 140,
  144-150...);
- service: a person must look (UNEXPECTED_ERR_REPORT_ISSUE, CHECK_MECHANICALS, UPDATE_SWFW, CHECK_UVM);
- application: the application must be restarted (RESTART_APP: 8, 13, 31, 32, 68, 94...; WORKFLOW_XID_45);
- informational: no action (IGNORE: 43, 63, 92, 121...);
- Xid 154 takes the class of the recovery action its text names ("GPU Reset Required", "Node Reboot Required",
  "Drain and Reset", "None");
- unknown: a number the catalogue does not list (the acceptance profiles fail it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from conformance.facts.xid_catalog import BUCKETS, CATALOG

XID_LINES_KEPT = 500  # the collector sends the newest 500 lines that mention an Xid (and counts every one)

HEX = "[0-9A-Fa-f]"
XID_LINE = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<addr>{HEX}{{4,8}}:{HEX}{{1,2}}:{HEX}{{1,2}})(?:\.[0-7])?\): (?P<xid>\d{{1,5}}),?(?P<text>.*)"
)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
WALL_CLOCK = re.compile(r"^(\d{4}-\d\d-\d\d[T ][0-9:.]+(?:Z|[+-]\d\d:?\d\d)?|[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d)")
SINCE_BOOT = re.compile(r"\[\s*(\d+\.\d+)\]")
# What may precede the driver's text: nothing or the kernel's time stamp (dmesg), or a syslog / journal
# line's prefix ending in the kernel's tag "kernel:". A program logging "NVRM: Xid ..." under its own
# name (python3[4242]: ...) is not the driver and is ignored.
KERNEL_PREFIX = re.compile(r"(?:^|\skernel:\s*)(?:\[\s*\d+\.\d+\]\s*)?$")


def timestamp(prefix: str) -> str:
    """The time a kernel-log line carries before the driver's text: syslog or ISO wall-clock time, and
    the kernel's seconds-since-boot stamp where the line has one."""
    parts = []
    m = WALL_CLOCK.match(prefix.strip())
    if m:
        parts.append(m.group(1))
    b = SINCE_BOOT.search(prefix)
    if b:
        parts.append(f"{b.group(1)} s after boot")
    return ", ".join(parts) or "(no timestamp)"


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # domain:bus:device, lower case, as the driver writes it (no function)
    when: str  # the log line's own timestamp text (syslog, ISO or seconds since boot)
    text: str  # the driver's message, control characters removed, bounded
    cls: str
    meaning: str


@dataclass(frozen=True)
class XidCount:
    """Every Xid of one number on one GPU address since boot, counted on the node."""

    xid: int
    pci: str
    count: int
    first: XidEvent
    last: XidEvent  # its class decides (Xid 154: the latest recovery action)
    last_at: int | None = None  # the last one's place among this boot's Xid lines (None: an older collector)


@dataclass
class XidLog:
    source: str  # what was read: "file /var/log/kern.log", "journal", "kernel ring buffer"
    detail: str  # how much of it
    events: list[XidEvent] = field(default_factory=list)  # the newest lines, as evidence
    total: int = 0  # Xid lines since boot in what was read (events keeps the newest of them)
    counts: list[XidCount] | None = None  # per Xid number and GPU; None: an older collector counted nothing
    complete: bool = True  # what was read reaches back to this boot's start
    gaps: list[str] = field(default_factory=list)  # what could not be read, and why (never "no Xid")


def classify(xid: int, text: str) -> tuple[str, str]:
    """The class and meaning of one Xid, from NVIDIA's catalogue."""
    if xid == 154:  # "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
        action = text.rsplit("(", 1)[-1].lower()
        if "reboot" in action:
            return "fatal", "GPU recovery action: node reboot required"
        if "reset" in action:
            return "reset", "GPU recovery action: GPU reset or drain and reset"
        if "none" in action:
            return "informational", "GPU recovery action changed to none"
        return "unknown", "GPU recovery action changed (action not recognised)"
    entry = CATALOG.get(xid)
    if entry is None:
        return "unknown", "not in NVIDIA's Xid catalogue"
    bucket, name = entry
    cls, action = BUCKETS[bucket]
    return cls, f"{name or 'unnamed'}: {action} ({bucket})"


def pci_key(addr: str) -> str:
    """`0000:2B:00` / `00000000:2b:00.0` -> `0000:2b:00`: the part of a bus id the driver's Xid line names."""
    parts = addr.lower().split(".")[0].split(":")
    return f"{int(parts[-3], 16):04x}:{int(parts[-2], 16):02x}:{int(parts[-1], 16):02x}"


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Xid events from kernel-log lines. Anything else, lines that only look similar and lines another
    program logged are ignored; every field taken from the log is bounded and stripped of control
    characters."""
    events = []
    for line in text.splitlines():
        m = XID_LINE.search(line)
        if not m or not KERNEL_PREFIX.search(line[: m.start()]):
            continue
        xid = int(m.group("xid"))
        body = CONTROL.sub("?", m.group("text").strip())[:200]
        when = timestamp(line[: m.start()])
        cls, meaning = classify(xid, body)
        events.append(XidEvent(xid=xid, pci=pci_key(m.group("addr")), when=when, text=body, cls=cls, meaning=meaning))
    return events


# The collector's record (collector.sh, "Xid events of this boot"): "#xid-aggregates N", then N times
# "ADDR XID COUNT AT" (AT: the last one's place among the boot's Xid lines; older collectors wrote no AT),
# the first line and the last line; then the newest Xid lines; then the trailer
# "#xid total=T boot-line=B keys=K dropped=D bytes=Y". Collectors before the counts sent only the lines and
# "#xid total=T boot-line=B".
TRAILER = re.compile(r"total=(\d+) boot-line=([01])(?: keys=(\d+) dropped=(\d+) bytes=(\d+))?$")
AGGREGATE = re.compile(r"([0-9a-f]{1,8}:[0-9a-f]{1,2}:[0-9a-f]{1,2}) (\d{1,5}) (\d{1,12})(?: (\d{1,12}))?$")


class XidRecordError(ValueError):
    """The collector's Xid record is not of the shape it writes."""


def _event(line: str, xid: int, pci: str) -> XidEvent:
    parsed = parse_xid_lines(line)
    if parsed:
        return parsed[0]
    text = CONTROL.sub("?", line.strip())[:200]
    cls, meaning = classify(xid, text)
    return XidEvent(xid=xid, pci=pci, when=timestamp(line), text=text, cls=cls, meaning=meaning)


def parse_xid_record(text: str) -> tuple[list[XidEvent], list[XidCount] | None, dict[str, int]]:
    """The newest lines as events, the per-GPU counts (None from an older collector) and the trailer's numbers."""
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    if not lines or not lines[-1].startswith("#xid "):
        raise XidRecordError("the collector's Xid summary line is missing")
    m = TRAILER.match(lines[-1][5:])
    if not m:
        raise XidRecordError(f"the collector's Xid summary line is malformed: {lines[-1][:80]!r}")
    numbers = {"total": int(m.group(1)), "boot_line": int(m.group(2))}
    counts: list[XidCount] | None = None
    body = lines[:-1]
    if m.group(3) is not None:
        numbers.update(keys=int(m.group(3)), dropped=int(m.group(4)), bytes=int(m.group(5)))
        if not body or not body[0].startswith("#xid-aggregates "):
            raise XidRecordError("the collector's Xid counts are missing")
        n = int(body[0].split(" ", 1)[1]) if body[0].split(" ", 1)[1].isdigit() else -1
        if n < 0 or len(body) < 1 + 3 * n:
            raise XidRecordError("the collector's Xid counts are cut short")
        counts = []
        merged: dict[tuple[str, int], XidCount] = {}
        for i in range(n):
            head, first, last = body[1 + 3 * i : 4 + 3 * i]
            a = AGGREGATE.match(head)
            if not a:
                raise XidRecordError(f"a count of the collector's Xid record is malformed: {head[:80]!r}")
            pci, xid = pci_key(a.group(1)), int(a.group(2))
            at = int(a.group(4)) if a.group(4) is not None else None
            c = XidCount(xid, pci, int(a.group(3)), _event(first, xid, pci), _event(last, xid, pci), at)
            old = merged.get((pci, xid))  # 0000:2b:00 and 00000000:2b:00 name one GPU
            if old is not None:
                newer = c if (c.last_at or 0) >= (old.last_at or 0) else old
                at = None if old.last_at is None or c.last_at is None else max(old.last_at, c.last_at)
                c = XidCount(xid, pci, old.count + c.count, old.first, newer.last, at)
            merged[(pci, xid)] = c
        counts = list(merged.values())
        body = body[1 + 3 * n :]
    return parse_xid_lines("\n".join(body)), counts, numbers
