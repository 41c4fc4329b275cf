"""Which release a node's daemon runs (the kubelet, containerd, CRI-O), from sources a node's users cannot forge
(issue 58), never from running the program. In this order, each named in the evidence:

1. the Node's `status.nodeInfo` (`kubeletVersion`, `containerRuntimeVersion`), which the kubelet writes itself
   (pkg/kubelet/nodestatus/setters.go VersionInfo; the runtime's from its CRI Version answer), trusted only while the
   node's Ready heartbeat and Lease are fresh, `nodeInfo.bootID` is this boot's, and the daemon started no later than
   the status the kubelet last posted (a daemon started since is not what nodeInfo describes);
2. the package that owns the running executable, only when the file that runs is the package's (collector.sh
   emit_releases: its ctime no later than dpkg's file list, or rpm's recorded size and mtime, else its digest);
3. the platform's own records, each only when only root could have written it: EKS's /etc/eks/*-version.txt (what
   its install script had the binary print; amazon-eks-ami templates/al2023/provisioners/install-worker.sh), only for
   a running file not replaced since; Bottlerocket's application inventory (its package names carry the kubelet's and
   containerd's minor release: kubernetes-1.30, containerd-2.0; its Version field is the OS's, not the package's);
   CRI-O's version file, which CRI-O writes at each start (internal/version WriteVersionFile), only when written
   since this CRI-O started;
4. the daemon's own start line in the journal (the kubelet's `"Kubelet version" kubeletVersion="v1.31.2"`,
   cmd/kubelet/app/server.go Run; containerd's `starting containerd ... version=v2.0.0`, cmd/containerd/command/
   main.go), matched by journald's trusted fields only: _PID and _BOOT_ID of this very process, _UID 0, at or after
   its start (systemd.journal-fields(7): fields with a leading underscore are added by journald, a client cannot
   set them). _SYSTEMD_UNIT is shown where journald recorded one; it is not required (a kubelet run outside a unit
   logs with the same trusted _PID).

What is known is a span of releases (one release, one minor's, or any): the rules judge under every release in it
(`Span.at_least`), and an unknown decides only what it can change. Sources that disagree are said, and the first
in the order above decides."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

Release = tuple[int, int, int]
LOWEST: Release = (0, 0, 0)
HIGHEST: Release = (999, 999, 999)
USER_HZ = 100  # /proc/PID/stat starttime's unit on every Linux architecture (include/asm-generic/param.h)
STATUS_REPORT_S = 300  # the kubelet's nodeStatusReportFrequency default (5m): a Ready heartbeat at least this often
LEASE_DURATION_S = 40  # the kubelet's nodeLeaseDurationSeconds default, where the Lease names none
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Span:
    """The releases a daemon may run, low to high inclusive, as (major, minor, patch)."""

    low: Release
    high: Release

    @classmethod
    def exact(cls, release: Release) -> Span:
        return cls(release, release)

    @classmethod
    def minor(cls, major: int, minor: int) -> Span:
        return cls((major, minor, 0), (major, minor, HIGHEST[2]))

    @classmethod
    def any(cls) -> Span:
        return cls(LOWEST, HIGHEST)

    @property
    def release(self) -> Release | None:
        """The one release, where it is known."""
        return self.low if self.low == self.high else None

    @property
    def known(self) -> bool:
        return self != Span.any()

    def at_least(self, want: Release | str) -> bool | None:
        """Whether every release of the span is `want` or later (True), none is (False), or it depends (None)."""
        w = _triple(want)
        if self.low >= w:
            return True
        if self.high < w:
            return False
        return None

    def intersect(self, other: Span) -> Span | None:
        low, high = max(self.low, other.low), min(self.high, other.high)
        return Span(low, high) if low <= high else None

    def __str__(self) -> str:
        if self.release is not None:
            return ".".join(map(str, self.release))
        if self.low[:2] == self.high[:2] and self.low[2] == 0 and self.high[2] == HIGHEST[2]:
            return f"{self.low[0]}.{self.low[1]}.x"
        if self == Span.any():
            return "any release"
        return f"{'.'.join(map(str, self.low))} to {'.'.join(map(str, self.high))}"


def _triple(want: Release | str) -> Release:
    if isinstance(want, tuple):
        return want
    parts = [*(int(x) for x in want.split(".")), 0, 0, 0]
    return parts[0], parts[1], parts[2]


def release_in(text: str) -> Release | None:
    """The first release in a version text: `v1.31.2-eks-7f9249a`, `v1.30.5-gke.1014001`, `v1.31.2+k3s1`,
    `1.7.27-1`, `2.0.0~ds1`, `Kubernetes v1.31.0`, `containerd github.com/containerd/containerd/v2 v2.0.0 ...` (a
    `/v2` of a Go module path is no release)."""
    for word in text.split():
        m = _RELEASE.match(word)
        if m and (m.group(3) is not None or word.startswith("v")) and not word.startswith("github.com"):
            return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    return None


@dataclass(frozen=True)
class Source:
    """One place a release may come from, what it says, and why it is not used ("" when it is)."""

    name: str
    value: str
    span: Span | None
    refused: str = ""

    def line(self) -> str:
        said = f"{self.value!r}" + (f" ({self.span})" if self.span is not None and self.value != str(self.span) else "")
        return f"{self.name}: {said}" + (f"; not used: {self.refused}" if self.refused else "")


@dataclass
class DaemonRelease:
    """What is known of the release a daemon runs, and from where."""

    daemon: str  # "the kubelet", "containerd", "CRI-O"
    span: Span
    source: str  # the deciding source ("" where nothing decided)
    sources: list[Source] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def release(self) -> Release | None:
        return self.span.release

    def evidence(self) -> list[str]:
        head = f"{self.daemon}'s release: {self.span}" + (f" (from {self.source})" if self.source else " (unknown)")
        return [head, *(f"  {s.line()}" for s in self.sources), *self.disagreements]

    def why_unknown(self) -> str:
        """Why the release is not one release: the sources looked at, and why each was not used."""
        if self.release is not None:
            return ""
        tried = "; ".join(s.line() for s in self.sources) or "no source records it"
        head = f"{self.daemon}'s release is {'known only as ' + str(self.span) if self.span.known else 'unknown'}"
        return f"{head} ({tried})"


def decide(daemon: str, sources: list[Source]) -> DaemonRelease:
    """The release from the sources in their order: every source in use narrows the span; one that contradicts
    what came before it is said, and does not decide."""
    span, used, disagreements = Span.any(), [], []
    for s in sources:
        if s.refused or s.span is None:
            continue
        both = span.intersect(s.span)
        if both is None:
            disagreements.append(f"{daemon}: {s.name} says {s.span}, {' and '.join(used)} said {span}: the sources disagree")
            continue
        if both != span:
            used.append(s.name)
            span = both
    return DaemonRelease(daemon, span, ", narrowed by ".join(used), sources, disagreements)


# --- the sources ----------------------------------------------------------------------------------------------


def parse_time(text: str) -> float | None:
    """Seconds since the epoch of a Kubernetes Time or MicroTime (RFC 3339) or an HTTP Date header."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        if text[0].isdigit():
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        return parsedate_to_datetime(text).timestamp()
    except (ValueError, TypeError, IndexError):
        return None


