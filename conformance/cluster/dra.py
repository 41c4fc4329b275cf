"""GPUs allocated through Dynamic Resource Allocation: a pod's ResourceClaims, their allocation results,
and the devices the node's ResourceSlices publish, read from the `resource.k8s.io` API.

The kubelet's Topology Manager does not align DRA devices with the CPUs and memory its CPU and Memory
Managers hand out (DRA devices are prepared after admission and give no topology hints; Kubernetes docs,
"Dynamic Resource Allocation", kubernetes/website PR 56761): a Guaranteed pod with static CPUs on one NUMA
node and a DRA GPU on the other is admitted under `single-numa-node`. The pod checks judge such a pod
from what is read here, mapped to the node's GPUs by UUID or PCI address.

Objects, as `k8s.io/api/resource/v1` defines them (v1beta2 has the same shape; v1beta1 wraps a device's
attributes in `basic`):
- Pod: `spec.resourceClaims[]` {name, resourceClaimName | resourceClaimTemplateName},
  `spec.containers[].resources.claims[]` {name, request}, `status.resourceClaimStatuses[]`
  {name, resourceClaimName} for claims made from templates.
- ResourceClaim: `status.allocation.devices.results[]` {request, driver, pool, device},
  `status.reservedFor[]` {resource, name, uid}.
- ResourceSlice: `spec.driver`, `spec.pool` {name, generation}, `spec.nodeName`, `spec.devices[]`
  {name, attributes: {NAME: {string|int|bool|version}}}.

Attributes of NVIDIA's GPU DRA driver (driver `gpu.nvidia.com`, kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin/deviceinfo.go): `type` (gpu | mig | vfio), `uuid`, `productName`, MIG devices'
`parentUUID`; the PCI address was `pcieBusID` in releases v25.3.0 and v25.8.x and is the standard
`resource.kubernetes.io/pciBusID` from v25.12.0 on (k8s.io/dynamic-resource-allocation/deviceattribute).
An attribute may also be written qualified by the driver's domain (`gpu.nvidia.com/uuid`): both read."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from conformance.cluster.api_errors import explain
from conformance.config.units import cpu_count
from conformance.errors import FactUnavailable, ParseError, remembered
from conformance.facts.gpu import normalise_bus_id

GROUP = "resource.k8s.io"
# The versions read, newest first (kubectl likewise takes the server's preferred version of the group).
VERSIONS = ("v1", "v1beta2", "v1beta1")
TIMEOUT_S = 15
PCI_ATTRIBUTES = ("resource.kubernetes.io/pciBusID", "pcieBusID")  # v25.12.0 on; v25.3.0 to v25.8.x


@dataclass(frozen=True)
class SliceDevice:
    """One device a ResourceSlice publishes, with the attributes that identify a GPU."""

    driver: str
    pool: str
    name: str
    kind: str | None  # the driver's `type` attribute: gpu, mig, vfio
    uuid: str | None
    parent_uuid: str | None  # a MIG device's GPU
    pci: str | None  # normalised PCI address (0000:c1:00.0)
    product: str | None
    # the device's taints (KEP-5055, resource.k8s.io/v1 Device.taints: key, value, effect None | NoSchedule |
    # NoExecute; consumers treat an unknown effect as None): NVIDIA's GPU DRA driver taints a GPU it sees failing
    taints: list[tuple[str, str, str]] = field(default_factory=list)
    # taints a DeviceTaintRule puts on it ("the same effect as if the taint was specified directly in the
    # ResourceSlice", KEP-5055): (rule name, key, value, effect)
    rule_taints: list[tuple[str, str, str, str]] = field(default_factory=list)

    def keeps_work_off(self) -> list[str]:
        """The taints that keep new claims (NoSchedule) or every claim (NoExecute) off the device."""
        off = [f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in self.taints if e in ("NoSchedule", "NoExecute")]
        return off + [f"{k}={v}:{e} (DeviceTaintRule {r})" if v else f"{k}:{e} (DeviceTaintRule {r})"
                      for r, k, v, e in self.rule_taints if e in ("NoSchedule", "NoExecute")]  # fmt: skip

    @property
    def gpu_uuid(self) -> str | None:
        """The physical GPU this device lives on: its own UUID, or a MIG device's parent."""
        return self.parent_uuid or self.uuid


