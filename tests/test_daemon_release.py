"""Issue 58: which release a daemon runs, from sources a node's users cannot forge (conformance.facts.daemon_release),
and the rules that depend on a release judged under every release it may be. The lab (tests/test_lab_releases.py)
proves each source end to end; these pin each rule's edges on records laid out as the collector and the API write
them."""

from __future__ import annotations

import json
import time

import pytest

from conformance.checks.gpu_health import judge_fabric, judge_persistence
from conformance.checks.numa_rules import numa_limit_problems
from conformance.checks.runtime_rules import cdi_enabled, runtime_config_support
from conformance.collection.bundle import Bundle, Record
from conformance.errors import FactUnavailable
from conformance.facts.daemon_release import (
    Span,
    bottlerocket_inventory,
    decide,
    journal_source,
    node_status_source,
    package_source,
    record_source,
    release_in,
)
from conformance.facts.gpu import DaemonSeen
from conformance.facts.runtime import RULES_1_GLOB, RULES_1_NEW, RULES_1_OLD, RULES_2_0, rules_in
from tests.test_gpu_health import GP, gpu

BOOT = ("53e20790-cc0f-4ee8-83ee-a6d12120c10b", 1_796_000_000)  # (boot_id, btime)
NOW = BOOT[1] + 86_400  # a day after boot
START = 3_600 * 100  # the daemon started an hour after boot (clock ticks)


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def status(**over) -> dict:
    """The Node's status as cluster/api.py node_status keeps it, for a live kubelet."""
    info = {"kubeletVersion": "v1.31.2-eks-7f9249a", "containerRuntimeVersion": "containerd://1.7.27", "bootID": BOOT[0]}
    doc = {
        "nodeInfo": info,
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": iso(NOW - 60)}],
        "lease": {"holderIdentity": "n", "renewTime": iso(NOW - 5).replace("Z", ".123456Z"), "leaseDurationSeconds": 40},
        "read_at": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(NOW)),
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("v1.31.2-eks-7f9249a", (1, 31, 2)),
        ("v1.30.5-gke.1014001", (1, 30, 5)),
        ("v1.31.2+k3s1", (1, 31, 2)),
        ("v1.29.4+rke2r1", (1, 29, 4)),
        ("Kubernetes v1.31.0", (1, 31, 0)),
        ("containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542", (2, 0, 0)),
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6, 20)),
        ("containerd github.com/containerd/containerd/v2 2.0.5 fb4c30d4ede3531652d86197bf3fc9515e5276d9", (2, 0, 5)),
        ("1.7.27-1.amzn2023.0.1", (1, 7, 27)),
        ("no release here", None),
    ],
)
def test_vendor_suffixes_are_parsed(text, release):
    assert release_in(text) == release


def test_a_span_says_what_every_release_in_it_says():
    minor = Span.minor(1, 30)
    assert str(minor) == "1.30.x" and minor.at_least("1.30") is True and minor.at_least("1.31") is False
    assert minor.at_least((1, 30, 5)) is None  # 1.30.0-1.30.4 are not, 1.30.5 and later are
    assert Span.any().at_least("1.27") is None and str(Span.any()) == "any release"
    assert Span.exact((1, 36, 0)).release == (1, 36, 0)


def test_containerd_merge_rules_of_a_known_minor_only():
    assert rules_in(Span.minor(1, 7)) == [RULES_1_OLD, RULES_1_GLOB, RULES_1_NEW]
    assert rules_in(Span.minor(2, 0)) == [RULES_2_0]
    assert len(rules_in(Span.any())) == 5


def test_nodeinfo_is_used_while_the_kubelet_is_alive_and_of_this_boot():
    s = node_status_source(status(), None, "kubeletVersion", BOOT, START)
    assert s is not None and not s.refused and s.span == Span.exact((1, 31, 2))
    r = node_status_source(status(), None, "containerRuntimeVersion", BOOT, START, runtime="containerd")
    assert r is not None and not r.refused and r.span == Span.exact((1, 7, 27))


