"""The kubelet's live configuration (configz) with the least privilege the cluster allows, and what the
suite's identity may do, asked of the API server (SelfSubjectAccessReview) so the report can say it.

Two ways to read configz, chosen by the inventory's `kubernetes.configz`:

- `kubelet` (the default): GET https://<InternalIP>:<kubelet port>/configz straight from each kubelet,
  with the identity's own credentials. The kubelet authenticates the bearer token (TokenReview) and
  asks the API server whether the user may `get` `nodes/configz`; with the feature gate
  `KubeletFineGrainedAuthz` (KEP-2862: alpha 1.32, beta and on by default 1.33, GA 1.36) it tries the
  fine-grained subresource first and `nodes/proxy` second (pkg/kubelet/server/auth.go,
  GetRequestAttributes: `/configz` maps to subresource "configz", then "proxy"). So `get nodes/configz`
  is all this needs; without the gate only `nodes/proxy` works.
- `proxy`: GET /api/v1/nodes/<node>/proxy/configz through the API server. The API server authorises
  that path as `get nodes/proxy`, whatever the kubelet supports. `nodes/proxy` is not a read-only
  grant: the kubelet's exec, attach and run endpoints accept websocket upgrades, which are HTTP GETs
  and so need only `get` (Kubernetes docs, "Kubelet authentication/authorization", and "Role Based
  Access Control Good Practices": nodes/proxy). Kept as an explicit fallback for older clusters, and
  the report says when it was used.

The kubelet's serving certificate is always verified: with `serverTLSBootstrap: true` the cluster CA
signs it (the kubeconfig's CA, used by default); otherwise name the CA in `kubernetes.kubelet_ca`.
There is no switch to skip verification: the request carries the identity's token."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.errors import FactUnavailable

KUBELET_PORT = 10250  # the kubelet's default --port (KubeletConfiguration `port`)
TIMEOUT_S = 15.0
FINE_GRAINED = "KubeletFineGrainedAuthz (beta, on by default since Kubernetes 1.33; GA in 1.36)"
PROXY_WARNING = (
    "nodes/proxy also lets this identity exec into any container through the kubelet (websocket upgrades "
    "are authorised as get); grant nodes/configz instead (deploy/rbac.yaml) where kubelets run 1.33 or newer"
)


@dataclass(frozen=True)
class KubeletEndpoint:
    node: str
    address: str
    port: int

    def url(self, path: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"https://{host}:{self.port}{path}"


def parse_configz(body: bytes | str, node: str) -> dict[str, Any]:
    """The `kubeletconfig` object of a configz answer."""
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise FactUnavailable(f"configz of node {node}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("kubeletconfig"), dict):
        raise FactUnavailable(f"configz of node {node}: no 'kubeletconfig' object in the answer")
    return doc["kubeletconfig"]


def endpoint_of(obj: Any) -> KubeletEndpoint | None:
    """Where a Node's kubelet listens, as the API server knows it: the first InternalIP and
    `status.daemonEndpoints.kubeletEndpoint.Port` (what the API server itself dials); None without an
    InternalIP."""
    status = obj.status
    address = next((a.address for a in (status.addresses or []) if a.type == "InternalIP"), None) if status else None
    if not address:
        return None
    endpoint = status.daemon_endpoints.kubelet_endpoint if status.daemon_endpoints else None
    port = endpoint.port if endpoint is not None and endpoint.port else KUBELET_PORT
    return KubeletEndpoint(obj.metadata.name, address, int(port))


def kubelet_endpoint(api: Any, node: str) -> KubeletEndpoint:
    """The kubelet endpoint of a node the inventory names (discovered nodes carry theirs)."""
    from kubernetes import client

    try:
        obj = client.CoreV1Api(api).read_node(node, _request_timeout=TIMEOUT_S)
    except Exception as e:
        raise FactUnavailable(explain(e, "get", "nodes", node)) from None
    found = endpoint_of(obj)
    if found is None:
        raise FactUnavailable(f"node {node}: its Node object has no InternalIP address to reach the kubelet at")
    return found


def _tls_context(api: Any, kubelet_ca: str | None) -> ssl.SSLContext:
    conf = api.configuration
    ca = kubelet_ca or conf.ssl_ca_cert
    if not ca:
        raise FactUnavailable(
            "no CA to verify the kubelet's serving certificate: set kubernetes.kubelet_ca in the inventory "
            "(the CA that signs kubelet serving certificates; with serverTLSBootstrap it is the cluster CA)"
        )
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if conf.cert_file and conf.key_file:
            ctx.load_cert_chain(conf.cert_file, conf.key_file)  # x509 client auth, when the kubeconfig uses it
    except (OSError, ssl.SSLError) as e:
        raise FactUnavailable(f"kubernetes.kubelet_ca {ca}: {e}") from None
    return ctx


def configz_from_kubelet(api: Any, endpoint: KubeletEndpoint, kubelet_ca: str | None) -> dict[str, Any]:
    """GET /configz from the kubelet itself with the identity's credentials; every failure names the fix."""
    ctx = _tls_context(api, kubelet_ca)
    headers = {"Accept": "application/json"}
    for auth in api.configuration.auth_settings().values():  # the kubeconfig's bearer token (refreshed by its hook)
        if auth.get("in") == "header" and auth.get("value"):
            headers[auth["key"].title()] = auth["value"]
    where = f"kubelet of node {endpoint.node} at {endpoint.url('/configz')}"
    conn = http.client.HTTPSConnection(endpoint.address, endpoint.port, context=ctx, timeout=TIMEOUT_S)
    try:
        conn.request("GET", "/configz", headers=headers)
        r = conn.getresponse()
        body = r.read(16 * 1024 * 1024)
    except ssl.SSLCertVerificationError as e:
        raise FactUnavailable(
            f"{where}: its serving certificate is not trusted ({e.verify_message}): set kubernetes.kubelet_ca to the CA "
            "that signs kubelet serving certificates (enable serverTLSBootstrap for CA-signed ones), or use "
            "configz: proxy (needs the broad nodes/proxy grant)"
        ) from None
    except TimeoutError:
        raise FactUnavailable(
            f"{where}: no answer in {TIMEOUT_S:.0f} s: the runner must reach the kubelet port (firewall?), or use configz: proxy"
        ) from None
    except (OSError, ssl.SSLError, http.client.HTTPException) as e:
        raise FactUnavailable(
            f"{where}: {type(e).__name__}: {e}: the runner must reach the kubelet port, or use configz: proxy"
        ) from None
    finally:
        conn.close()
    text = body.decode("utf-8", "replace").strip()
    if r.status == 401:
        raise FactUnavailable(
            f"{where}: 401 Unauthorized: the kubelet did not accept the credentials (it needs "
            "authentication.webhook.enabled to accept API tokens, or a client certificate its clientCAFile trusts)"
        )
    if r.status == 403:
        raise FactUnavailable(
            f"{where}: 403 ({text[:200]}): grant get on nodes/configz (deploy/rbac.yaml); the kubelet honours it with "
            f"{FINE_GRAINED}; on older kubelets use configz: proxy with the nodes/proxy grant, or configz: off"
        )
    if r.status != 200:
        raise FactUnavailable(f"{where}: HTTP {r.status} {r.reason}: {text[:200]}")
    return parse_configz(body, endpoint.node)


