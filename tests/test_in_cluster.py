"""In-cluster mode: the manifests (validated strictly against the Kubernetes client's models, and for
the properties that matter), the pod log as the results channel, `conformance merge`, the
Containerfile (checked statically: no registry is reachable here) and the CI templates."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.cluster.manifests import RESULTS_BEGIN, build, results_in_log
from tests.k8s_models import problems
from tests.test_cli_local import sample_host_root

ROOT = Path(__file__).resolve().parent.parent


def conformance(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=timeout)


def manifests(*args: str) -> list[dict]:
    p = conformance("manifests", *args)
    assert p.returncode == 0, p.stderr
    return list(yaml.safe_load_all(p.stdout))


def test_jobs_validate_against_the_api_models():
    objs = manifests("--node", "gpu-a1", "--node", "GPU_B2.example", "--image", "reg.example/gnc:1", "--runtime-class", "nvidia")
    assert [o["kind"] for o in objs] == ["Namespace", "ServiceAccount", "Job", "Job"]
    for o in objs:
        assert problems(o) == [], o["kind"]
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Job"]
    assert len(set(names)) == 2 and all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in names)


def test_daemonset_validates_and_keeps_running():
    objs = manifests("--daemonset", "--image", "reg.example/gnc:1")
    ds = objs[-1]
    assert ds["kind"] == "DaemonSet" and problems(ds) == []
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:2] == ["sh", "-c"] and "exec sleep infinity" in c["command"][2]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_the_validator_rejects_what_the_api_rejects():
    job = build(["n"])[2]
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert problems(job) == ["Job.spec.template.spec.containers[0].imagePullPolicyy: unknown field in V1Container"]
    job = build(["n"])[2]
    job["spec"]["backoffLimit"] = "none"
    assert problems(job) == ["Job.spec.backoffLimit: 'none' is not int"]
    job = build(["n"])[2]
    del job["spec"]["template"]["spec"]["containers"][0]["name"]
    assert any("name" in p for p in problems(job))


def test_pod_properties_that_matter():
    job = build(["gpu-a1"], image="i")[2]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-a1" and pod["restartPolicy"] == "Never"
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    assert pod["automountServiceAccountToken"] is False
    assert {"operator": "Exists"} in pod["tolerations"]
    (c,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/host"]["readOnly"] is True
    host = next(v for v in pod["volumes"] if v["name"] == "host")
    assert host["hostPath"]["path"] == "/"
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and set(sc["capabilities"]["add"]) == {"DAC_READ_SEARCH", "SYS_PTRACE"}
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"} and "memory" in c["resources"]["limits"]
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])  # the audit never takes a GPU from workloads
    assert c["command"][:5] == ["conformance", "run", "--host-root", "/host", "--output"] and "--print-results" in c["command"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0


def test_manifests_need_nodes():
    p = conformance("manifests")
    assert p.returncode == 4 and "--node" in p.stderr


@pytest.fixture(scope="module")
def pod_logs(tmp_path_factory):
    """What audit pods print (the real `conformance run --print-results`, local transport, a host root
    each), as `kubectl logs` returns them; node-a ran twice (a rerun), so its log holds two documents."""
    d = tmp_path_factory.mktemp("logs")
    logs = d / "logs"
    logs.mkdir()
    for node, run in (("node-a", 1), ("node-a", 2), ("node-b", 1)):
        root = sample_host_root(d / f"{node}-{run}-root")
        p = subprocess.run(
            [sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--output", str(d / f"out-{node}-{run}"),
             "--print-results"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "GNC_NODE_NAME": node},
        )  # fmt: skip
        assert RESULTS_BEGIN in p.stdout, p.stderr
        with (logs / f"{node}.log").open("a") as f:
            f.write(p.stdout)
    return logs


def test_merge_pod_logs_deduplicates_reruns_and_marks_missing_nodes(pod_logs, tmp_path):
    assert len(results_in_log((pod_logs / "node-a.log").read_text())) == 2
    (tmp_path / "nodes.txt").write_text("node-a\nnode-b\nnode-c\n")
    out = tmp_path / "merged"
    p = conformance("merge", str(pod_logs), "--expect", f"@{tmp_path / 'nodes.txt'}", "--output", str(out))
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads((out / "results.json").read_text())
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    assert verdicts == {"node-a": "rejected", "node-b": "rejected", "node-c": "incomplete"}
    node_c = next(n for n in doc["nodes"] if n["name"] == "node-c")
    assert "did not finish" in node_c["collection"]["error"]
    per_node = {}
    for r in doc["results"]:
        per_node.setdefault(r["node"], []).append(r["check"])
    assert len(per_node["node-a"]) == len(set(per_node["node-a"])) == len(per_node["node-b"])  # the rerun replaced run 1
    for f in ("report.html", "junit.xml", "results.prom"):
        assert (out / f).is_file()
    assert "node-c" in (out / "report.html").read_text()
    assert 'node="node-c"' in (out / "results.prom").read_text()


def test_merge_without_results_is_a_usage_error(tmp_path):
    (tmp_path / "empty.log").write_text("no markers here\n")
    p = conformance("merge", str(tmp_path))
    assert p.returncode == 4 and "no results found" in p.stderr


def test_containerfile_is_consistent_with_the_repository():
    text = (ROOT / "Containerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0].startswith("FROM ")
    for ln in lines:
        if ln.startswith("COPY ") and "--from=" not in ln:
            *sources, _dest = shlex.split(ln)[1:]
            for s in sources:
                assert (ROOT / s).exists(), f"Containerfile copies {s}, which is not in the repository"
    assert [ln.split()[0] for ln in lines].count("FROM") == 2  # a build stage, then the image
    runs = [ln for ln in lines if ln.startswith("RUN ")]
    assert "pip wheel" in runs[0] and "/src" in runs[0]
    # the image installs the wheel (what users install, and what the tests install and run), never /src
    assert (
        "pip install" in runs[-1] and "/dist/*.whl" in runs[-1] and "/src" not in runs[-1] and "conformance --version" in runs[-1]
    )
    assert "COPY --from=wheel /dist /dist" in lines
    # below a host root the collector reads the node's records with the image's own programs (issue 58)
    tools = next(ln for ln in runs if "apt-get install" in ln)
    assert "rpm" in tools.split() and "systemd" in tools.split(), tools
    cmd = json.loads(next(ln for ln in lines if ln.startswith("CMD "))[4:])
    assert cmd[:2] == ["conformance", "run"] and "--host-root" in cmd
    assert cmd == build(["n"])[2]["spec"]["template"]["spec"]["containers"][0]["command"]  # the Job runs the image's command
    # the stage copies what the build needs: the packaging files and every package tree
    copied = {s for ln in lines if ln.startswith("COPY ") and "--from" not in ln for s in shlex.split(ln)[1:-1]}
    assert {"pyproject.toml", "MANIFEST.in", "README.md", "conformance", "suites"} <= copied


def test_ci_templates_parse_and_the_cronjob_validates():
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        doc = yaml.safe_load((ROOT / "examples" / name).read_text())
        assert "conformance run --inventory" in json.dumps(doc) and "junit.xml" in json.dumps(doc)
    for name in ("cronjob.yaml", "cronjob-rbac.yaml"):
        for obj in yaml.safe_load_all((ROOT / "examples" / name).read_text()):
            assert problems(obj) == [], (name, obj["kind"])


@pytest.mark.slow  # merge, report and run end to end
def test_merge_report_and_run_leave_nothing_in_the_temporary_directory(pod_logs, tmp_path):
    """Nothing the tool creates outlives it: the merge's working document included, after a normal end, an
    error, and SIGTERM in the middle of the report session (a cancelled CI job)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300, env=env)

    out = tmp_path / "out"
    assert run("merge", str(pod_logs), "--output", str(out / "merged")).returncode == 1
    assert run("report", str(out / "merged" / "results.json"), "--output", str(out / "report")).returncode == 1
    root = sample_host_root(tmp_path / "root")
    assert run("run", "--host-root", str(root), "--output", str(out / "run")).returncode == 1
    assert run("merge", str(tmp_path / "no-such-folder")).returncode == 4
    assert sorted(p.name for p in tmp.iterdir()) == []
    # SIGTERM while the report session reads the sources (what it keeps of them is in unlinked files)
    p = subprocess.Popen([sys.executable, "-m", "conformance", "merge", str(pod_logs), "--output", str(out / "term")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    assert p.stdout is not None
    for line in p.stdout:  # "merging the results documents in ..." comes as the report session starts
        if line.startswith("merging"):
            break
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=300)
    assert sorted(p.name for p in tmp.iterdir()) == []


def test_merge_of_a_combined_log_names_the_node_whose_block_was_cut(pod_logs, tmp_path):
    """Issue 53.14: `kubectl logs -l ... > all.log` whose first block is cut (truncated mid-document, the next
    pod's block following): the cut node is named with the file and that its block was cut, not as a node whose
    Job never finished."""
    a = (pod_logs / "node-a.log").read_text()
    b = (pod_logs / "node-b.log").read_text()
    begin = a.rfind(RESULTS_BEGIN)
    cut_a = a[: a.index('"results"', begin)]  # node-a's last block, cut after its node entries
    assert '"name": "node-a"' in cut_a[begin:] or '"name":"node-a"' in cut_a[begin:]
    combined = tmp_path / "logs" / "all.log"
    combined.parent.mkdir()
    combined.write_text(cut_a[begin:] + "\n" + b)
    (tmp_path / "nodes.txt").write_text("node-a\nnode-b\n")
    out = tmp_path / "merged"
    p = conformance("merge", str(combined.parent), "--expect", f"@{tmp_path / 'nodes.txt'}", "--output", str(out))
    doc = json.loads((out / "results.json").read_text())
    node_a = next(n for n in doc["nodes"] if n["name"] == "node-a")
    assert node_a["verdict"] == "incomplete", p.stdout + p.stderr
    assert f"{combined}: results block 1 was cut short" in node_a["collection"]["error"]
    assert "did not finish" not in node_a["collection"]["error"]
