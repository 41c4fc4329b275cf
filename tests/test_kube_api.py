"""The Kubernetes API side through the official client against the wire-level fake: discovery,
configz reading, and every failure named (403 with the missing permission, 401, 404, 5xx)."""

from __future__ import annotations

import pytest
from kubernetes import client

from conformance.cluster.api import api_client, configz, dcgm_metrics, discover, runtime_class_handlers
from conformance.cluster.dcgm import metric_series
from conformance.config.inventory import load_inventory, merge_discovered
from conformance.config.kubernetes import KubeSpec
from conformance.errors import FactUnavailable, UsageError
from tests.fakeapi import kubeconfig, node_object, pod_object, serve
from tests.httpservers import dcgm_metrics as dcgm_text
from tests.kube_fixtures import fake_api


@pytest.fixture
def cluster(tmp_path):
    api = fake_api()
    api.add_node(node_object("gpu-a1", gpus=8, internal_ip="10.0.0.11", labels={"pool": "h100"}), {"cpuManagerPolicy": "static"})
    api.add_node(node_object("gpu-a2", gpus=8, internal_ip="10.0.0.12", labels={"pool": "a100"}), 500)
    api.add_node(node_object("cpu-b1", internal_ip="10.0.0.21", labels={"pool": "cpu"}))
    with serve(api) as url:

        def spec(token: str = "full-token", **kw) -> KubeSpec:
            path = tmp_path / f"kubeconfig-{token}"
            path.write_text(kubeconfig(url, token))
            return KubeSpec(kubeconfig=str(path), **kw)

        yield api, spec


def test_discovery_takes_nodes_with_gpu_capacity(cluster):
    _, spec = cluster
    found = discover(api_client(spec()), spec())
    assert [(d.name, d.internal_ip, d.gpus, d.why) for d in found] == [
        ("gpu-a1", "10.0.0.11", 8, "nvidia.com/gpu capacity 8"),
        ("gpu-a2", "10.0.0.12", 8, "nvidia.com/gpu capacity 8"),
    ]
    assert found[0].labels["pool"] == "h100"


def test_discovery_by_label_selector(cluster):
    _, spec = cluster
    s = spec(node_selector="pool=cpu")
    assert [d.name for d in discover(api_client(s), s)] == ["cpu-b1"]


def test_a_bad_label_selector_is_a_usage_error_from_the_server(cluster):
    _, spec = cluster
    s = spec(node_selector="pool in (a")
    with pytest.raises(UsageError, match="list nodes failed with HTTP 400"):
        discover(api_client(s), s)


def test_discovery_without_permission_names_it(cluster):
    _, spec = cluster
    s = spec("nobody-token")
    with pytest.raises(UsageError, match=r"lacks the RBAC permission list on nodes .*cannot list resource \"nodes\""):
        discover(api_client(s), s)


def test_unknown_credentials(cluster):
    _, spec = cluster
    s = spec("stolen-token")
    with pytest.raises(UsageError, match="401 Unauthorized"):
        discover(api_client(s), s)


def test_configz_through_the_proxy_is_read_raw(cluster):
    _, spec = cluster
    assert configz(api_client(spec("proxy-token")), "gpu-a1") == {"cpuManagerPolicy": "static"}
    # the generated client's own return value would have been the body turned into a str
    r = client.CoreV1Api(api_client(spec("proxy-token"))).connect_get_node_proxy_with_path("gpu-a1", "configz")
    assert isinstance(r, str)


@pytest.mark.parametrize(
    ("token", "node", "message"),
    [
        ("limited-token", "gpu-a1", "lacks the RBAC permission get on nodes/proxy"),
        # deploy/rbac.yaml grants nodes/configz, which the API server's node proxy does not accept
        ("full-token", "gpu-a1", "lacks the RBAC permission get on nodes/proxy"),
        ("proxy-token", "gpu-a2", "get nodes/proxy gpu-a2 failed with HTTP 500"),
        ("proxy-token", "gpu-zz", "nodes/proxy gpu-zz not found (404)"),
    ],
)
def test_configz_failures_name_the_cause(cluster, token, node, message):
    _, spec = cluster
    with pytest.raises(FactUnavailable, match=message.replace("(", r"\(").replace(")", r"\)")):
        configz(api_client(spec(token)), node)


def test_fake_enforces_the_manifest_per_request(cluster):
    api, spec = cluster
    with pytest.raises(FactUnavailable):
        configz(api_client(spec("limited-token")), "gpu-a1")
    configz(api_client(spec("proxy-token")), "gpu-a1")
    users = [u for u, _, path in api.requests if path.endswith("/configz")]
    assert users == [
        "system:serviceaccount:gpu-node-conformance:limited",
        "system:serviceaccount:gpu-node-conformance:proxy",
    ]