def can_i(api: Any, verb: str, resource: str, subresource: str = "", namespace: str = "", group: str = "") -> bool | None:
    """What the API server says this identity may do (SelfSubjectAccessReview, which every authenticated
    user may create through the system:basic-user role); None when it cannot be asked."""
    from kubernetes import client

    attrs = client.V1ResourceAttributes(verb=verb, resource=resource, subresource=subresource or None,
                                        namespace=namespace or None, group=group or None)  # fmt: skip
    review = client.V1SelfSubjectAccessReview(
        api_version="authorization.k8s.io/v1",
        kind="SelfSubjectAccessReview",
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attrs),
    )
    try:
        answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review, _request_timeout=TIMEOUT_S)
    except Exception:
        return None
    return bool(answer.status and answer.status.allowed)


def access_report(api: Any, configz_mode: str, pod_namespaces: list[str]) -> list[str]:
    """One line per API grant the run relies on, as the API server answers for this identity: which
    grant read configz (and a warning when nodes/proxy is held or used), and where pods/exec reaches."""
    lines = []
    configz = can_i(api, "get", "nodes", "configz")
    proxy = can_i(api, "get", "nodes", "proxy")
    if configz_mode == "off":
        lines.append("kubelet configz: not read (configz: off); the node's files decide the KUBELET-* checks")
    elif configz_mode == "kubelet":
        if configz:
            lines.append("kubelet configz: read from each kubelet, authorised by get nodes/configz (least privilege)")
        elif proxy:
            lines.append("kubelet configz: read from each kubelet, authorised only by get nodes/proxy: " + PROXY_WARNING)
        else:
            lines.append("kubelet configz: this identity holds neither get nodes/configz nor get nodes/proxy")
    else:
        lines.append("kubelet configz: read through the API server's node proxy, authorised by get nodes/proxy: " + PROXY_WARNING)
    if configz_mode != "proxy" and proxy:
        lines.append("WARNING: this identity holds get nodes/proxy: " + PROXY_WARNING)
    leases = can_i(api, "get", "leases", namespace="kube-node-lease", group="coordination.k8s.io")
    if leases is False:
        lines.append("daemons' releases: the Node's nodeInfo is not used (no get leases in kube-node-lease: whether each "
                     "node's kubelet is alive cannot be read); they come from the nodes' packages and journals")  # fmt: skip
    elif leases:
        lines.append("daemons' releases: from each Node's nodeInfo while its Lease (kube-node-lease) is fresh")
    if pod_namespaces:
        scoped = {ns: can_i(api, "create", "pods", "exec", namespace=ns) for ns in pod_namespaces}
        word = {True: "granted", False: "not granted", None: "unknown"}
        where = ", ".join(f"{ns} ({word[ok]})" for ns, ok in scoped.items())
        lines.append(f"pods/exec: pod checks look only in the profile's namespaces: {where}")
    cluster_exec = can_i(api, "create", "pods", "exec")
    if cluster_exec:
        wider = " (wider than the profile's pods.namespaces need)" if pod_namespaces else ""
        lines.append(f"pods/exec: granted in every namespace{wider}")
    if None in (configz, proxy, cluster_exec):
        lines.append("(some grants could not be asked: SelfSubjectAccessReview failed)")
    return lines
