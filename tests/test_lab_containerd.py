"""The running containerd's release is the one the node's package database records for the package that
owns its executable (the binary is never run, issue 50): a containerd no package owns, or one replaced on
disk since it started, has no known release, and its files are then judged under the rules of every release
(the result says so). A release from a real distribution's version decides how relative import globs are
matched: the collector expands them against the daemon's working directory too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.facts.node_facts import NodeFacts
from tests.conftest import require_or_skip
from tests.lab.builder import Lab, lab_available
from tests.lab.nodes import specs

pytestmark = pytest.mark.lab


REAL_CONTAINERD = shutil.which("containerd")
RUNC = """[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = {}
"""
# A relative import glob: containerd before 1.6.29 matches it against its working directory (resolveImports)
RELATIVE_GLOB = {
    "/etc/containerd/config.toml": 'version = 2\nimports = ["conf.d/*.toml"]\n' + RUNC.format("true"),
    "/etc/containerd/conf.d/50-cgroupfs.toml": "version = 2\n" + RUNC.format("false"),
}


@pytest.fixture(scope="module")
def containerd_lab(tmp_path_factory):
    require_or_skip(lab_available())
    require_or_skip(None if REAL_CONTAINERD else "the real containerd binary is not installed (apt-get install containerd)")
    assert REAL_CONTAINERD is not None
    # The stand-ins answer --version with what the real binary here (Debian's 1.6.20) prints
    real = subprocess.run([REAL_CONTAINERD, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    lab = Lab(Path(tmp_path_factory.mktemp("containerdlab")), first_subnet=236)  # 236-238: the GPU lab holds 240-243
    spec = next(s for s in specs() if s.name == "containerd2")
    spec.name, spec.containerd = "hung-containerd", "hang"
    lab.add(spec)
    for name, cwd in (("deb-cwd-root", "/"), ("deb-cwd-etc", "/etc/containerd")):
        node = next(s for s in specs() if s.name == "good")
        node.name, node.containerd, node.containerd_cwd = name, real, cwd
        node.files = {**node.files, **RELATIVE_GLOB}
        del node.files["/etc/containerd/conf.d/99-nvidia.toml"]
        lab.add(node)
    with lab.running():
        yield lab


def _collect(lab, name):
    node = next(n for n in lab.nodes if n.spec.name == name)
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    return collect_node(NodeSpec(name=name, address=node.address, ssh=ssh), timeout=120, retries=0)


def test_a_containerd_no_package_owns_has_no_known_release(containerd_lab):
    b = _collect(containerd_lab, "hung-containerd")
    assert b.error is None and b.complete, b.error
    asked = b.optional_command("containerd-package")
    assert asked is not None and asked.status == "unowned"  # installed by hand: only running it would tell
    facts = NodeFacts(b)
    assert facts.containerd_release is None
    rc = facts.runtime_config
    assert rc.rules.startswith("containerd's release unknown")
    # a drop-in with only the nvidia handler: 2.x deep-merges it, 1.x loses runc (the default) and refuses
    got = {label: str(alt) if isinstance(alt, Exception) else "reads" for label, alt in rc.alternatives.items()}
    assert (
        got["containerd 2.0-2.2"] == "reads"
        and "names no handler" in got["containerd 1.6.32 and later 1.6, 1.7.17 and later 1.7"]
    )


@pytest.mark.parametrize(("name", "systemd"), [("deb-cwd-root", True), ("deb-cwd-etc", False)])
def test_a_relative_glob_is_matched_where_the_running_release_matches_it(containerd_lab, name, systemd):
    facts = NodeFacts(_collect(containerd_lab, name))
    assert str(facts.containerd_release) == "1.6.20"  # Debian's "1.6.20~ds1"
    rc = facts.runtime_config
    assert rc.rules.startswith("containerd 1.6.20: 1.x merge rules (containerd 1.x before 1.6.29")
    assert rc.handlers["runc"].systemd_cgroup is systemd
    assert ("/etc/containerd/conf.d/50-cgroupfs.toml" in rc.files) is (not systemd)


def test_the_release_is_read_from_the_package_of_the_running_binary(lab):
    node = next(n for n in lab.nodes if n.spec.name == "containerd2")
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    b = collect_node(NodeSpec(name="containerd2", address=node.address, ssh=ssh), retries=0)
    facts = NodeFacts(b)
    assert str(facts.containerd_release) == "2.0.0"
    assert facts.runtime_config.rules == "containerd 2.0.0: 2.0-2.2 merge rules (containerd 2.0-2.2)"
    assert facts.runtime_config.handlers["runc"].systemd_cgroup is True


def test_an_upgraded_binary_on_disk_does_not_answer_for_the_running_daemon(containerd_lab):
    """A package upgrade replaces containerd's file under the running daemon (a rename over it: the daemon's
    executable is now deleted) and records the new file's digest. The package database then describes the new file,
    not the one that runs: the running file's digest (read through /proc/PID/exe) is not the recorded one, and the
    running release is unknown (restart it), never the new package's. A reinstall of the same file would match."""
    lab = containerd_lab
    name = "deb-cwd-root"
    q = "/opt/gnc-lab"
    running = _collect(lab, name)
    before = str(NodeFacts(running).containerd_release)
    assert before.startswith("1.6"), before
    # as dpkg upgrades: the new file renamed over the old, then its digest written to the package's md5sums
    swap = (f"cp {q}/containerd {q}/containerd.new && printf 'upgraded\\n' >> {q}/containerd.new && "
            f"mv {q}/containerd.new {q}/containerd && "
            f"echo \"$(md5sum < {q}/containerd | cut -d' ' -f1)  opt/gnc-lab/containerd\" "
            "> /var/lib/dpkg/info/containerd.io.md5sums")  # fmt: skip
    subprocess.run(["nsenter", "-t", str(lab.node_pid(name)), "-m", "--", "sh", "-c", swap], check=True, timeout=60)
    after = _collect(lab, name)
    assert after.optional_command("containerd-package").status == "0"
    proof = after.meta("containerd-package-proof").data.decode().split()
    assert proof[0] == "digest" and proof[2] != proof[3], proof  # the running file is not the one the package records
    assert NodeFacts(after).containerd_release is None
    (daemon,) = after.daemons("containerd")
    assert daemon.trusted and daemon.exe == f"{q}/containerd (deleted)", daemon  # still root's: still the daemon