@pytest.mark.parametrize(
    ("over", "start", "why"),
    [
        ({"lease": {"renewTime": iso(NOW - 300), "leaseDurationSeconds": 40}}, START, "the node's Lease is stale"),
        ({"lease": None, "lease_error": "403 Forbidden"}, START, "the node's Lease could not be read (403 Forbidden)"),
        ({"conditions": [{"type": "Ready", "status": "Unknown", "lastHeartbeatTime": iso(NOW - 60)}]}, START,
         "the kubelet stopped posting status"),
        ({"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": iso(NOW - 3600)}]}, START,
         "the Ready heartbeat is 3600 s old"),
        ({"nodeInfo": {"kubeletVersion": "v1.31.2", "bootID": "another-boot"}}, START, "describes another boot"),
        ({}, (NOW - BOOT[1] - 30) * 100, "after the status the kubelet last posted"),  # restarted 30 s ago
        ({"read_at": None}, START, "when the Node was read is not recorded"),
    ],
)  # fmt: skip
def test_nodeinfo_is_not_used_when_it_may_not_describe_the_running_daemon(over, start, why):
    s = node_status_source(status(**over), None, "kubeletVersion", BOOT, start)
    assert s is not None and why in s.refused, s
    assert decide("the kubelet", [s]).release is None


def test_nodeinfo_naming_another_runtime_is_not_its_release():
    s = node_status_source(status(), None, "containerRuntimeVersion", BOOT, START, runtime="cri-o")
    assert s is not None and "it names containerd, and cri-o runs on the node" in s.refused


def proof(text: str) -> Record:
    return Record("M", "kubelet-package-proof", "ok", text.encode())


def test_a_package_is_the_running_files_release_only_with_its_proof():
    pkg = Record("C", "kubelet-package", "0", b"dpkg kubelet 1.31.0-1.1")
    assert not package_source(pkg, proof("ctime 1700000000 1700000005"), "kubelet", False).refused
    assert not package_source(pkg, proof("digest md5 " + "a" * 32 + " " + "a" * 32 + " 1700000000"), "kubelet", False).refused
    tarball = package_source(pkg, proof("digest md5 " + "a" * 32 + " " + "b" * 32 + " 1700000000"), "kubelet", False)
    assert "the running file is not the package's" in tarball.refused
    assert "records no digest" in package_source(pkg, proof("digest md5 " + "a" * 32 + " - -"), "kubelet", False).refused
    assert "was not recorded" in package_source(pkg, None, "kubelet", False).refused
    assert not package_source(pkg, None, "kubelet", True).refused  # a snapshot of a collector before proofs
    rpm = Record("C", "containerd-package", "0", b"rpm containerd 1.7.27-1.amzn2023.0.1")
    assert package_source(rpm, proof("rpm-attrs 41230336 1727000000"), "containerd", False).span == Span.exact((1, 7, 27))
    notool = package_source(Record("C", "kubelet-package", "notool", b"rpm"), None, "kubelet", False)
    assert notool.refused == "the node has a package database, and rpm was not found to read it"


def bundle(*records: Record) -> Bundle:
    return Bundle(node="n", records=[Record("M", "version", "ok", b"1"), *records])


def test_a_platform_record_counts_only_when_only_root_could_write_it():
    text = Record("F", "/etc/eks/kubelet-version.txt", "ok", b"Kubernetes v1.31.2-eks-7f9249a\n")
    from conformance.facts.daemon_release import eks_version

    ok = record_source(bundle(text, Record("M", "record-stat:/etc/eks/kubelet-version.txt", "ok", b"1700000100 yes")),
                       "/etc/eks/kubelet-version.txt", "kubelet", eks_version, 1_700_000_000)  # fmt: skip
    assert ok is not None and not ok.refused and ok.span == Span.exact((1, 31, 2))
    user = record_source(bundle(text, Record("M", "record-stat:/etc/eks/kubelet-version.txt", "ok", b"1700000100 no")),
                         "/etc/eks/kubelet-version.txt", "kubelet", eks_version, 1_700_000_000)  # fmt: skip
    assert "a user other than root could have written it" in user.refused
    newer = record_source(bundle(text, Record("M", "record-stat:/etc/eks/kubelet-version.txt", "ok", b"1700000100 yes")),
                          "/etc/eks/kubelet-version.txt", "kubelet", eks_version, 1_700_009_999)  # fmt: skip
    assert "installed after the record was written" in newer.refused


def test_bottlerocket_names_the_minor_in_the_package_name():
    # the inventory's layout (Bottlerocket docs, "Software Inventory"): Version is the OS's release, not the package's
    doc = {"Content": [
        {"Name": "kernel-6.1", "Publisher": "Bottlerocket", "Version": "1.26.1", "Release": "763f6d4c"},
        {"Name": "kubernetes-1.31", "Publisher": "Bottlerocket", "Version": "1.26.1", "Release": "763f6d4c"},
        {"Name": "containerd-2.0", "Publisher": "Bottlerocket", "Version": "1.26.1", "Release": "763f6d4c"},
    ]}  # fmt: skip
    assert bottlerocket_inventory("kubernetes")(json.dumps(doc)) == ("kubernetes-1.31", Span.minor(1, 31))
    assert bottlerocket_inventory("containerd")(json.dumps(doc))[1] == Span.minor(2, 0)


