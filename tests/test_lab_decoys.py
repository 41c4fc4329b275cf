"""Issue 50: the audit runs nothing a node's users control, and judges the real daemons.

A lab node whose real kubelet runs `cpuManagerPolicy: none` also runs decoys, started before its daemons:
programs named kubelet, containerd and crio in folders of /tmp owned by `nobody`, run as `nobody` (and one
kubelet run by root from such a folder). Each decoy's `--config` names a file only root may read, which says
`cpuManagerPolicy: static` (it would pass KUBELET-CPU-POLICY) and carries a marker. A decoy that is executed
leaves a line in /tmp/gnc-decoy-ran. Over SSH and in host-root mode (the collector below a host root, as the
in-cluster Job runs it with the host's PID namespace): nothing is executed, nothing root-only is copied, and
the real kubelet is the one judged."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.collection.bundle import Bundle, parse_wire
from conformance.collection.collect import collect_node, collector_script
from conformance.config.inventory import NodeSpec
from conformance.facts.node_facts import NodeFacts
from tests.conftest import require_or_skip
from tests.lab.builder import Decoy, Lab, lab_available
from tests.lab.nodes import GOOD_KUBELET, specs

pytestmark = pytest.mark.lab

SECRET = "GNC-ROOT-ONLY-7f3a9c"
ROOT_ONLY = {
    "/root/gnc-root-only.yaml": GOOD_KUBELET + f"# {SECRET}\n",  # cpuManagerPolicy: static
    "/root/gnc-root-only.toml": f"# {SECRET}\nversion = 3\n",
    "/root/gnc-root-only.conf": f'# {SECRET}\n[crio.runtime]\ncgroup_manager = "systemd"\n',
    "/root/gnc-root-state/cpu_manager_state": f'{{"policyName": "static", "{SECRET}": 1}}',
}
KUBELET_DECOY = ("--config", "/root/gnc-root-only.yaml", "--root-dir", "/root/gnc-root-state")
DECOYS = [
    Decoy("kubelet", KUBELET_DECOY),  # a user's program, run by the user
    Decoy("kubelet", KUBELET_DECOY, uid=0),  # a user's program, run by root (from the user's folder)
    Decoy("containerd", ("--config", "/root/gnc-root-only.toml")),
    Decoy("crio", ("--config", "/root/gnc-root-only.conf", "--config-dir", "/root/gnc-root-state")),
]


@pytest.fixture(scope="module")
def decoy_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("decoylab")), first_subnet=244)
    node = next(s for s in specs() if s.name == "good")
    node.name = "decoyed"
    node.files = {
        **node.files,
        "/etc/kubernetes/kubelet-config.yaml": GOOD_KUBELET.replace("cpuManagerPolicy: static", "cpuManagerPolicy: none"),
        **ROOT_ONLY,
    }
    node.modes = {**node.modes, **{p: 0o600 for p in ROOT_ONLY}, "/root/gnc-root-state": 0o700}
    node.decoys = list(DECOYS)
    lab.add(node)
    with lab.running():
        yield lab


def _over_ssh(lab: Lab) -> Bundle:
    node = lab.nodes[0]
    ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
    return collect_node(NodeSpec(name="decoyed", address=node.address, ssh=ssh), timeout=120, retries=0)


def _host_root(lab: Lab) -> Bundle:
    """The collector as the in-cluster Job runs it: below a host root (the node's / bound at /mnt/hr in a
    mount namespace of its own), seeing the node's processes through the host root's /proc."""
    script = "mount -t tmpfs -o size=1m gnc /mnt && mkdir /mnt/hr && mount --rbind / /mnt/hr && exec sh -s -- /mnt/hr 4194304"
    argv = ["nsenter", "-t", str(lab.node_pid("decoyed")), "-m", "-p", "--", "unshare", "-m", "sh", "-c", script]
    out = subprocess.run(argv, input=collector_script(), capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return parse_wire("decoyed", out.stdout, 4194304)


def _ran(lab: Lab) -> str:
    f = lab.nodes[0].dir / "upper" / "tmp" / "gnc-decoy-ran"
    return f.read_text() if f.exists() else ""


@pytest.mark.parametrize("mode", ["ssh", "host-root"])
def test_decoys_are_never_run_never_read_and_never_judged(decoy_lab, mode):
    b = _over_ssh(decoy_lab) if mode == "ssh" else _host_root(decoy_lab)
    assert b.error is None and b.complete, b.error
    # nothing a user wrote was executed, by the user's name or the root-run copy
    assert _ran(decoy_lab) == "", f"the audit executed a decoy: {_ran(decoy_lab)}"
    # nothing only root may read reached the records because a decoy named it
    text = json.dumps(b.to_json())
    assert SECRET not in text, "a root-only file named by a decoy was copied into the snapshot"
    for path in ROOT_ONLY:
        assert b.file(path) is None, f"{path} was read because a decoy named it"
    facts = NodeFacts(b)
    # the real kubelet is judged: its own file says cpuManagerPolicy none
    assert facts.kubelet_args.config == "/etc/kubernetes/kubelet-config.yaml"
    assert facts.kubelet_config.get("cpuManagerPolicy").value == "none"
    # the decoys are recorded, each with why it is not a daemon; the real ones are the only daemons
    daemons = {comm: b.daemons(comm) for comm in ("kubelet", "containerd", "crio")}
    refused = sorted((d.comm, d.why) for ds in daemons.values() for d in ds if not d.trusted)
    assert [c for c, _ in refused] == ["containerd", "crio", "kubelet", "kubelet"], refused
    assert sum("it runs as uid 65534" in why for _, why in refused) == 3, refused
    # the root-run copy: root, but from a program its user can replace
    assert sum("can be written by a user other than root" in why for _, why in refused) == 1, refused
    assert [d.pid for d in daemons["kubelet"] if d.trusted] == [facts.kubelet_pid]
    assert [d.exe for d in daemons["containerd"] if d.trusted] == ["/opt/gnc-lab/containerd"]
    assert not [d for d in daemons["crio"] if d.trusted]


def test_a_decoyed_node_fails_the_cpu_policy_as_its_real_kubelet_runs(decoy_lab, tmp_path):
    """End to end through the CLI: KUBELET-CPU-POLICY fails on the real kubelet's `none`."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text(decoy_lab.inventory())
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--inventory", str(inv), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 1), p.stdout + p.stderr
    results = json.loads((out / "results.json").read_text())["results"]
    cpu = [r for r in results if r["check"] == "KUBELET-CPU-POLICY"]
    assert [r["outcome"] for r in cpu] == ["failed"], cpu
    assert "none" in cpu[0]["message"]
    assert _ran(decoy_lab) == ""
    assert SECRET not in "".join(f.read_text(errors="replace") for f in out.rglob("*") if f.is_file())


