"""Kernel facts: sysctl values, the cgroup filesystem and the kubepods cgroup layout."""

from __future__ import annotations

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_ranges

CGROUP_FS = {"cgroup2fs": 2, "tmpfs": 1}


def parse_int_sysctl(text: str, name: str) -> int:
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        raise ParseError(f"{name}: {s[:40]!r} is not an integer") from None


def parse_port_range(text: str, name: str = "net.ipv4.ip_local_port_range") -> tuple[int, int]:
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ParseError(f"{name}: {text.strip()[:40]!r} is not two port numbers")
    lo, hi = int(parts[0]), int(parts[1])
    if not (0 < lo <= hi <= 65535):
        raise ParseError(f"{name}: {lo} {hi} is not a valid port range")
    return lo, hi


def parse_port_set(text: str, name: str = "net.ipv4.ip_local_reserved_ports") -> set[int]:
    return parse_ranges(text, what=name, maximum=65535)


def cgroup_version(stat_output: str) -> int:
    """`stat -fc %T /sys/fs/cgroup`: cgroup2fs means v2, tmpfs means v1 (hybrid included)."""
    fs = stat_output.strip()
    if fs not in CGROUP_FS:
        raise ParseError(f"stat -fc %T /sys/fs/cgroup printed {fs[:40]!r}, neither cgroup2fs nor tmpfs")
    return CGROUP_FS[fs]


def kubepods_driver(present: dict[str, bool]) -> tuple[str | None, str]:
    """The cgroup driver the pod cgroup tree shows: `kubepods.slice` is systemd, `kubepods` cgroupfs.

    `present` maps cgroup paths to whether they exist. Returns (driver or None, evidence)."""
    systemd = sorted(p for p, ok in present.items() if ok and p.endswith("/kubepods.slice"))
    cgroupfs = sorted(p for p, ok in present.items() if ok and p.endswith("/kubepods"))
    if systemd and not cgroupfs:
        return "systemd", f"{systemd[0]} exists"
    if cgroupfs and not systemd:
        return "cgroupfs", f"{cgroupfs[0]} exists"
    if systemd and cgroupfs:
        return None, f"both {systemd[0]} and {cgroupfs[0]} exist"
    return None, "no kubepods cgroup found"


def parse_scheduler(text: str, device: str) -> str:
    """`/sys/block/<dev>/queue/scheduler`: the active one is in brackets (`[none] mq-deadline`)."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    words = text.split()
    if len(words) == 1:
        return words[0]
    raise ParseError(f"/sys/block/{device}/queue/scheduler: no active scheduler in {text.strip()[:60]!r}")
