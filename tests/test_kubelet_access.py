"""configz read straight from the kubelet with only `get nodes/configz`, against the fake API server
and a fake kubelet that authorises as pkg/kubelet/server/auth.go does; what the API server says the
identity may do (SelfSubjectAccessReview) as the report states it; pod listing scoped to namespaces."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from conformance.cluster.api import api_client, discover
from conformance.cluster.kubelet_access import access_report, can_i, configz_from_kubelet, kubelet_endpoint
from conformance.cluster.pods import gpu_pods
from conformance.config.kubernetes import KubeSpec, parse_spec
from conformance.errors import FactUnavailable
from tests.fakeapi import kubeconfig, node_object, pod_object, serve
from tests.fakekubelet import FakeKubelet, kubelet_pki, serve_kubelet
from tests.kube_fixtures import fake_api

LIVE = {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}


def _free_port() -> int:
    """A loopback port with nothing listening on it (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster(tmp_path):
    """Node gpu-a1 with a fine-grained kubelet, gpu-old with a kubelet whose KubeletFineGrainedAuthz is
    off, both on loopback with CA-signed serving certificates; gpu-self with a self-signed one."""
    api = fake_api()
    pki = kubelet_pki(tmp_path, ["127.0.0.1"])
    (tmp_path / "self").mkdir()
    self_signed = kubelet_pki(tmp_path / "self", ["127.0.0.1"], self_signed=True)
    kubelets = {n: FakeKubelet(api, n, fine_grained=n != "gpu-old") for n in ("gpu-a1", "gpu-old", "gpu-self")}
    with (
        serve(api) as url,
        serve_kubelet(kubelets["gpu-a1"], pki) as p1,
        serve_kubelet(kubelets["gpu-old"], pki) as p2,
        serve_kubelet(kubelets["gpu-self"], self_signed) as p3,
    ):
        for name, port in (("gpu-a1", p1), ("gpu-old", p2), ("gpu-self", p3)):
            api.add_node(node_object(name, gpus=8, internal_ip="127.0.0.1", kubelet_port=port), LIVE)
        api.add_node(node_object("gpu-gone", gpus=8, internal_ip="127.0.0.1", kubelet_port=_free_port()), LIVE)
        api.add_node(node_object("no-ip", gpus=8), LIVE)

        def client(token: str = "full-token"):
            path = tmp_path / f"kubeconfig-{token}"
            path.write_text(kubeconfig(url, token))
            return api_client(KubeSpec(kubeconfig=str(path)))

        yield api, kubelets, client, pki


def read(client, node: str, ca) -> dict:
    return configz_from_kubelet(client, kubelet_endpoint(client, node), str(ca) if ca else None)


def test_nodes_configz_alone_reads_the_kubelet(cluster):
    _, kubelets, client, pki = cluster
    assert read(client(), "gpu-a1", pki.ca) == LIVE
    assert kubelets["gpu-a1"].requests == [("system:serviceaccount:gpu-node-conformance:gpu-node-conformance", "/configz")]
    # the manifest's identity holds nodes/configz and not nodes/proxy: the least privilege that works
    assert can_i(client(), "get", "nodes", "configz") is True
    assert can_i(client(), "get", "nodes", "proxy") is False


def test_the_endpoint_is_the_nodes_internal_ip_and_daemon_port(cluster):
    api, _, client, _ = cluster
    port = api.nodes["gpu-a1"]["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    e = kubelet_endpoint(client(), "gpu-a1")
    assert (e.address, e.port, e.url("/configz")) == ("127.0.0.1", port, f"https://127.0.0.1:{port}/configz")
    # discovery reads the same from the node list, so discovered nodes need no GET of their own
    found = {d.name: d.kubelet for d in discover(client(), KubeSpec())}
    assert found["gpu-a1"] == e and found["no-ip"] is None
    with pytest.raises(FactUnavailable, match="node no-ip: its Node object has no InternalIP"):
        kubelet_endpoint(client(), "no-ip")


@pytest.mark.parametrize(
    ("token", "node", "message"),
    [
        # only the nodes role: the kubelet refuses, and the message names the grant and the feature gate
        ("limited-token", "gpu-a1", r"403 \(Forbidden \(user=system:serviceaccount:gpu-node-conformance:limited, verb=get, "
                                    r"resource=nodes, subresource\(s\)=\['configz', 'proxy'\]\)\): grant get on nodes/configz .*"
                                    r"KubeletFineGrainedAuthz .*1.33"),
        # a kubelet without the gate asks only for nodes/proxy: nodes/configz is not enough there
        ("full-token", "gpu-old", r"403 \(Forbidden .*subresource\(s\)=\['proxy'\]\).*use configz: proxy"),
    ],
)  # fmt: skip
def test_refusals_name_the_grant(cluster, token, node, message):
    _, _, client, pki = cluster
    with pytest.raises(FactUnavailable, match=message):
        read(client(token), node, pki.ca)


def test_an_old_kubelet_still_accepts_nodes_proxy(cluster):
    _, _, client, pki = cluster
    assert read(client("proxy-token"), "gpu-old", pki.ca) == LIVE


def test_the_serving_certificate_is_verified(cluster):
    _, kubelets, client, pki = cluster
    with pytest.raises(FactUnavailable, match=r"kubelet of node gpu-self at https://127.0.0.1:\d+/configz: its serving "
                                              r"certificate is not trusted .*set kubernetes.kubelet_ca"):  # fmt: skip
        read(client(), "gpu-self", pki.ca)
    assert kubelets["gpu-self"].requests == []  # the token never reached an unverified endpoint
    with pytest.raises(FactUnavailable, match=r"no CA to verify the kubelet's serving certificate: set kubernetes\.kubelet_ca"):
        read(client(), "gpu-a1", None)


def test_an_unreachable_kubelet_is_named(cluster):
    _, _, client, pki = cluster
    with pytest.raises(FactUnavailable, match=r"kubelet of node gpu-gone at https://127.0.0.1:\d+/configz: .*refused.*"
                                              r"must reach the kubelet port, or use configz: proxy"):  # fmt: skip
        read(client(), "gpu-gone", pki.ca)


def test_the_fake_kubelet_wants_credentials(cluster):
    api, _, _, pki = cluster
    import ssl

    port = api.nodes["gpu-a1"]["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    for headers in ({}, {"Authorization": "Bearer stolen-token"}):
        req = urllib.request.Request(f"https://127.0.0.1:{port}/configz", headers=headers)
        with pytest.raises(urllib.request.HTTPError) as e:
            urllib.request.urlopen(req, context=ctx, timeout=10)
        assert e.value.code == 401


def test_access_report_says_which_grant_was_used(cluster):
    _, _, client, _ = cluster
    assert access_report(client(), "kubelet", []) == [
        "kubelet configz: read from each kubelet, authorised by get nodes/configz (least privilege)",
        "daemons' releases: from each Node's nodeInfo while its Lease (kube-node-lease) is fresh",
        "pods/exec: granted in every namespace",
    ]
    proxy = access_report(client("proxy-token"), "proxy", [])
    assert proxy[0].startswith("kubelet configz: read through the API server's node proxy, authorised by get nodes/proxy: ")
    assert "exec into any container" in proxy[0] and len(proxy) == 2  # no pods/exec for this identity
    assert proxy[1].startswith("daemons' releases: the Node's nodeInfo is not used (no get leases in kube-node-lease")
    # the default mode with an identity that holds only nodes/proxy: it works (the kubelet falls back), and is warned
    fallback = access_report(client("proxy-token"), "kubelet", [])
    assert fallback[0].startswith("kubelet configz: read from each kubelet, authorised only by get nodes/proxy")
    assert fallback[1].startswith("WARNING: this identity holds get nodes/proxy")
    assert access_report(client("scoped-token"), "kubelet", ["inference", "training"])[2:] == [
        "pods/exec: pod checks look only in the profile's namespaces: inference (granted), training (not granted)",
    ]
    assert access_report(client(), "off", ["inference"])[0].startswith("kubelet configz: not read (configz: off)")


def test_the_fake_api_checks_the_review_it_is_sent(cluster):
    _, _, client, _ = cluster
    base = client().configuration.host
    body = json.dumps({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                       "spec": {"resourceAttributes": {"verb": "get", "resource": "nodes"}}}).encode()  # fmt: skip
    req = urllib.request.Request(f"{base}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", data=body, method="POST",
                                 headers={"Authorization": "Bearer full-token", "Content-Type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.request.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400


def test_pods_listed_only_in_the_profiles_namespaces(cluster):
    api, _, client, _ = cluster
    for ns in ("inference", "batch"):
        res = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
        api.add_pod(pod_object(ns, f"llm-{ns}", f"uid-{ns}", "gpu-a1", [{"name": "server", "resources": {"limits": res}}]))
    scoped = client("scoped-token")
    assert [p.name for p in gpu_pods(scoped, "gpu-a1", namespaces=["inference"])] == ["llm-inference"]
    with pytest.raises(FactUnavailable, match="lacks the RBAC permission list on pods "):
        gpu_pods(scoped, "gpu-a1")  # every namespace: this identity may not
    with pytest.raises(FactUnavailable, match="lacks the RBAC permission list on pods in namespace batch"):
        gpu_pods(scoped, "gpu-a1", namespaces=["inference", "batch"])
    assert sorted(p.name for p in gpu_pods(client(), "gpu-a1")) == ["llm-batch", "llm-inference"]


@pytest.mark.parametrize(
    ("value", "mode", "error"),
    [(None, "kubelet", None), (True, "kubelet", None), (False, "off", None), ("proxy", "proxy", None),
     ("direct", "off", "kubernetes.configz: 'direct' is not one of kubelet, proxy, off")],
)  # fmt: skip
def test_the_configz_setting(value, mode, error):
    errors: list[str] = []
    spec = parse_spec({} if value is None else {"configz": value}, errors)
    assert spec is not None and spec.configz == mode
    assert errors == ([error] if error else [])