def test_inventory_merges_discovered_nodes(cluster, tmp_path):
    _, spec = cluster
    s = spec()
    inv_file = tmp_path / "inv.yaml"
    inv_file.write_text(
        f"kubernetes: {{kubeconfig: {s.kubeconfig}}}\n"
        "defaults: {ssh: {user: auditor, port: 2222}}\n"
        "nodes:\n  - name: gpu-a1\n    address: bastion-a1.example\n    labels: {pool: override}\n"
    )
    inv = load_inventory(str(inv_file))
    merge_discovered(inv, discover(api_client(inv.kubernetes), inv.kubernetes))
    by = {n.name: n for n in inv.nodes}
    assert set(by) == {"gpu-a1", "gpu-a2"}
    assert by["gpu-a1"].address == "bastion-a1.example" and by["gpu-a1"].labels["pool"] == "override"
    assert by["gpu-a1"].discovered == "nvidia.com/gpu capacity 8; also in the inventory"
    assert by["gpu-a2"].address == "10.0.0.12" and by["gpu-a2"].ssh == {"user": "auditor", "port": 2222}
    assert by["gpu-a2"].labels["pool"] == "a100" and by["gpu-a2"].discovered == "nvidia.com/gpu capacity 8"


def test_kubernetes_section_is_validated(tmp_path):
    f = tmp_path / "inv.yaml"
    f.write_text("kubernetes: {kubeconfig: 3, contxt: x}\n")
    with pytest.raises(UsageError) as e:
        load_inventory(str(f))
    assert "kubernetes.kubeconfig: must be a str" in str(e.value) and "kubernetes.contxt: unknown field" in str(e.value)


def test_missing_kubeconfig_names_the_file(tmp_path):
    with pytest.raises(UsageError, match=r"kubeconfig /nonexistent/kubeconfig"):
        api_client(KubeSpec(kubeconfig="/nonexistent/kubeconfig"))


def test_dcgm_exporter_metrics_through_the_pod_proxy(cluster):
    api, spec = cluster
    exporter = pod_object("gpu-operator", "nvidia-dcgm-exporter-x1", "uid-dcgm", "gpu-a1", [{"name": "exporter"}],
                          labels={"app": "nvidia-dcgm-exporter"})  # fmt: skip
    api.add_pod(exporter)
    api.proxy_handler = lambda ns, pod, port, path: (200, dcgm_text(full=False)) if (port, path) == (9400, "metrics") else None
    s = spec()
    where, text, interval = dcgm_metrics(api_client(s), s, "gpu-a1")
    assert interval == (30000, "dcgm-exporter's default (no -c, no DCGM_EXPORTER_INTERVAL)")
    assert where == "pod gpu-operator/nvidia-dcgm-exporter-x1:9400/metrics (API pod proxy)"
    assert metric_series(text) == {"DCGM_FI_DEV_GPU_UTIL": 2, "DCGM_FI_DEV_MEM_COPY_UTIL": 2}
    with pytest.raises(AssertionError, match="no running dcgm-exporter pod"):
        dcgm_metrics(api_client(s), s, "gpu-a2")
    with pytest.raises(FactUnavailable, match="lacks the RBAC permission list on pods in namespace gpu-operator"):
        dcgm_metrics(api_client(spec("limited-token")), spec("limited-token"), "gpu-a1")


def test_discovery_finds_mig_and_labelled_gpu_nodes(tmp_path):
    """Under the mixed MIG strategy a node may advertise nvidia.com/gpu 0 and only MIG slices; a node whose
    device plugin is not up yet still carries GPU Feature Discovery's nvidia.com/gpu.present label."""
    api = fake_api()
    mixed = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}
    api.add_node(node_object("gpu-mig", internal_ip="10.0.0.31", labels={"nvidia.com/mig.strategy": "mixed"}, extra=mixed))
    api.add_node(node_object("gpu-new", internal_ip="10.0.0.32", labels={"nvidia.com/gpu.present": "true"}))
    api.add_node(node_object("cpu-c1", internal_ip="10.0.0.33"))
    with serve(api) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, "full-token"))
        s = KubeSpec(kubeconfig=str(tmp_path / "kc"))
        found = discover(api_client(s), s)
    assert [(d.name, d.gpus, d.why) for d in found] == [
        ("gpu-mig", 0, "MIG resources nvidia.com/mig-1g.10gb 14, nvidia.com/mig-3g.40gb 4"),
        ("gpu-new", 0, "label nvidia.com/gpu.present=true"),
    ]
    assert found[0].resources == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}


