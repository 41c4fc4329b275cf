"""Where GPU-XID-EVENTS reads this boot's kernel log, run by the real collector on a host root: the syslog
file and its rotations (logrotate's NAME.1, NAME.2.gz, dateext NAME-YYYYMMDD), the journal, dmesg, and what
it says when none of them reaches back to this boot's first line. The Xid lines are the real ones of
tests/samples/kernel-log.xid.real-lines.txt; the programs are this machine's own (sh, awk, gzip, stat),
on a PATH this test makes, without journalctl and dmesg so that the machine's own logs never decide."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from pathlib import Path

import pytest

from conformance.checks.gpu_health import judge_xids
from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.config.profile import load_profile
from conformance.facts.gpu import Gpu
from conformance.facts.gpu_health import GpuHealth
from conformance.facts.node_facts import NodeFacts
from conformance.facts.xid import XID_LINES_KEPT
from tests.fakeroot import make_host_root
from tests.lab.nodes import SAMPLES

REAL = (SAMPLES / "kernel-log.xid.real-lines.txt").read_text().splitlines()
BOOT = "Dec  3 09:00:00 gpu kernel: Linux version 6.1.0-lab (lab@lab) #1 SMP"
PREV_BOOT = "Nov 26 08:00:00 gpu kernel: Linux version 6.1.0-lab (lab@lab) #1 SMP"
# the real Xid 79 line (NVIDIA/open-gpu-kernel-modules issue 1151), on this root's GPU
XID79 = REAL[1].replace("May 18 19:02:39", "Dec  3 09:05:00").replace("0000:2b:00", "0000:18:00")
XID79_PREV = REAL[1].replace("May 18 19:02:39", "Nov 26 09:05:00").replace("0000:2b:00", "0000:18:00")
XID13 = "Dec  3 {t} gpu kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=4242, Graphics Exception: ESR 0x405840=0x1"
QUIET = "Dec  3 09:00:01 gpu kernel: nvidia: loading out-of-tree module taints kernel."
GPU = Gpu(index=0, uuid="GPU-x", bus_id="00000000:18:00.0", health=GpuHealth())
GP = load_profile(None).get("gpu")
# what no program the test allows may be: the machine's own kernel log readers, and the NVML probe's python
HIDDEN = {"journalctl", "dmesg", "python3", "nvidia-smi"}


def bindir(tmp: Path, without: set[str]) -> Path:
    """A PATH folder of links to this machine's programs, less `without`."""
    d = tmp / "bin"
    d.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name in without or name.startswith("python") or (d / name).exists():
                continue
            os.symlink(os.path.join(folder, name), d / name)
    return d


def collect(tmp_path: Path, monkeypatch, logs: dict[str, str | bytes], without: set[str] = frozenset(), mtimes=None):
    root = make_host_root(tmp_path / "host", ["/usr/bin/kubelet"], {})
    dev = root / "sys/bus/pci/devices/0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")
    for path, content in logs.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    for path, mtime in (mtimes or {}).items():
        os.utime(root / path.lstrip("/"), (mtime, mtime))
    monkeypatch.setenv("PATH", str(bindir(tmp_path, HIDDEN | set(without))))
    bundle = collect_node(NodeSpec(name="n1", transport="local", host_root=str(root)), retries=0)
    assert bundle.error is None, bundle.error
    facts = NodeFacts(bundle)
    log = facts.xid_log
    return log, judge_xids(log, [GPU], GP), bundle


def lines(*xs: str) -> str:
    return "\n".join(xs) + "\n"


@pytest.fixture(autouse=True)
def _needs_gzip():
    if shutil.which("gzip") is None:
        pytest.fail("the rotation tests need gzip (Debian package gzip)")


def test_a_file_with_this_boots_first_line_is_read_alone(tmp_path, monkeypatch):
    log, v, _ = collect(tmp_path, monkeypatch, {"/var/log/kern.log": lines(XID79_PREV, BOOT, QUIET, XID13.format(t="09:01:00"))})
    assert log.complete and log.gaps == [] and log.source == "file /var/log/kern.log"
    assert [(c.xid, c.count) for c in log.counts] == [(13, 1)]  # the previous boot's Xid 79 is not this boot's
    assert v.failures == [] and v.unknowns == []


