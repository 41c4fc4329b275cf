"""The `conformance` command through the local transport against a host root laid out in a
temporary folder: the real collector runs as `sh -s`, no root needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.fakeroot import make_host_root
from tests.lab.nodes import ALL_CHECKS, GOOD_CPU_STATE, GPU_CHECKS, MEMORY_STATE, POD_CHECKS

ROOT = Path(__file__).resolve().parent.parent
RESULTS_SCHEMA = json.loads((ROOT / "conformance" / "outputs" / "results.schema.json").read_text())
HOSTILE = "<img src=x onerror=alert(1)>"

KUBELET = f"""\
kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
cpuManagerPolicy: "{HOSTILE}"
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
"""


def conformance(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture
def host_root(tmp_path):
    return sample_host_root(tmp_path / "host")


def sample_host_root(root: Path) -> Path:
    """A node's files below a folder, as the local transport reads them with --host-root."""
    return make_host_root(
        root,
        # a relative --config resolves against the kubelet's working directory
        ["--config", "kubelet.yaml", "--topology-manager-policy=single-numa-node"],
        {
            "/kubelet-cwd/kubelet.yaml": KUBELET,
            "/var/lib/kubelet/cpu_manager_state": GOOD_CPU_STATE,
            "/var/lib/kubelet/memory_manager_state": MEMORY_STATE,
            # no containerd runs here: the file must mean the same to every release (runtime_type set: 1.x
            # would otherwise decode runc without one)
            "/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            'runtime_type = "io.containerd.runc.v2"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.'
            "runc.options]\nSystemdCgroup = true\n",
            "/proc/sys/net/ipv4/tcp_tw_reuse": "1\n",
            "/proc/sys/net/core/somaxconn": "4096\n",
            "/proc/sys/net/ipv4/ip_local_port_range": "1024\t65535\n",
            "/proc/sys/net/ipv4/ip_local_reserved_ports": "\n",
            "/sys/devices/system/cpu/online": "0-3\n",
            "/sys/devices/system/node/node0/cpulist": "0-3\n",
            **{f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": f"{c % 2},{c % 2 + 2}\n" for c in range(4)},
            "/sys/block/nvme0n1/queue/scheduler": "[none] mq-deadline\n",
        },
    )


def test_checks_lists_every_check_of_checks_md():
    p = conformance("checks")
    assert p.returncode == 0
    assert sorted(line.split()[0] for line in p.stdout.splitlines()) == sorted(
        [*ALL_CHECKS, *GPU_CHECKS, *POD_CHECKS, "LATENCY-JITTER"]
    )
    doc = json.loads(conformance("checks", "--json").stdout)
    assert all(c["rationale"] and c["remediation"] for c in doc)


@pytest.mark.parametrize("command", [[], ["run"], ["collect"], ["checks"]])
def test_help_has_examples(command):
    p = conformance(*command, "--help")
    assert p.returncode == 0 and "example" in p.stdout


def test_bad_inventory_exits_4_naming_the_field(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - name: a\n    address: 10.0.0.1\n    ssh: {port: nope}\n")
    p = conformance("run", "--inventory", str(inv), "--output", str(tmp_path / "out"))
    assert p.returncode == 4
    assert f"{inv}: invalid inventory" in p.stderr + p.stdout
    assert "nodes[0] (a).ssh.port: must be a integer" in p.stderr + p.stdout
    assert conformance("run", "--profile", "no-such", "--output", str(tmp_path / "o2")).returncode == 4


def test_local_run_with_host_root(host_root, tmp_path):
    out = tmp_path / "out"
    p = conformance("run", "--host-root", str(host_root), "--output", str(out))
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads((out / "results.json").read_text())
    jsonschema.validate(doc, RESULTS_SCHEMA)
    got = {r["check"]: r for r in doc["results"]}
    assert set(got) == {*ALL_CHECKS, *GPU_CHECKS, *POD_CHECKS, "LATENCY-JITTER"}
    assert got["LATENCY-JITTER"]["outcome"] == "skipped"
    assert got["KUBELET-TOPOLOGY-POLICY"]["outcome"] == "passed"
    assert got["KUBELET-TOPOLOGY-POLICY"]["source"] == "flag --topology-manager-policy"
    assert got["KUBELET-CPU-POLICY"]["outcome"] == "failed"
    assert "file /kubelet-cwd/kubelet.yaml (--config)" in got["KUBELET-CPU-POLICY"]["message"]
    assert got["SYSCTL-SOMAXCONN"]["outcome"] == "failed"
    assert got["SYSCTL-TCP-TW-REUSE"]["outcome"] == "passed"
    assert got["SYSCTL-PORT-RANGE"]["outcome"] == "failed"  # NodePorts not reserved
    assert got["RUNTIME-SYSTEMD-CGROUP"]["outcome"] == "passed"
    assert got["NODE-NUMA-TOPOLOGY"]["outcome"] == "passed"
    assert got["NODE-NVME-SCHEDULER"]["outcome"] == "passed"
    # the temporary folder is not a cgroup filesystem: an error naming what stat printed, never a pass
    assert got["NODE-CGROUP-V2"]["outcome"] == "error"
    assert "neither cgroup2fs nor tmpfs" in got["NODE-CGROUP-V2"]["message"]
    for name in ("report.html", "junit.xml", "results.json"):
        assert (out / name).stat().st_size > 0
    html = (out / "report.html").read_text()
    assert HOSTILE not in html  # the hostile value is present only escaped
    assert "&lt;img src=x onerror=alert(1)&gt;" in html or "&amp;lt;img" in html


def test_same_snapshot_same_verdicts(host_root, tmp_path):
    snap = tmp_path / "snap"
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - name: n1\n    transport: local\n    host_root: {host_root}\n")
    assert conformance("collect", "--inventory", str(inv), "--output", str(snap)).returncode == 0
    runs = []
    for i in range(2):
        conformance("run", "--snapshot", str(snap), "--output", str(tmp_path / f"r{i}"))
        doc = json.loads((tmp_path / f"r{i}" / "results.json").read_text())
        runs.append(sorted((r["node"], r["check"], r["outcome"], r["message"]) for r in doc["results"]))
    assert runs[0] == runs[1] and len(runs[0]) == len(ALL_CHECKS) + len(GPU_CHECKS) + len(POD_CHECKS) + 1


@pytest.mark.slow  # the suites under plain pytest, a run of their own
def test_plain_pytest_works(host_root, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - name: n1\n    transport: local\n    host_root: {host_root}\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "suites"),
            "--inventory",
            str(inv),
            f"--html={tmp_path / 'r.html'}",
            "--self-contained-html",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 1, p.stdout[-2000:]
    assert "failed" in p.stdout and "error" in p.stdout
    assert (tmp_path / "r.html").is_file()
    assert "test_cpu_manager_policy[n1]" in (tmp_path / "r.html").read_text()


def test_metacharacters_in_host_root_never_run(tmp_path):
    weird = tmp_path / "h$(touch pwned-a) `touch pwned-b`;touch pwned-c"
    host = make_host_root(weird, ["--config", "/k.yaml"], {"/k.yaml": "kind: KubeletConfiguration\n"})
    out = tmp_path / "out"
    p = conformance("run", "--host-root", str(host), "--output", str(out), cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert not list(tmp_path.rglob("pwned-*")) and not list(Path("/tmp").glob("pwned-*"))
    doc = json.loads((out / "results.json").read_text())
    assert {r["check"]: r["outcome"] for r in doc["results"]}["KUBELET-CPU-POLICY"] == "failed"  # the file was read


def test_a_node_without_a_tool_the_collector_needs_is_an_error_naming_it(tmp_path, monkeypatch):
    """A minimal image (awk missing, as in a distroless base) gives one clear error, not silently
    missing facts."""
    import shutil

    from conformance.collection.collect import collect_node
    from conformance.config.inventory import NodeSpec

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sh", "base64", "head", "tr", "cut", "stat", "readlink", "dirname", "uname", "cat"):
        (bindir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bindir))
    b = collect_node(NodeSpec(name="minimal", transport="local"), retries=0)
    assert b.error_kind == "error" and "missing: awk" in b.error and b.error.startswith("collector exited 3")


def test_a_fleet_of_one_is_not_judged_for_drift(host_root, tmp_path):
    """Issue 54 item 10: README command 1 audits one machine: FLEET-CONSISTENT is skipped saying why (no peer, no
    pin), and the page draws no drift table of one node."""
    out = tmp_path / "out"
    conformance("run", "--host-root", str(host_root), "--output", str(out))
    doc = json.loads((out / "results.json").read_text())
    (r,) = [r for r in doc["results"] if r["check"] == "FLEET-CONSISTENT"]
    assert r["outcome"] == "skipped" and "a fleet of one has no peer to drift from" in r["message"], r
    assert "id='gnc-drift'" not in (out / "report.html").read_text()