@dataclass(frozen=True)
class ClaimDevice:
    """One device allocated to a ResourceClaim, and what the node's slices say of it (None: not found)."""

    claim: str  # namespace/name
    request: str
    driver: str
    pool: str
    device: str
    published: SliceDevice | None

    @property
    def short_claim(self) -> str:
        return self.claim.split("/", 1)[-1]


@dataclass
class NodeSlices:
    """The GPU devices the node's ResourceSlices publish (drivers the profile counts as GPU drivers)."""

    version: str | None  # the resource.k8s.io version read; None: the API server serves no DRA
    devices: list[SliceDevice] = field(default_factory=list)
    source: str = ""
    rules_error: str | None = None  # why the cluster's DeviceTaintRules could not be read (None: read, or none served)

    def find(self, driver: str, pool: str, name: str) -> SliceDevice | None:
        return next((d for d in self.devices if (d.driver, d.pool, d.name) == (driver, pool, name)), None)


@dataclass(frozen=True)
class TaintRule:
    """A DeviceTaintRule (KEP-5055, resource.k8s.io v1alpha3 and later): one taint on every device its selector
    matches. Selector fields set must all match (driver: slice.spec.driver, pool, device: the device's name); an
    empty selector matches every device, none at all matches none."""

    name: str
    selector: dict[str, str] | None
    taint: tuple[str, str, str]

    def matches(self, d: SliceDevice) -> bool:
        if self.selector is None:
            return False
        have = {"driver": d.driver, "pool": d.pool, "device": d.name}
        return all(have.get(k) == v for k, v in self.selector.items() if k in have)


# DeviceTaintRule's versions, newest first: v1alpha3 from 1.33 (feature gate DRADeviceTaintRules), beta later
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")