def node_status_source(
    doc: dict[str, Any] | None,
    error: str | None,
    field_name: str,
    boot: tuple[str, int] | None,
    start_ticks: int | None,
    runtime: str | None = None,
) -> Source | None:
    """The Node's nodeInfo.`field_name` as a source, with whether it may be trusted for this running daemon; None
    where the run did not use the API. `runtime` (containerd, cri-o): the runtime containerRuntimeVersion must name."""
    name = f"the Node's status.nodeInfo.{field_name} (the kubelet's own report)"
    if doc is None:
        return None if error is None else Source(name, "", None, f"the Node could not be read ({error})")
    info = doc.get("nodeInfo") or {}
    value = str(info.get(field_name) or "")
    if not value:
        return Source(name, "", None, "it is empty")
    text = value
    if runtime is not None:
        kind, _, text = value.partition("://")
        if kind != runtime:
            return Source(name, value, None, f"it names {kind or 'no runtime'}, and {runtime} runs on the node")
    found = release_in(text)
    span = Span.exact(found) if found else None
    if span is None:
        return Source(name, value, None, "it names no release")
    return Source(name, value, span, _node_status_refused(doc, boot, start_ticks, runtime or "the kubelet"))


def _node_status_refused(doc: dict[str, Any], boot: tuple[str, int] | None, start_ticks: int | None, who: str) -> str:
    """Why the Node's status may not describe the running daemon ("" when it does)."""
    now = parse_time(str(doc.get("read_at") or ""))
    if now is None:
        return "when the Node was read is not recorded"
    ready = next((c for c in doc.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
    if ready is None:
        return "the Node has no Ready condition"
    beat = parse_time(str(ready.get("lastHeartbeatTime") or ""))
    if ready.get("status") == "Unknown" or beat is None:
        return f"its Ready condition is {ready.get('status')!r} (the kubelet stopped posting status): nodeInfo may be stale"
    lease = doc.get("lease")
    if not isinstance(lease, dict):
        why = doc.get("lease_error") or "not recorded"
        return f"the node's Lease could not be read ({why}): whether its kubelet is alive is unknown"
    renew = parse_time(str(lease.get("renewTime") or ""))
    duration = lease.get("leaseDurationSeconds") or LEASE_DURATION_S
    if renew is None or now - renew > float(duration):
        age = "never renewed" if renew is None else f"renewed {now - renew:.0f} s ago, its duration {duration} s"
        return f"the node's Lease is stale ({age}): the kubelet that wrote nodeInfo may be gone"
    if now - beat > STATUS_REPORT_S + float(duration):
        return (f"the Ready heartbeat is {now - beat:.0f} s old (the kubelet posts status at least every "
                f"{STATUS_REPORT_S} s): nodeInfo may be stale")  # fmt: skip
    boot_id = str((doc.get("nodeInfo") or {}).get("bootID") or "")
    if boot is None:
        return "this boot's id was not read on the node: whether nodeInfo describes this boot is unknown"
    if boot_id.replace("-", "") != boot[0].replace("-", ""):
        return f"nodeInfo.bootID is {boot_id!r}, the node's boot_id {boot[0]!r}: the status describes another boot"
    if start_ticks is None:
        return f"when {who} started was not read"
    started = boot[1] + start_ticks / USER_HZ
    if started > beat:
        return (f"{who} started at {_iso(started)}, after the status the kubelet last posted ({_iso(beat)}): nodeInfo "
                "describes the daemon before it")  # fmt: skip
    return ""


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# What a package record's proof says (collector.sh emit_releases)
# OpenShift's kubelet package is versioned by OpenShift's release, not the kubelet's: OpenShift 4.N is built on
# Kubernetes 1.(N+13) (OpenShift release notes: 4.14 on 1.27, 4.16 on 1.29, 4.17 on 1.30, 4.18 on 1.31)
OPENSHIFT_KUBELET = ("openshift-kubelet", "openshift-hyperkube")
OPENSHIFT_OFFSET = 13


def package_source(rec: Any, proof: Any, who: str, legacy: bool, host_root: bool = False) -> Source | None:
    """The package that owns the running executable, used only when the running file is the package's. `legacy`: a
    snapshot of a collector before proofs (its package records were trusted as they are). `host_root`: the collector
    ran below a host root, in the audit's own image, so a missing tool is the image's gap, not the node's."""
    if rec is None:
        return None
    name = "the package that owns its running executable"
    if rec.status != "0":
        why = PACKAGE_STATUS.get(rec.status, f"status {rec.status}")
        tool = rec.data.decode("utf-8", "replace").strip() or "its tool"
        if rec.status == "notool" and host_root:
            why = "the audit's image has no {tool} to read the node's package database (install it in the image)"
        return Source(name, "", None, why.format(tool=tool))
    words = rec.data.decode("utf-8", "replace").split()
    if len(words) < 3:
        return Source(name, " ".join(words), None, "no version in the package record")
    value = " ".join(words[:3])
    version = words[2].split(":", 1)[-1]  # dpkg's epoch ("1:1.7.27-1") is not part of the release
    found = release_in(version)
    span = Span.exact(found) if found else None
    if words[1] in OPENSHIFT_KUBELET and found is not None and found[0] == 4:
        span = Span.minor(1, found[1] + OPENSHIFT_OFFSET)  # the OpenShift release names the kubelet's minor only
    if span is None:
        return Source(f"{name} ({words[0]} {words[1]})", value, None, "its version names no release")
    name = f"{words[0]} package {words[1]}"
    if proof is None:
        return Source(name, value, span, "" if legacy else "whether the running file is the package's was not recorded")
    return Source(name, value, span, _proof_refused(proof.data.decode("utf-8", "replace").split(), who))


PACKAGE_STATUS = {
    "unowned": "no package of the node's package database owns the running executable (installed by hand, from a "
    "release tarball or by an installer)",
    "nodb": "the node has no package database (dpkg or rpm)",
    "notool": "the node has a package database, and {tool} was not found to read it",
    "unread": "its package record could not be read",
    "deleted": "its executable was replaced on disk since it started",
    "127": "the node has no package database tool (dpkg-query or rpm) and timeout(1)",
}


def _proof_refused(words: list[str], who: str) -> str:
    """Why the package's record does not describe the file that runs ("" when it does)."""
    kind = words[0] if words else ""
    if kind == "ctime" and len(words) >= 3:
        return ""  # the collector writes it only where the executable's ctime is no later than the file list's mtime
    if kind == "rpm-attrs":
        return ""  # its size and mtime are the ones the package's header records
    if kind == "digest" and len(words) >= 4:
        algo, have, want = words[1], words[2], words[3]
        if have == "-":
            return f"the running file's digest ({algo}) could not be computed"
        if want == "-":
            return "the package records no digest of the file, and the file changed since the package installed it"
        if have != want:
            return (f"the running file is not the package's: its {algo} digest is {have[:16]}..., the package recorded "
                    f"{want[:16]}... (a file copied over the package's, a release tarball or a hand-built {who}?)")  # fmt: skip
        return ""
    return f"the proof record reads {' '.join(words)!r}"


def record_source(
    bundle: Any,
    path: str,
    who: str,
    read: Any,
    exe_ctime: int | None,
    written_at_start: bool = False,
    started: float | None = None,
) -> Source | None:
    """A platform's own record (`read(text)` -> (value, span)), used only when only root could have written it; for
    EKS's version files the running executable must be no newer than the record, and a record the daemon writes at
    each start (CRI-O's version file: `written_at_start`) must have been written since it `started`."""
    rec = bundle.file(path)
    if rec is None or rec.status == "missing":
        return None
    name = path
    if rec.status != "ok" or rec.truncated:
        return Source(name, "", None, f"it could not be read ({rec.status})")
    try:
        value, span = read(rec.data.decode("utf-8", "replace"))
    except (ValueError, KeyError, TypeError) as e:
        return Source(name, "", None, f"it does not parse ({e})")
    meta = bundle.meta(f"record-stat:{path}")
    if meta is None or meta.status != "ok":
        return Source(name, value, span, "who may write it was not recorded")
    words = meta.data.decode("utf-8", "replace").split()
    mtime = int(words[0]) if words and words[0].isdigit() else None
    if words[-1:] != ["yes"]:
        return Source(name, value, span, "a user other than root could have written it (the file or a folder above it)")
    if span is None:
        return Source(name, value, None, f"it names no release of {who}")
    if written_at_start and (started is None or mtime is None):
        return Source(name, value, span, f"when it was written, or when this {who} started, is not known")
    if written_at_start and mtime is not None and started is not None and mtime < int(started):
        return Source(name, value, span, f"it was written before this {who} started (it writes the file at each start)")
    if exe_ctime is not None and mtime is not None and exe_ctime > mtime:
        return Source(name, value, span, f"the running {who} executable was installed after the record was written")
    return Source(name, value, span)


def eks_version(text: str) -> tuple[str, Span | None]:
    """What `kubelet --version` or `containerd --version` printed when the AMI was built."""
    value = " ".join(text.split())
    found = release_in(value)
    return value, Span.exact(found) if found else None


def bottlerocket_inventory(package_prefix: str) -> Any:
    """A reader of Bottlerocket's application inventory for the package whose name carries the daemon's minor
    release (`kubernetes-1.30`, `containerd-2.0`): {"Content": [{"Name": ..., "Version": <the OS's>, ...}]}."""

    def read(text: str) -> tuple[str, Span | None]:
        doc = json.loads(text)
        for item in doc["Content"]:
            name = str(item.get("Name", ""))
            m = re.fullmatch(re.escape(package_prefix) + r"-(\d+)\.(\d+)", name)
            if m:
                return name, Span.minor(int(m.group(1)), int(m.group(2)))
        return f"no {package_prefix}-<minor> package", None

    return read


JOURNAL_STATUS = {
    "notfound": "no start line of this process in the journal (a journal that keeps no entries of its first five "
    "minutes, or a daemon that logs to a file)",
    "127": "journalctl (or timeout) is not on the node",
    "unread": "this boot's id or the process's start time was not read",
}


def journal_source(rec: Any, pid: int, boot: tuple[str, int] | None, start_ticks: int | None, who: str) -> Source | None:
    """The daemon's start line in the journal, used only when journald's trusted fields say it is this process's."""
    if rec is None:
        return None
    name = "its start line in the journal"
    if rec.status != "0":
        why = JOURNAL_STATUS.get(rec.status, f"status {rec.status}")
        return Source(name, "", None, why)
    try:
        entry = json.loads(rec.data.decode("utf-8", "replace"))
    except ValueError:
        return Source(name, "", None, "the journal's entry does not parse")
    message = entry.get("MESSAGE")
    if not isinstance(message, str):
        return Source(name, "", None, "its MESSAGE is not text")
    m = re.search(r'"Kubelet version" kubeletVersion="([^"]+)"', message) or re.search(
        r"starting containerd.*\bversion=\"?([^\s\"]+)", message
    )
    value = m.group(1) if m else message[:120]
    found = release_in(value) if m else None
    span = Span.exact(found) if found else None
    unit = entry.get("_SYSTEMD_UNIT")
    if unit:
        name += f" (unit {unit})"
    if span is None:
        return Source(name, value, None, "it names no release")
    if str(entry.get("_PID")) != str(pid) or str(entry.get("_UID")) != "0":
        said = f"_PID {entry.get('_PID')}, _UID {entry.get('_UID')}"
        return Source(name, value, span, f"journald recorded {said}: not this {who}")
    if boot is None or str(entry.get("_BOOT_ID", "")).replace("-", "") != boot[0].replace("-", ""):
        return Source(name, value, span, "its _BOOT_ID is not this boot's")
    at = entry.get("__REALTIME_TIMESTAMP")
    if start_ticks is None or not str(at).isdigit():
        return Source(name, value, span, "when it was logged, or when the process started, is not known")
    if int(str(at)) / 1e6 < boot[1] + start_ticks // USER_HZ:
        return Source(name, value, span, f"it was logged before this {who} started (an earlier process with this PID)")
    return Source(name, value, span)


def crio_version_file(text: str) -> tuple[str, Span | None]:
    """CRI-O's version file: its release as a JSON string (internal/version WriteVersionFile)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text.strip()
    value = str(value).strip()
    found = release_in(value)
    return value, Span.exact(found) if found else None


def as_span(release: Span | Release | None) -> Span:
    """A span from what a rule was given: a span, one release, or nothing known (every release)."""
    if isinstance(release, Span):
        return release
    return Span.any() if release is None else Span.exact(tuple(release))  # type: ignore[arg-type]