def test_this_boots_xids_in_the_rotations_are_read(tmp_path, monkeypatch):
    """Ubuntu's logrotate moves kern.log weekly: this boot's start and a fatal Xid sit in kern.log.2.gz."""
    logs = {
        "/var/log/kern.log": lines(XID13.format(t="12:00:00")),
        "/var/log/kern.log.1": lines(QUIET, XID13.format(t="11:00:00")),
        "/var/log/kern.log.2.gz": gzip.compress(lines(PREV_BOOT, XID79_PREV, BOOT, XID79).encode()),
        "/var/log/kern.log.3.gz": gzip.compress(lines(PREV_BOOT, XID79_PREV).encode()),
    }
    log, v, _ = collect(tmp_path, monkeypatch, logs)
    assert log.complete and log.gaps == []
    assert "the file and 2 rotation(s)" in log.detail
    assert [(c.xid, c.count) for c in log.counts] == [(79, 1), (13, 2)]
    assert v.failures == ["GPU0 GPU-x (00000000:18:00.0): Xid 79 at Dec  3 09:05:00"]


def test_dateext_rotations_are_read_newest_first(tmp_path, monkeypatch):
    logs = {
        "/var/log/messages": lines(XID13.format(t="12:00:00")),
        "/var/log/messages-20261201": lines(BOOT, XID79),
        "/var/log/messages-20261124": lines(PREV_BOOT, XID79_PREV, XID79_PREV),
    }
    log, v, _ = collect(tmp_path, monkeypatch, logs)
    assert log.complete and [(c.xid, c.count) for c in log.counts] == [(79, 1), (13, 1)]
    assert v.failures and "Xid 79" in v.failures[0]


def test_no_boot_line_anywhere_is_an_error_that_names_what_was_tried(tmp_path, monkeypatch):
    log, v, _ = collect(tmp_path, monkeypatch, {"/var/log/kern.log": lines(XID13.format(t="12:00:00"))})
    assert not log.complete
    (gap,) = log.gaps
    assert gap.startswith("this boot's log not fully read: /var/log/kern.log and 0 rotation(s): no boot line")
    assert "journalctl or timeout not found" in gap and "dmesg: not found" in gap
    assert v.failures == [] and v.unknowns == [gap]  # the check says error, never passed


def test_a_fatal_xid_read_still_fails_when_the_log_is_incomplete(tmp_path, monkeypatch):
    _log, v, _ = collect(tmp_path, monkeypatch, {"/var/log/kern.log": lines(XID79)})
    assert v.failures and "Xid 79" in v.failures[0] and v.unknowns


def test_a_rotation_last_written_before_this_boot_ends_the_search(tmp_path, monkeypatch):
    """A file last written before the kernel booted (btime in /proc/stat) holds nothing of this boot: what
    came before it is not this boot's either, and the boot's start was never logged to a file."""
    logs = {"/var/log/kern.log": lines(XID13.format(t="12:00:00")), "/var/log/kern.log.1": lines(PREV_BOOT, XID79_PREV)}
    log, _v, _ = collect(tmp_path, monkeypatch, logs, mtimes={"/var/log/kern.log.1": 86400})
    assert not log.complete and [(c.xid, c.count) for c in log.counts] == [(13, 1)]
    assert "/var/log/kern.log.1 was last written before this boot" in log.gaps[0]


def test_a_compressed_rotation_without_gzip_is_named(tmp_path, monkeypatch):
    logs = {"/var/log/kern.log": lines(XID13.format(t="12:00:00")), "/var/log/kern.log.1.gz": gzip.compress(lines(BOOT).encode())}
    log, _v, _ = collect(tmp_path, monkeypatch, logs, without={"gzip"})
    assert not log.complete and "/var/log/kern.log.1.gz: gzip not found" in log.gaps[0]