def test_runtime_classes_in_their_api_group_under_rbac(cluster):
    """RuntimeClass lives in node.k8s.io: a rule for the core group ("") does not grant it, and the
    manifest's rule for node.k8s.io does."""
    api, spec = cluster
    api.runtime_classes.update({"nvidia": "nvidia", "kata-gpu": "kata"})
    assert runtime_class_handlers(api_client(spec())) == {"kata-gpu": "kata", "nvidia": "nvidia"}
    with pytest.raises(FactUnavailable, match=r"lacks the RBAC permission list on runtimeclasses.node.k8s.io"):
        runtime_class_handlers(api_client(spec("noexec-token")))  # pods and nodes only, in the core group
    got = client.NodeV1Api(api_client(spec())).read_runtime_class("kata-gpu")
    assert got.handler == "kata"
    with pytest.raises(client.exceptions.ApiException) as e:
        client.NodeV1Api(api_client(spec())).read_runtime_class("missing")
    assert e.value.status == 404


@pytest.mark.parametrize(
    ("args", "env", "want"),
    [
        (["dcgm-exporter", "-c", "5000"], {}, (5000, "argument -c")),
        (
            ["dcgm-exporter", "--collect-interval=1000"],
            {"DCGM_EXPORTER_INTERVAL": "60000"},
            (1000, "argument --collect-interval"),
        ),
        (["dcgm-exporter"], {"DCGM_EXPORTER_INTERVAL": "60000"}, (60000, "environment DCGM_EXPORTER_INTERVAL")),
        (["dcgm-exporter", "-c", "soon"], {}, (None, "argument -c is 'soon', not a number of milliseconds")),
    ],
)  # fmt: skip
def test_dcgm_exporter_collection_interval(args, env, want):
    from conformance.cluster.dcgm import collect_interval

    assert collect_interval(args, env) == want


def test_discovery_finds_gpu_nodes_only_dra_serves(tmp_path):
    """Issue 52 item 1: the NVIDIA GPU DRA driver needs neither nvidia.com/gpu capacity nor GPU Feature Discovery's
    label (its prerequisites: Node Feature Discovery only; its DaemonSet selects feature.node.kubernetes.io/
    pci-10de.present). A node whose ResourceSlices of gpu.nvidia.com publish GPUs is a GPU node, so is one NFD
    labels with an NVIDIA PCI device; a CPU-only worker (another driver's slices: a DRA CPU driver) is not."""
    from tests.fakeapi import resource_slice

    api = fake_api()
    api.add_node(node_object("gpu-dra", internal_ip="10.0.0.41"))
    api.add_node(node_object("gpu-nfd", internal_ip="10.0.0.42", labels={"feature.node.kubernetes.io/pci-10de.present": "true"}))
    api.add_node(node_object("cpu-c2", internal_ip="10.0.0.43"))
    gpu = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}
    api.slices["s1"] = resource_slice("s1", "gpu-dra", "gpu.nvidia.com", "gpu-dra", [gpu, dict(gpu, name="gpu-1")])
    api.slices["s2"] = resource_slice("s2", "cpu-c2", "dra.cpu", "cpu-c2", [{"name": "cpu-0", "attributes": {}}])
    with serve(api) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, "full-token"))
        s = KubeSpec(kubeconfig=str(tmp_path / "kc"))
        found = discover(api_client(s), s)
    assert [(d.name, d.why) for d in found] == [
        ("gpu-dra", "ResourceSlices of gpu.nvidia.com publish 2 device(s)"),
        ("gpu-nfd", "label feature.node.kubernetes.io/pci-10de.present=true (Node Feature Discovery: an NVIDIA PCI device)"),
    ]


def test_discovery_goes_on_when_resource_slices_are_forbidden(tmp_path):
    """An identity without list on resourceslices.resource.k8s.io still finds the nodes that capacity and labels
    name; what it cannot find (nodes only DRA serves) is a warning naming the grant, never a silent gap."""
    from tests.fakeapi import resource_slice

    api = fake_api()
    api.add_node(node_object("gpu-a", internal_ip="10.0.0.51", extra={"nvidia.com/gpu": "8"}))
    api.add_node(node_object("gpu-dra", internal_ip="10.0.0.52"))
    api.slices["s1"] = resource_slice("s1", "gpu-dra", "gpu.nvidia.com", "gpu-dra", [{"name": "gpu-0", "attributes": {}}])
    with serve(api) as url:
        (tmp_path / "kc").write_text(kubeconfig(url, "limited-token"))
        s = KubeSpec(kubeconfig=str(tmp_path / "kc"))
        warnings: list[str] = []
        found = discover(api_client(s), s, warnings)
    assert [d.name for d in found] == ["gpu-a"]
    assert len(warnings) == 1
    assert "lacks the RBAC permission list on resourceslices.resource.k8s.io" in warnings[0]
    assert "only DRA serves" in warnings[0]