# Issue 59 item 3: a user's processes named kubelet with argv of several MiB each. Before, every candidate's
# /proc/PID/cmdline was read and shipped before the trust decision: five such decoys grew one node's output from
# 10 KB to 28 MB. Now only a verified daemon's command line is read.
BIG_ARG = "x" * 120_000  # each argument below MAX_ARG_STRLEN (32 pages); 30 of them: 3.6 MB of argv
BIG_DECOYS = [Decoy("kubelet", tuple([BIG_ARG] * 30)) for _ in range(5)]


@pytest.fixture(scope="module")
def big_decoy_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("bigdecoylab")), first_subnet=247)
    good = next(s for s in specs() if s.name == "good")
    plain = replace(good, name="plain")
    lab.add(plain)
    lab.add(replace(good, name="big-decoys", decoys=list(BIG_DECOYS), stack_kib=65536))
    with lab.running():
        yield lab


def test_large_decoys_add_little_to_the_output(big_decoy_lab):
    lab = big_decoy_lab
    sizes = {}
    for node in lab.nodes:
        ssh = {"user": "root", "identity_file": str(lab.client_key), "known_hosts": str(lab.known_hosts)}
        b = collect_node(NodeSpec(name=node.spec.name, address=node.address, ssh=ssh), timeout=120, retries=0)
        assert b.error is None and b.complete, b.error
        sizes[node.spec.name] = len(json.dumps(b.to_json()))
        if node.spec.name == "big-decoys":
            decoys = [d for d in b.daemons("kubelet") if not d.trusted]
            assert len(decoys) == 5 and all("it runs as uid 65534" in d.why for d in decoys), decoys
            assert all(b.file(f"/proc/{d.pid}/cmdline") is None for d in decoys)  # never read
            # the decoys really carry their argv (read here, as root, from this machine's side)
            pids = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
            big = [p for p in pids if _argv_size(p) > 3_000_000]
            assert len(big) >= 5, [_argv_size(p) for p in pids]
    assert sizes["big-decoys"] - sizes["plain"] < 100_000, sizes


def _argv_size(proc: Path) -> int:
    try:
        return len((proc / "cmdline").read_bytes())
    except OSError:
        return 0