def device_taint_rules(api: Any) -> list[TaintRule]:
    """The cluster's DeviceTaintRules, from the newest version served ([] where no version serves the resource: none
    can exist); FactUnavailable naming the permission where RBAC forbids listing them."""
    from kubernetes.client.exceptions import ApiException

    for version in TAINT_RULE_VERSIONS:
        try:
            doc = _custom(api).list_cluster_custom_object(GROUP, version, "devicetaintrules", _request_timeout=TIMEOUT_S)
        except ApiException as e:
            if e.status == 404:
                continue
            raise FactUnavailable(explain(e, "list", f"devicetaintrules.{GROUP}")) from None
        except Exception as e:
            raise FactUnavailable(explain(e, "list", f"devicetaintrules.{GROUP}")) from None
        rules = []
        for item in (doc.get("items") if isinstance(doc, dict) else None) or []:
            spec = (item or {}).get("spec") or {}
            t = spec.get("taint") or {}
            raw = spec.get("deviceSelector")
            selector = {k: str(v) for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, dict) else None
            name = str(((item or {}).get("metadata") or {}).get("name", "?"))
            taint = (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect") or "None"))
            rules.append(TaintRule(name, selector, taint))
        return rules
    return []


def with_rules(slices: NodeSlices, rules: list[TaintRule] | FactUnavailable) -> NodeSlices:
    """The node's devices with the taints the cluster's DeviceTaintRules put on them, or the reason they are unknown."""
    if isinstance(rules, FactUnavailable):
        return NodeSlices(slices.version, slices.devices, slices.source, rules_error=str(rules))
    devices = [
        replace(d, rule_taints=[(r.name, *r.taint) for r in rules if r.matches(d)]) if any(r.matches(d) for r in rules) else d
        for d in slices.devices
    ]
    return NodeSlices(slices.version, devices, slices.source)


def served_version(api: Any) -> str | None:
    """The newest resource.k8s.io version the API server serves (discovery), None when it serves the group
    in no version this suite reads (a cluster without DRA: the group is absent, 404)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        group = client.ResourceApi(api).get_api_group(_request_timeout=TIMEOUT_S)
    except ApiException as e:
        if e.status == 404:
            return None
        raise FactUnavailable(explain(e, "get", f"API group {GROUP} (discovery)")) from None
    except Exception as e:
        raise FactUnavailable(explain(e, "get", f"API group {GROUP} (discovery)")) from None
    served = {v.version for v in group.versions or []}
    return next((v for v in VERSIONS if v in served), None)


def _custom(api: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api)


def read_claim(api: Any, version: str, namespace: str, name: str) -> dict[str, Any]:
    """One ResourceClaim as a plain document; FactUnavailable names what could not be read."""
    try:
        doc = _custom(api).get_namespaced_custom_object(
            GROUP, version, namespace, "resourceclaims", name, _request_timeout=TIMEOUT_S
        )
    except Exception as e:
        raise FactUnavailable(explain(e, "get", f"resourceclaims.{GROUP}", f"{namespace}/{name}")) from None
    if not isinstance(doc, dict):
        raise FactUnavailable(f"ResourceClaim {namespace}/{name}: the API answered no object")
    return doc


def nodes_publishing(api: Any, drivers: tuple[str, ...]) -> dict[str, int]:
    """Node -> the devices the GPU DRA drivers' ResourceSlices publish on it (a node the NVIDIA GPU DRA driver
    serves needs neither nvidia.com/gpu capacity nor GPU Feature Discovery's label: kubernetes-sigs/
    dra-driver-nvidia-gpu docs/prerequisites.md). {} where the API server serves no resource.k8s.io version."""
    version = served_version(api)
    if version is None:
        return {}
    try:
        doc = _custom(api).list_cluster_custom_object(GROUP, version, "resourceslices", _request_timeout=TIMEOUT_S)
    except Exception as e:
        raise FactUnavailable(explain(e, "list", f"resourceslices.{GROUP}")) from None
    out: dict[str, int] = {}
    for item in (doc.get("items") if isinstance(doc, dict) else None) or []:
        spec = item.get("spec") or {} if isinstance(item, dict) else {}
        node, devices = spec.get("nodeName"), spec.get("devices") or []
        if spec.get("driver") in drivers and isinstance(node, str) and devices:
            out[node] = out.get(node, 0) + len(devices)
    return out


def node_slices(api: Any, version: str | None, node: str, drivers: tuple[str, ...]) -> NodeSlices:
    """The devices of the GPU drivers' ResourceSlices on `node` (field selector spec.nodeName, which the API
    server supports for ResourceSlices: pkg/registry/resource/resourceslice/strategy.go). Of a pool published
    in several generations only the newest counts, as the scheduler takes it."""
    if version is None:
        return NodeSlices(None, [], f"the API server serves no {GROUP} version ({', '.join(VERSIONS)}): no DRA")
    try:
        doc = _custom(api).list_cluster_custom_object(
            GROUP, version, "resourceslices", field_selector=f"spec.nodeName={node}", _request_timeout=TIMEOUT_S
        )
    except Exception as e:
        raise FactUnavailable(explain(e, "list", f"resourceslices.{GROUP}")) from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise FactUnavailable(f"ResourceSlices of node {node}: the API answered no list")
    newest: dict[tuple[str, str], int] = {}
    for s in items:
        spec = (s or {}).get("spec") or {}
        key = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        newest[key] = max(newest.get(key, 0), int((spec.get("pool") or {}).get("generation") or 0))
    devices: list[SliceDevice] = []
    for s in items:
        spec = (s or {}).get("spec") or {}
        driver, pool = str(spec.get("driver")), spec.get("pool") or {}
        if driver not in drivers or int(pool.get("generation") or 0) != newest[(driver, str(pool.get("name")))]:
            continue  # another driver's devices, or a pool generation the scheduler no longer uses
        for d in spec.get("devices") or []:
            devices.append(slice_device(driver, str(pool.get("name")), d, (s.get("metadata") or {}).get("name", "?")))
    return NodeSlices(version, devices, f"ResourceSlices ({GROUP}/{version}) of node {node}, drivers {', '.join(drivers)}")


def slice_device(driver: str, pool: str, d: dict[str, Any], slice_name: str) -> SliceDevice:
    """A published device and its identifying attributes; a malformed PCI address is a ParseError."""
    attrs = d.get("attributes")
    if attrs is None and isinstance(d.get("basic"), dict):  # v1beta1
        attrs = d["basic"].get("attributes")
    attrs = attrs or {}

    def value(name: str) -> str | None:
        for key in (name, f"{driver}/{name}"):
            v = attrs.get(key)
            if isinstance(v, dict):
                for kind in ("string", "version", "int", "bool"):
                    if kind in v and v[kind] is not None:
                        return str(v[kind])
        return None

    raw_pci = next((v for a in PCI_ATTRIBUTES if (v := value(a))), None)
    try:
        pci = normalise_bus_id(raw_pci) if raw_pci else None
    except ParseError as e:
        raise FactUnavailable(f"ResourceSlice {slice_name} device {d.get('name')}: {e}") from None
    raw_taints = d.get("taints")
    if raw_taints is None and isinstance(d.get("basic"), dict):  # v1beta1
        raw_taints = d["basic"].get("taints")
    taints = [(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect") or "None"))
              for t in raw_taints or [] if isinstance(t, dict)]  # fmt: skip
    return SliceDevice(
        driver=driver,
        pool=pool,
        name=str(d.get("name")),
        kind=value("type"),
        uuid=value("uuid"),
        parent_uuid=value("parentUUID"),
        pci=pci,
        product=value("productName"),
        taints=taints,
    )


def pod_claims(pod: Any) -> tuple[dict[str, str | None], dict[str, list[tuple[str, str | None]]]]:
    """(pod claim entry -> ResourceClaim name, None while a template's claim is not created yet;
    container -> [(pod claim entry, request or None for all)]) from a pod object of the client."""
    spec, status = pod.spec, pod.status
    made = {s.name: s.resource_claim_name for s in (getattr(status, "resource_claim_statuses", None) or [])}
    names: dict[str, str | None] = {}
    for rc in getattr(spec, "resource_claims", None) or []:
        names[rc.name] = rc.resource_claim_name or made.get(rc.name)
    uses: dict[str, list[tuple[str, str | None]]] = {}
    for c in [*(getattr(spec, "init_containers", None) or []), *(spec.containers or [])]:
        for cl in (getattr(c.resources, "claims", None) or []) if c.resources else []:
            uses.setdefault(c.name, []).append((cl.name, getattr(cl, "request", None) or None))
    # DRA extended resources (KEP-5004): a container's request of an extended resource that a DeviceClass's
    # extendedResourceName (or its implicit deviceclass.resource.kubernetes.io/<class>) maps to DRA is allocated in a
    # special claim the scheduler makes; status.extendedResourceClaimStatus names it and maps each (container,
    # resource) to its request (k8s.io/api core/v1 PodExtendedResourceClaimStatus: resourceClaimName, requestMappings)
    ext = _extended_status(pod)
    if ext is not None and ext.resource_claim_name:
        names[EXTENDED_CLAIM] = ext.resource_claim_name
        for m in ext.request_mappings or []:
            uses.setdefault(m.container_name, []).append((EXTENDED_CLAIM, m.request_name))
    return names, uses


EXTENDED_CLAIM = "(extended resources)"  # the special claim's entry: it has no spec.resourceClaims entry


def _extended_status(pod: Any) -> Any:
    """status.extendedResourceClaimStatus of a pod object of the client (None: DRA serves no extended resource)."""
    return getattr(pod.status, "extended_resource_claim_status", None) if pod.status is not None else None


def extended_resources(pod: Any) -> dict[str, list[str]]:
    """Container -> the extended resources DRA serves it (status.extendedResourceClaimStatus.requestMappings): such a
    resource is no device plugin's, whatever its name (nvidia.com/gpu too)."""
    ext = _extended_status(pod)
    out: dict[str, list[str]] = {}
    for m in (ext.request_mappings or []) if ext is not None else []:
        out.setdefault(m.container_name, []).append(m.resource_name)
    return out


