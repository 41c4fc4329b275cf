"""The kubelet's live configuration (configz through the API server) as the primary source of the
KUBELET-* checks, against the lab's nodes and the wire-level fake API server: discovery names the
nodes, configz decides and drift from the node's files is reported; without nodes/proxy permission
(403) the node's files decide and the results say so."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack

import pytest
import yaml

from conformance.facts.kubelet import UPSTREAM_DEFAULTS
from tests.fakeapi import kubeconfig, node_object, serve
from tests.fakekubelet import FakeKubelet, kubelet_pki, serve_kubelet
from tests.kube_fixtures import fake_api
from tests.lab.nodes import BAD_KUBELET_JSON, EXPECTED, GOOD_KUBELET, POD_CHECKS, SAMPLES

pytestmark = pytest.mark.lab
SAMPLE = json.loads((SAMPLES / "configz.kind.none-policies.aquasecurity-node-collector.json").read_text())["kubeletconfig"]


# What a kubelet whose files set no evictionHard reports (the v1beta1 default, DefaultEvictionHard); the
# kind sample's own thresholds (disk eviction off, no memory.available) belong to the kind node's files.
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}


def live(values: dict) -> dict:
    """A configz answer: the real sample's other fields, and the node's values for the checked keys."""
    base = {k: v for k, v in SAMPLE.items() if k not in UPSTREAM_DEFAULTS}
    base["evictionHard"] = DEFAULT_EVICTION_HARD
    return {**base, **{k: v for k, v in values.items() if k not in ("kind", "apiVersion")}}


GOOD_LIVE = live({**yaml.safe_load(GOOD_KUBELET), "topologyManagerPolicy": "single-numa-node"})
# bad-kubelet's file was edited to 30s, but the kubelet still runs with 10s: drift, and the live value decides
BAD_LIVE = live({**json.loads(BAD_KUBELET_JSON), "cpuManagerPolicy": "none", "cpuManagerReconcilePeriod": "10s"})
AUDITED = ("good", "bad-kubelet", "bad-runtime", "down")


@pytest.fixture(scope="module")
def cluster(lab, tmp_path_factory):
    api = fake_api()
    nodes = {n.spec.name: n for n in lab.nodes}
    pki = kubelet_pki(tmp_path_factory.mktemp("kubelet-pki"), [nodes[name].address for name in AUDITED])
    for name in AUDITED:
        # the lab's nodes have no GPUs: they are selected by label, as a pool is
        api.add_node(
            node_object(name, internal_ip=nodes[name].address, labels={"pool": "lab"}),
            BAD_LIVE if name == "bad-kubelet" else GOOD_LIVE,
        )
    api.add_node(node_object("cpu-only", internal_ip="198.18.0.1", labels={"pool": "other"}))  # not selected
    with ExitStack() as stack:
        for name in AUDITED:  # each kubelet at <InternalIP>:10250 inside the node's namespace ('down' has no sshd only)
            stack.enter_context(serve_kubelet(FakeKubelet(api, name), pki, nodes[name].address, 10250, nodes[name].netns))
        yield stack.enter_context(serve(api)), pki.ca, api


def audit(lab, cluster, token, tmp_path, mode="kubelet"):
    url, ca, _ = cluster
    (tmp_path / "kubeconfig").write_text(kubeconfig(url, token))
    inv = {
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "node_selector": "pool=lab", "configz": mode,
                       "kubelet_ca": str(ca)},
        "defaults": yaml.safe_load(lab.inventory())["defaults"],
    }  # fmt: skip
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--inventory", str(tmp_path / "inv.yaml"), "--output", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    doc = json.loads((out / "results.json").read_text())
    by: dict[str, dict[str, dict]] = {}
    for r in doc["results"]:
        by.setdefault(r["node"], {})[r["check"]] = r
    return p, doc, by


def test_configz_decides_and_drift_is_reported(lab, cluster, tmp_path):
    p, doc, by = audit(lab, cluster, "full-token", tmp_path)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == set(AUDITED), p.stderr[-2000:]
    assert nodes["bad-runtime"]["discovered"] == "label selector pool=lab"
    assert all(n["kubelet_config_source"] == "configz (from the kubelet)" for n in nodes.values())
    # deploy/rbac.yaml's identity: configz with nodes/configz alone, and the report says so
    assert doc["api_access"][0] == "kubelet configz: read from each kubelet, authorised by get nodes/configz (least privilege)"
    assert not any("nodes/proxy" in line for line in doc["api_access"])
    assert "authorised by get nodes/configz (least privilege)" in (tmp_path / "out" / "report.html").read_text()
    # the kubelets' addresses came with discovery's node list: each Node is fetched once, for its status (the daemons'
    # releases, issue 58), and nothing goes through the node proxy
    fetched = [path for _, _, path in cluster[2].requests if path.startswith("/api/v1/nodes/")]
    assert sorted(fetched) == sorted(f"/api/v1/nodes/{n}" for n in AUDITED), fetched
    assert by["good"]["KUBELET-CPU-POLICY"]["source"] == "live kubelet (configz)"
    # the live kubelet runs 10s: the check passes on the truth, and the drift from the file is in the result
    reconcile = by["bad-kubelet"]["KUBELET-CPU-RECONCILE"]
    assert reconcile["outcome"] == "passed"
    assert 'DRIFT: file /opt/k8s/kubelet.json (--config) says "30s"' in reconcile["source"]
    expected = dict(EXPECTED["bad-kubelet"], **{"KUBELET-CPU-RECONCILE": "passed"})
    assert {c: r["outcome"] for c, r in by["bad-kubelet"].items()} == expected
    for name in ("good", "bad-runtime"):
        assert {c: r["outcome"] for c, r in by[name].items()} == EXPECTED[name]
        assert not any("DRIFT" in r["source"] for r in by[name].values())
    # SSH to 'down' fails, yet its kubelet's live settings are judged from the API
    for check in ("KUBELET-CPU-POLICY", "KUBELET-TOPOLOGY-POLICY", "KUBELET-MEMORY-POLICY", "KUBELET-CPU-RECONCILE"):
        assert by["down"][check]["outcome"] == "passed", by["down"][check]["message"]
    assert nodes["down"]["verdict"] == "unreachable"


def test_without_nodes_configz_the_files_decide_and_say_so(lab, cluster, tmp_path):
    _, doc, by = audit(lab, cluster, "limited-token", tmp_path)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert "403 (Forbidden (user=system:serviceaccount:gpu-node-conformance:limited" in nodes["good"]["kubelet_config_source"]
    assert "grant get on nodes/configz" in nodes["good"]["kubelet_config_source"]
    for name in ("good", "bad-kubelet", "bad-runtime"):
        node_checks = {c: r["outcome"] for c, r in by[name].items() if c not in POD_CHECKS}
        assert node_checks == {c: o for c, o in EXPECTED[name].items() if c not in POD_CHECKS}
        # this identity may not list pods either: the pod checks say which permission is missing
        pods = [r for c, r in by[name].items() if c in POD_CHECKS]
        assert pods and all(r["outcome"] == "error" and "permission list on pods" in r["message"] for r in pods)
    assert by["good"]["KUBELET-TOPOLOGY-POLICY"]["source"].endswith("[fallback: configz unavailable]")
    assert by["down"]["KUBELET-CPU-POLICY"]["outcome"] == "error"


def test_the_nodes_proxy_fallback_works_and_is_warned(lab, cluster, tmp_path):
    _, doc, by = audit(lab, cluster, "proxy-token", tmp_path, mode="proxy")
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert all(n["kubelet_config_source"] == "configz (from the API proxy)" for n in nodes.values())
    assert by["bad-kubelet"]["KUBELET-CPU-RECONCILE"]["outcome"] == "passed"  # the live 10s decides, as above
    proxy = "kubelet configz: read through the API server's node proxy, authorised by get nodes/proxy"
    assert doc["api_access"][0].startswith(proxy)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<b>kubelet configz: read through the API server&#x27;s node proxy" in html