def test_every_xid_number_is_counted_beyond_the_lines_kept(tmp_path, monkeypatch):
    """A fatal Xid 79 followed by 600 application Xid 13 lines: the newest 500 lines travel, the counts of
    every number do, and Xid 79 fails."""
    many = [XID13.format(t=f"10:{i // 60:02d}:{i % 60:02d}") for i in range(600)]
    log, v, _bundle = collect(tmp_path, monkeypatch, {"/var/log/kern.log": lines(BOOT, XID79, *many)})
    assert log.total == 601 and len(log.events) == XID_LINES_KEPT
    assert {(c.xid, c.count) for c in log.counts} == {(79, 1), (13, 600)}
    (c13,) = [c for c in log.counts if c.xid == 13]
    assert c13.first.when == "Dec  3 10:00:00" and c13.last.when == "Dec  3 10:09:59"
    assert v.failures == ["GPU0 GPU-x (00000000:18:00.0): Xid 79 at Dec  3 09:05:00"]
    assert any("every one counted on the node, the newest 500 kept as lines" in line for line in v.lines)


def test_a_reset_class_xid_counts_until_the_log_shows_the_gpu_was_reset(tmp_path, monkeypatch):
    """Xid 48 (a double-bit ECC error, NVIDIA's catalogue: RESET_GPU) and Xid 119 (a GSP timeout, RESET_GPU) fail an
    acceptance profile. The driver's recovery action reading NONE clears neither: many reset-class Xids never
    raise it. Only an Xid 154 after the event that changed the action to none (the reset it asked for was done)
    clears it; one before the event does not."""
    dbe = (
        "Dec  3 09:06:00 gpu kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=4242, An uncorrectable double bit error "
        "(DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."
    )
    gsp = [f"Dec  3 09:0{i}:30 gpu kernel: NVRM: Xid (PCI:0000:18:00): 119, pid=4242, Timeout after 6s of waiting for RPC "
           "response from GPU0 GSP!" for i in range(7, 10)]  # fmt: skip
    to_reset = ("Dec  3 09:06:01 gpu kernel: NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) "
                "to 0x1 (GPU Reset Required)")  # fmt: skip
    to_none = ("Dec  3 09:20:00 gpu kernel: NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x1 (GPU "
               "Reset Required) to 0x0 (None)")  # fmt: skip
    acceptance = load_profile("h100-h200-inference").get("gpu")
    none = Gpu(index=0, uuid="GPU-x", bus_id="00000000:18:00.0", health=GpuHealth(recovery_action=0))
    log, _, _ = collect(tmp_path / "a", monkeypatch, {"/var/log/kern.log": lines(BOOT, dbe, *gsp)})
    still = judge_xids(log, [none], acceptance)  # NVML says NONE, and nothing in the log shows a reset
    assert still.failures == ["GPU0 GPU-x (00000000:18:00.0): Xid 48 at Dec  3 09:06:00, Xid 119 at Dec  3 09:09:30 (3 times "
                              "since boot, first at Dec  3 09:07:30)"]  # fmt: skip
    log, _, _ = collect(tmp_path / "b", monkeypatch, {"/var/log/kern.log": lines(BOOT, dbe, to_reset, *gsp, to_none)})
    cleared = judge_xids(log, [none], acceptance)
    assert cleared.failures == [], cleared.failures
    assert any("changed its recovery action to none after it, at Dec  3 09:20:00" in line for line in cleared.lines)
    log, _, _ = collect(tmp_path / "c", monkeypatch, {"/var/log/kern.log": lines(BOOT, to_reset, to_none, dbe)})
    assert judge_xids(log, [none], acceptance).failures == ["GPU0 GPU-x (00000000:18:00.0): Xid 48 at Dec  3 09:06:00"]
    asks = Gpu(index=0, uuid="GPU-x", bus_id="00000000:18:00.0", health=GpuHealth(recovery_action=1))
    assert "asks for recovery action 'GPU reset'" in judge_xids(log, [asks], acceptance).failures[0]


def test_the_collector_uses_no_posix_character_class():
    """mawk 1.3.3 (the awk of Debian 10 and Ubuntu 18.04 nodes) has no POSIX character classes: a `[[:space:]]`
    matches nothing there, and the Xid counter would count no Xid. Neither the node collector nor the script
    run inside pods may use one (README "Node shells and awks")."""
    from conformance.cluster.pods import INSIDE

    collector = (Path(__file__).resolve().parent.parent / "conformance" / "collection" / "collector.sh").read_text()
    for name, text in (("collector.sh", collector), ("cluster/pods.py INSIDE", INSIDE)):
        found = re.findall(r"\[\[:[a-z]+:\]\]", text)
        assert not found, f"{name} uses {sorted(set(found))}"