def allocated(claim: dict[str, Any], request: str | None, admin: bool = False) -> list[tuple[str, str, str, str]]:
    """(request, driver, pool, device) of the claim's allocation, for one request of it or all; a request of
    `firstAvailable` is allocated under `request/subrequest`. Results with `adminAccess: true`
    (DeviceRequestAllocationResult.adminAccess, k8s.io/api/resource/v1: monitoring access beside the devices'
    ordinary claims, never an allocation of them) are left out, or with `admin` the only ones given."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    out = []
    for r in results:
        if bool(r.get("adminAccess")) != admin:
            continue
        req = str(r.get("request", ""))
        if request is None or req == request or req.startswith(request + "/"):
            out.append((req, str(r.get("driver")), str(r.get("pool")), str(r.get("device"))))
    return out


def claimed_cpus(claim: dict[str, Any], request: str | None, cpu_drivers: tuple[str, ...]) -> int:
    """How many CPUs the claim (or one request of it) was allocated from a DRA CPU driver: one per device in
    dra-driver-cpu's `individual` mode, the consumed capacity of a grouped device (`consumedCapacity`
    {"dra.cpu/cpu": "10"}, DeviceRequestAllocationResult, KEP-5075 consumable capacity) in its `grouped` mode."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    total = 0
    for r in results:
        req = str(r.get("request", ""))
        if r.get("adminAccess") or r.get("driver") not in cpu_drivers:
            continue
        if request is not None and req != request and not req.startswith(request + "/"):
            continue
        consumed = {k: v for k, v in (r.get("consumedCapacity") or {}).items() if str(k).rsplit("/", 1)[-1] == "cpu"}
        if not consumed:
            total += 1
            continue
        for k, v in consumed.items():
            n = cpu_count(str(v))
            if n is None or n != int(n):
                raise FactUnavailable(f"ResourceClaim {claim_label(claim)}: consumedCapacity {k} is {v!r}, not whole CPUs")
            total += int(n)
    return total