def entry(**over) -> Record:
    e = {"MESSAGE": 'I1207 09:00:00.000001      77 server.go:467] "Kubelet version" kubeletVersion="v1.32.4"',
         "_PID": "77", "_UID": "0", "_BOOT_ID": BOOT[0].replace("-", ""), "_SYSTEMD_UNIT": "kubelet.service",
         "__REALTIME_TIMESTAMP": str((BOOT[1] + START // 100 + 1) * 1_000_000)}  # fmt: skip
    e.update(over)
    return Record("C", "kubelet-journal", "0", json.dumps(e).encode())


def test_the_journal_counts_only_this_processs_own_line():
    s = journal_source(entry(), 77, BOOT, START, "kubelet")
    assert not s.refused and s.span == Span.exact((1, 32, 4)) and "unit kubelet.service" in s.name
    assert "not this kubelet" in journal_source(entry(_UID="65534"), 77, BOOT, START, "kubelet").refused
    assert "not this kubelet" in journal_source(entry(_PID="78"), 77, BOOT, START, "kubelet").refused
    assert "not this boot's" in journal_source(entry(_BOOT_ID="0" * 32), 77, BOOT, START, "kubelet").refused
    early = entry(__REALTIME_TIMESTAMP=str((BOOT[1] + START // 100 - 10) * 1_000_000))
    assert "an earlier process with this PID" in journal_source(early, 77, BOOT, START, "kubelet").refused
    containerd = entry(MESSAGE='time="2026-12-07T09:00:00Z" level=info msg="starting containerd" revision=1a2b version=v2.0.4')
    assert journal_source(containerd, 77, BOOT, START, "containerd").span == Span.exact((2, 0, 4))


def test_sources_that_disagree_are_said_and_the_first_decides():
    from conformance.facts.daemon_release import Source

    got = decide("the kubelet", [Source("nodeInfo", "v1.31.2", Span.exact((1, 31, 2))),
                                 Source("a package", "1.30.0", Span.exact((1, 30, 0)))])  # fmt: skip
    assert got.release == (1, 31, 2) and "the sources disagree" in got.disagreements[0]
    narrowed = decide("the kubelet", [Source("inventory", "kubernetes-1.31", Span.minor(1, 31)),
                                      Source("journal", "v1.31.4", Span.exact((1, 31, 4)))])  # fmt: skip
    assert narrowed.release == (1, 31, 4) and narrowed.source == "inventory, narrowed by journal"


# -- the rules, under every release a daemon may be -------------------------------------------------------------


def test_runtime_config_support_under_every_release():
    # containerd 2.x answers RuntimeConfig for any kubelet: its release alone decides
    assert runtime_config_support(None, "containerd", Span.minor(2, 0))[:2] == (None, None)
    # a kubelet of 1.30.x falls back to its own cgroupDriver whatever the runtime is
    assert runtime_config_support(Span.minor(1, 30), "containerd", None)[:2] == (None, None)
    # containerd 1.7.x never answers it, and a kubelet 1.38.x no longer falls back: a failure, releases half known
    assert "does not start" in runtime_config_support(Span.minor(1, 38), "containerd", Span.minor(1, 7))[0]
    # both unknown: the outcome depends on them, and the message names the releases that decide
    problem, unknown, _ = runtime_config_support(None, "containerd", None)
    assert problem is None and "whether containerd is 2.0.0 or later" in unknown and "1.37 or later" in unknown


def test_cdi_under_every_release():
    assert cdi_enabled("containerd", None, Span.minor(2, 0))[0] is True
    assert cdi_enabled("containerd", None, Span.minor(1, 6))[0] is False
    on, why = cdi_enabled("containerd", None, None)
    assert on is None and "the release decides" in why
    assert cdi_enabled("containerd", (True, "enable_cdi"), Span.minor(1, 7))[0] is True


def test_numa_admission_under_every_release():
    options = {"max-allowable-numa-nodes": "34"}
    assert numa_limit_problems("single-numa-node", options, list(range(34)), Span.minor(1, 36))[0] == []
    assert numa_limit_problems("single-numa-node", options, list(range(34)), Span.minor(1, 35))[0]
    with pytest.raises(FactUnavailable, match=r"whether it is 1\.36 or later decides"):
        numa_limit_problems("single-numa-node", options, list(range(34)), None)


# -- the GPU daemons: the GPUs' own facts decide ------------------------------------------------------------------

NVSWITCH = ["0000:05:00.0"]


def test_the_gpus_fabric_state_decides_not_the_daemons_presence():
    done = gpu(fabric={"state": 3, "status": 0})
    operator = DaemonSeen(contained=[3100])  # in the GPU Operator's driver container
    v = judge_fabric([done], NVSWITCH, operator)
    assert not v.failures and not v.unknowns, v
    assert "nvidia-fabricmanager: running in a container (pid 3100" in " ".join(v.lines)
    assert not judge_fabric([done], NVSWITCH, DaemonSeen()).failures  # the GPUs joined: nothing else decides
    pending = judge_fabric([gpu(fabric={"state": 1, "status": 0})], NVSWITCH, DaemonSeen())
    assert pending.failures == ["GPU0 GPU-x (0000:18:00.0): fabric registration not started (and no "
                                "nvidia-fabricmanager runs on the node, on the host or in a container)"]  # fmt: skip


def test_without_a_fabric_state_only_the_fabric_manager_tells():
    old = gpu(unread={"fabric": "function not in this driver's NVML"})
    assert not judge_fabric([old], NVSWITCH, DaemonSeen(host=[812])).failures
    assert judge_fabric([old], NVSWITCH, DaemonSeen(contained=[3100])).unknowns
    assert judge_fabric([old], NVSWITCH, DaemonSeen()).failures  # no process of that name anywhere: absent


@pytest.mark.parametrize(
    ("want", "mode", "seen", "outcome"),
    [
        ("daemon", True, DaemonSeen(contained=[3101]), "passed"),  # the GPU Operator's, and every GPU persistent
        ("daemon", False, DaemonSeen(contained=[3101]), "failed"),
        ("daemon", None, DaemonSeen(contained=[3101]), "error"),
        ("daemon", False, DaemonSeen(host=[900]), "passed"),  # NVIDIA's unit, as its --user: a verified daemon
        ("daemon", True, DaemonSeen(), "failed"),
        ("mode_or_daemon", True, DaemonSeen(contained=[3101]), "passed"),
        ("mode_or_daemon", False, DaemonSeen(contained=[3101]), "failed"),
    ],
)
def test_persistence_mode_decides_and_the_daemon_is_evidence(want, mode, seen, outcome):
    v = judge_persistence([gpu(persistence=mode)], {**GP, "persistence": want}, seen)
    got = "failed" if v.failures else "error" if v.unknowns else "passed"
    assert got == outcome, v


# -- issue 59 item 4: what was read of a daemon is tied to the process that was verified -------------------------


def kubelet_records(recheck: bytes | None, status: str = "ok") -> Bundle:
    records = [
        Record("P", "kubelet", "4242"),
        Record("L", "/proc/4242/exe", "ok", b"/usr/bin/kubelet"),
        Record("M", "daemon:4242", "ok", b""),
        Record("M", "daemon-start:4242", "ok", b"123456"),
        Record("F", "/proc/4242/cmdline", "ok", b"/usr/bin/kubelet\0--config\0/etc/kubernetes/kubelet.yaml\0"),
    ]
    if recheck is not None:
        records.append(Record("M", "daemon-recheck", status, recheck))
    return bundle(*records)


def test_a_pid_that_names_another_process_by_the_end_is_no_daemon():
    (same,) = kubelet_records(b"4242:123456 ").daemons("kubelet")
    assert same.trusted and same.start == 123456
    (restarted,) = kubelet_records(b"4242:987654 ").daemons("kubelet")  # a crash-looping kubelet's PID, reused
    assert not restarted.trusted and restarted.ruled_out
    assert "its PID named another process by the end of the collection" in restarted.why
    (gone,) = kubelet_records(b"").daemons("kubelet")
    assert not gone.trusted and "then not checked again" in gone.why
    (unread,) = kubelet_records(b"", status="denied").daemons("kubelet")  # an unreadable recheck: unknown, not unchanged
    assert not unread.trusted
    (legacy,) = kubelet_records(None).daemons("kubelet")  # a snapshot of a collector before the recheck
    assert legacy.trusted
