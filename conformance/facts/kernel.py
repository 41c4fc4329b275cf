"""Kernel facts: sysctl values, the cgroup filesystem and the kubepods cgroup layout."""

from __future__ import annotations

from conformance.errors import ParseError
from conformance.facts.cpulist import parse_ranges

CGROUP_FS = {"cgroup2fs": 2, "tmpfs": 1}
# statfs(2) f_type of /sys/fs/cgroup, from linux include/uapi/linux/magic.h. The kubelet decides v2 exactly
# this way: runc libcontainer/cgroups/utils.go IsCgroup2UnifiedMode compares Statfs("/sys/fs/cgroup").Type
# with unix.CGROUP2_SUPER_MAGIC. The magic does not depend on the stat program's table of names (BusyBox
# stat prints "UNKNOWN" for cgroup2fs). TMPFS_MAGIC is cgroup v1 (legacy or hybrid, as systemd's
# cg_unified_cached reads it); CGROUP_SUPER_MAGIC is a v1 hierarchy mounted there directly.
CGROUP_MAGIC = {0x63677270: 2, 0x01021994: 1, 0x0027E0EB: 1}


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
    """`stat -fc %t /sys/fs/cgroup`, the filesystem magic in hex, decides. Snapshots from before the magic
    was collected hold `stat -fc %T`, the name (cgroup2fs v2, tmpfs v1)."""
    fs = stat_output.strip()
    if fs in CGROUP_FS:
        return CGROUP_FS[fs]
    try:
        magic = int(fs, 16)
    except ValueError:
        raise ParseError(f"stat -fc %t /sys/fs/cgroup printed {fs[:40]!r}: neither a filesystem magic nor a known name") from None
    if magic not in CGROUP_MAGIC:
        raise ParseError(
            f"/sys/fs/cgroup is neither cgroup2fs nor tmpfs: stat -fc %t printed filesystem magic 0x{magic:x} "
            "(cgroup2fs is 0x63677270, tmpfs 0x1021994)"
        )
    return CGROUP_MAGIC[magic]


def cgroup_fs_name(stat_output: str) -> str:
    """The evidence line: the magic with the name of what it is."""
    fs = stat_output.strip()
    names = {0x63677270: "cgroup2fs", 0x01021994: "tmpfs", 0x0027E0EB: "cgroup (v1)"}
    try:
        return f"{names.get(int(fs, 16), 'unknown')} (magic 0x{int(fs, 16):x})"
    except ValueError:
        return fs[:40]


# the pod cgroup folders the collector looks for (collector.sh, "Cgroups"): cgroup v2, then v1's cpu and cpuset
KUBEPODS_DIRS = tuple(f"/sys/fs/cgroup{c}/{n}" for c in ("", "/cpu", "/cpuset") for n in ("kubepods.slice", "kubepods"))


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