def claim_label(claim: dict[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def is_allocated(claim: dict[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def reserved_for(claim: dict[str, Any]) -> list[str]:
    """The consumers the claim is reserved for (`pod NAME`), for the evidence of a shared claim."""
    return [
        f"{r.get('resource', 'pods').rstrip('s')} {r.get('name')}" for r in (claim.get("status") or {}).get("reservedFor") or []
    ]


@dataclass
class ContainerDra:
    """The GPUs a container holds through its ResourceClaims, or why they could not be read."""

    devices: list[ClaimDevice] = field(default_factory=list)
    error: str | None = None  # a claim or the node's slices could not be read: the GPU checks say `error`
    shared: dict[str, list[str]] = field(default_factory=dict)  # claim -> the consumers it is reserved for
    claims: list[str] = field(default_factory=list)  # every claim the container uses, GPU or not
    # GPU claim -> how its CPUs were selected with its GPUs: (True, the constraint) or (False, why not)
    coselection: dict[str, tuple[bool, str]] = field(default_factory=dict)
    admin: list[str] = field(default_factory=list)  # claims holding GPUs with adminAccess (monitoring, not a workload)
    # claims of a DRA CPU driver: claim UID -> namespace/name, and the CPUs they were allocated in all
    cpu_claims: dict[str, str] = field(default_factory=dict)
    cpus_claimed: int = 0


class DraReader:
    """Reads, once per run, the resource.k8s.io version served, each ResourceClaim and each node's slices."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self._version: str | FactUnavailable | None = FactUnavailable("not read yet")
        self._version_read = False
        self._claims: dict[tuple[str, str], dict[str, Any] | FactUnavailable] = {}
        self._slices: dict[tuple[str, tuple[str, ...]], NodeSlices | FactUnavailable] = {}
        self._rules: list[TaintRule] | FactUnavailable | None = None

    def version(self) -> str | None:
        if not self._version_read:
            try:
                self._version = served_version(self.api)
            except FactUnavailable as e:
                self._version = e
            self._version_read = True
        if isinstance(self._version, FactUnavailable):
            raise self._version
        return self._version

    def slices(self, node: str, drivers: tuple[str, ...]) -> NodeSlices:
        """The node's GPU devices, with the taints of the cluster's DeviceTaintRules (read once per run)."""

        def read() -> NodeSlices:
            found = node_slices(self.api, self.version(), node, drivers)
            if found.version is None:
                return found
            if self._rules is None:
                try:
                    self._rules = device_taint_rules(self.api)
                except FactUnavailable as e:
                    self._rules = e
            return with_rules(found, self._rules)

        return remembered(self._slices, (node, drivers), read)

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            version = self.version()
            if version is None:
                raise FactUnavailable(f"ResourceClaim {namespace}/{name}: the API server serves no {GROUP} version")
            return read_claim(self.api, version, namespace, name)

        return remembered(self._claims, (namespace, name), read)

    def containers(
        self, pod: Any, node: str, drivers: tuple[str, ...], cpu_drivers: tuple[str, ...] = ()
    ) -> dict[str, ContainerDra]:
        """Container name -> its DRA GPUs, for a running pod object of the client; with `cpu_drivers`, how each
        GPU claim selected CPUs alongside (co_selection)."""
        names, uses = pod_claims(pod)
        ns = pod.metadata.namespace
        out: dict[str, ContainerDra] = {}
        for container, entries in uses.items():
            got = out.setdefault(container, ContainerDra())
            for entry, request in entries:
                claim_name = names.get(entry)
                if claim_name is None:
                    got.error = f"pod {ns}/{pod.metadata.name}: claim entry {entry!r} names no ResourceClaim (not created yet?)"
                    continue
                got.claims.append(claim_name)
                try:
                    claim = self.claim(ns, claim_name)
                except FactUnavailable as e:
                    got.error = str(e)
                    continue
                if not is_allocated(claim):
                    got.error = f"ResourceClaim {ns}/{claim_name} is not allocated, yet the pod runs"
                    continue
                try:
                    cpus = claimed_cpus(claim, request, cpu_drivers)
                except FactUnavailable as e:
                    got.error = str(e)  # this container's CPUs unknown: its checks say error, other pods go on
                    continue
                if cpus:
                    got.cpu_claims[str((claim.get("metadata") or {}).get("uid"))] = f"{ns}/{claim_name}"
                    got.cpus_claimed += cpus
                if any(r[1] in drivers for r in allocated(claim, request, admin=True)):
                    got.admin.append(f"{ns}/{claim_name}")  # e.g. a DCGM exporter's claim of every GPU
                results = [r for r in allocated(claim, request) if r[1] in drivers]
                if not results:
                    continue  # not a GPU claim (another driver's devices), or admin access only
                consumers = reserved_for(claim)
                if len(consumers) > 1:
                    got.shared[claim_name] = consumers
                got.coselection[claim_name] = co_selection(claim, drivers, cpu_drivers)
                try:
                    slices = self.slices(node, drivers)
                except FactUnavailable as e:
                    got.error = f"ResourceClaim {ns}/{claim_name} holds GPUs, but {e}"
                    continue
                for req, driver, pool, device in results:
                    published = slices.find(driver, pool, device)
                    got.devices.append(ClaimDevice(f"{ns}/{claim_name}", req, driver, pool, device, published))
        return out


# The attributes that place a device on a NUMA node or below it: a matchAttribute constraint on one of them
# across a claim's GPU and CPU requests co-selects them (kubernetes-sigs/dra-driver-cpu README: the standard
# resource.kubernetes.io/pcieRoot and resource.kubernetes.io/numaNode; its own dra.cpu/numaNodeID).
LOCALITY_ATTRIBUTES = ("resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode", "dra.cpu/numaNodeID")


def co_selection(claim: dict[str, Any], gpu_drivers: tuple[str, ...], cpu_drivers: tuple[str, ...]) -> tuple[bool, str]:
    """Whether the claim selected its CPUs with its GPUs: it holds devices of a DRA CPU driver, and one of its
    `spec.devices.constraints` (ResourceClaimSpec, k8s.io/api/resource/v1) has a matchAttribute on a locality
    attribute across a GPU request and a CPU request (no `requests`: every request of the claim). The
    scheduler then allocates only devices that share that attribute's value."""
    results = allocated(claim, None)
    gpu_reqs = {r[0].split("/")[0] for r in results if r[1] in gpu_drivers}
    cpu_reqs = {r[0].split("/")[0] for r in results if r[1] in cpu_drivers}
    if not cpu_reqs:
        return False, f"the claim holds no CPUs of a DRA CPU driver ({', '.join(cpu_drivers) or 'none configured'})"
    for c in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []:
        attr = c.get("matchAttribute")
        covered = set(c.get("requests") or (gpu_reqs | cpu_reqs))
        if attr in LOCALITY_ATTRIBUTES and covered & gpu_reqs and covered & cpu_reqs:
            return (
                True,
                f"GPU request(s) {', '.join(sorted(gpu_reqs))} and CPU request(s) {', '.join(sorted(cpu_reqs))} match {attr}",
            )
    return False, f"no matchAttribute constraint on {' or '.join(LOCALITY_ATTRIBUTES)} covers its GPU and CPU requests"
