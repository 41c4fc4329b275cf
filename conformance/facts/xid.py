"""Xid events of the NVIDIA driver, read from the node's kernel log, and their classification.

The driver logs `NVRM: Xid (PCI:<domain>:<bus>:<device>): <xid>, <text>` for each event (NVIDIA, "Xid
Errors", docs.nvidia.com/deploy/xid-errors/). Real lines this parser is tested on (tests/samples/README.md):
  May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
      (NVIDIA/open-gpu-kernel-modules issue 1151)
  NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
      (stas00/ml-engineering, compute/accelerator/nvidia/debug.md)
  Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000
      (pastebin.com/NGng33SB; older drivers write the address without "PCI:")

Classes, from the "Resolution Bucket (Immediate Action)" column of NVIDIA's Xid catalogue for Ampere
and later GPUs (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), and the application Xids the
NVIDIA device plugin does not hold against a GPU (NVIDIA/k8s-device-plugin, internal/rm/health.go:
13, 31, 43, 45, 68, 109):
- fatal: the GPU or node needs a reboot or service before it can be trusted (79 fallen off the bus,
  64 row-remap/page-retirement failure, 154 with "Node Reboot Required");
- reset: the GPU needs a reset (48 double-bit ECC, 61/62 micro-controller halt, 63 a row remap or page
  retirement waiting for a reset, 74 NVLink, 94/95 contained/uncontained ECC, 119/120 GSP, 121 C2C,
  140 unrecovered ECC, 144-150 NVLink, 154 with "GPU Reset Required" or "Drain and Reset");
- informational: an application's fault (13, 31, 43, 45, 68, 69, 109) or a notice (92 high single-bit
  ECC rate, 154 with "None");
- unknown: any other number (listed; the profile decides whether it fails).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FATAL = {64: "ECC page retirement or row remapping failure", 79: "GPU has fallen off the bus"}
RESET = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event (waits for a GPU reset)",
    74: "NVLink error",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    140: "unrecovered ECC error",
    **{x: "NVLink error" for x in range(144, 151)},
}
INFORMATIONAL = {
    13: "graphics engine exception (application)",
    31: "GPU memory page fault (application)",
    43: "GPU stopped processing (application)",
    45: "preemptive cleanup after an application error",
    68: "video decoder exception (application)",
    69: "graphics engine class error (application)",
    92: "high single-bit ECC error rate",
    109: "context switch timeout (application)",
}
CLASSES = ("fatal", "reset", "informational", "unknown")

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


@dataclass
class XidLog:
    source: str  # what was read: "file /var/log/kern.log", "journal", "kernel ring buffer"
    detail: str  # how much of it
    events: list[XidEvent] = field(default_factory=list)
    total: int = 0  # Xid lines since boot in what was read (events keeps the newest of them)


def classify(xid: int, text: str) -> tuple[str, str]:
    if xid == 154:  # "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
        action = text.rsplit("(", 1)[-1].lower()
        if "reboot" in action:
            return "fatal", "GPU recovery action: node reboot required"
        if "reset" in action:
            return "reset", "GPU recovery action: GPU reset or drain and reset"
        return "informational", "GPU recovery action changed"
    for cls, table in (("fatal", FATAL), ("reset", RESET), ("informational", INFORMATIONAL)):
        if xid in table:
            return cls, table[xid]
    return "unknown", "not in the suite's catalogue"


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
