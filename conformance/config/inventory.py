"""The inventory: which nodes to audit, how to reach them and which profile applies.

Every problem is reported as `FILE: nodes[i] (name): field: problem`, so it can be fixed in one go.
The same rules are published as a JSON Schema in `inventory/inventory.schema.json`.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.config.endpoints import Endpoint, parse_endpoints
from conformance.config.kubernetes import KubeSpec
from conformance.config.kubernetes import parse_spec as parse_kube_spec
from conformance.config.validation import each_mapping, read_yaml, typed_fields, unknown_fields
from conformance.errors import UsageError

NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
SSH_KEYS = {
    "user": str,
    "port": int,
    "identity_file": str,
    "known_hosts": str,
    "proxy_jump": str,
    "ssh_config": str,
    "insecure_accept_unknown_host_keys": bool,
    "connect_timeout": (int, float),
}
NODE_KEYS = {"name", "address", "transport", "ssh", "profile", "labels", "host_root", "endpoints", "dcgm_exporter"}
DEFAULT_KEYS = {"ssh", "profile", "transport", "labels"}
TOP_KEYS = {"defaults", "nodes", "profile_rules", "kubernetes", "site_checks"}
RULE_KEYS = {"nodes", "labels", "profile"}


@dataclass
class NodeSpec:
    name: str
    transport: str = "ssh"
    address: str | None = None
    ssh: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    host_root: str = ""
    endpoints: list[Endpoint] = field(default_factory=list)
    dcgm_exporter: str | None = None  # the exporter's metrics URL, where the Kubernetes API is not used
    discovered: str | None = None  # why the Kubernetes API named this node (None: inventory only)
    gpu_capacity: int | None = None  # the node's nvidia.com/gpu capacity, from the API
    gpu_resources: dict[str, int] = field(default_factory=dict)  # every nvidia.com/* capacity (MIG slices too)
    # every nvidia.com/* allocatable: a device plugin leaves the devices it reports unhealthy out of it
    gpu_allocatable: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "address": self.address,
            "profile": self.profile,
            "labels": dict(self.labels),
        }


@dataclass
class ProfileRule:
    """Select a profile by node-name glob and/or node labels (all given conditions must hold)."""

    profile: str
    nodes: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def matches(self, node: NodeSpec) -> bool:
        if self.nodes is not None and not fnmatch.fnmatchcase(node.name, self.nodes):
            return False
        return all(node.labels.get(k) == v for k, v in self.labels.items())

    def describe(self) -> str:
        conds = ([f"name matches {self.nodes!r}"] if self.nodes else []) + [f"label {k}={v}" for k, v in self.labels.items()]
        return " and ".join(conds)


@dataclass
class Inventory:
    path: str
    nodes: list[NodeSpec]
    default_profile: str | None = None
    rules: list[ProfileRule] = field(default_factory=list)
    kubernetes: KubeSpec | None = None
    defaults: dict[str, Any] = field(default_factory=dict)  # validated: transport, ssh, labels (for discovered nodes)
    site_checks: list[str] = field(default_factory=list)  # site rule files and folders, relative paths resolved

    def select_profile(self, node: NodeSpec) -> tuple[str | None, str]:
        """The node's profile reference and why: its own, else the first matching rule, else defaults."""
        if node.profile:
            return self._resolve(node.profile), "set on the node"
        for i, rule in enumerate(self.rules):
            if rule.matches(node):
                return self._resolve(rule.profile), f"profile_rules[{i}]: {rule.describe()}"
        if self.default_profile:
            return self._resolve(self.default_profile), "inventory defaults"
        return None, "built-in default"

    def _resolve(self, ref: str) -> str:
        """A profile path is relative to the inventory file's folder; a bare name is a bundled profile."""
        if ("/" in ref or ref.endswith((".yaml", ".yml"))) and not ref.startswith(("/", "~")) and Path(self.path).is_file():
            return str(Path(self.path).parent / ref)
        return ref


def local_inventory(host_root: str = "") -> Inventory:
    """The embedded default: audit this machine through the local transport."""
    import os
    import socket

    # In a pod (in-cluster mode) the node's name comes from the downward API; else the host name.
    name = os.environ.get("GNC_NODE_NAME") or socket.gethostname() or "localhost"
    if not NAME_RE.match(name):
        name = "localhost"
    return Inventory("(this machine)", [NodeSpec(name=name, transport="local", host_root=host_root)])


def _check_ssh(block: Any, where: str, errors: list[str]) -> dict[str, Any]:
    if not isinstance(block, dict):
        errors.append(f"{where}: must be a mapping of SSH settings")
        return {}
    valid = typed_fields(block, SSH_KEYS, where, errors)
    if "port" in valid and not 0 < valid["port"] < 65536:
        errors.append(f"{where}.port: {valid['port']} is not a TCP port")
    return block


def _check_labels(block: Any, where: str, errors: list[str]) -> dict[str, str]:
    if not isinstance(block, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in block.items()):
        errors.append(f"{where}: must be a mapping of string keys to string values")
        return {}
    return dict(block)


def _parse_node(i: int, entry: Any, base: dict[str, Any], seen: set[str], errors: list[str]) -> NodeSpec | None:
    """One `nodes[i]` entry over the defaults (`base`: ssh, labels, transport); problems go to `errors`."""
    where = f"nodes[{i}]"
    if not isinstance(entry, dict):
        errors.append(f"{where}: must be a mapping with at least 'name'")
        return None
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        errors.append(f"{where}.name: {name!r} is not a valid node name (letters, digits, '.', '-', '_')")
        name = f"#{i}"
    else:
        where = f"nodes[{i}] ({name})"
        if name in seen:
            errors.append(f"{where}.name: duplicate node name")
        seen.add(name)
    unknown_fields(entry, NODE_KEYS, where, errors)
    transport = entry.get("transport", base["transport"])
    if transport not in ("ssh", "openssh", "local"):
        errors.append(f"{where}.transport: {transport!r} is not one of ssh, openssh, local")
    address = entry.get("address")
    if address is not None and (not isinstance(address, str) or not address or any(c.isspace() for c in address)):
        errors.append(f"{where}.address: {address!r} is not a host name or IP address")
    ssh = dict(base["ssh"])
    ssh.update(_check_ssh(entry.get("ssh", {}), f"{where}.ssh", errors))
    if transport in ("ssh", "openssh") and not address and not ssh.get("ssh_config"):
        errors.append(f"{where}.address: required for transport ssh (or give ssh.ssh_config with a Host entry)")
    host_root = entry.get("host_root", "")
    if not isinstance(host_root, str) or (host_root and not host_root.startswith("/")):
        errors.append(f"{where}.host_root: must be an absolute path such as /host")
        host_root = ""
    if host_root and transport != "local":
        errors.append(f"{where}.host_root: only applies to transport local")
    profile = entry.get("profile")
    if profile is not None and not isinstance(profile, str):
        errors.append(f"{where}.profile: must be a profile name or file path")
    labels = dict(base["labels"])
    labels.update(_check_labels(entry.get("labels", {}), f"{where}.labels", errors))
    dcgm = entry.get("dcgm_exporter")
    if dcgm is not None and (not isinstance(dcgm, str) or not dcgm.startswith(("http://", "https://"))):
        errors.append(f"{where}.dcgm_exporter: {dcgm!r} is not an http(s) URL of the exporter's /metrics")
        dcgm = None
    return NodeSpec(
        name=name,
        transport=transport,
        address=address,
        ssh=ssh,
        profile=profile,
        labels=labels,
        host_root=host_root.rstrip("/"),
        endpoints=parse_endpoints(entry.get("endpoints", []), f"{where}.endpoints", errors),
        dcgm_exporter=dcgm,
    )


def parse_inventory(doc: Any, path: str) -> Inventory:
    errors: list[str] = []
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: the inventory must be a mapping with 'nodes' (and optionally 'defaults')")
    for k in doc:
        if k not in TOP_KEYS:
            errors.append(f"{k}: unknown top-level field (allowed: defaults, nodes, profile_rules, kubernetes, site_checks)")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        errors.append("defaults: must be a mapping")
        defaults = {}
    unknown_fields(defaults, DEFAULT_KEYS, "defaults", errors)
    d_ssh = _check_ssh(defaults.get("ssh", {}), "defaults.ssh", errors)
    d_labels = _check_labels(defaults.get("labels", {}), "defaults.labels", errors)
    d_profile = defaults.get("profile")
    if d_profile is not None and not isinstance(d_profile, str):
        errors.append("defaults.profile: must be a profile name or file path")
    d_transport = defaults.get("transport", "ssh")
    kube = parse_kube_spec(doc.get("kubernetes"), errors)
    nodes_raw = doc.get("nodes", [] if kube and kube.discover else None)
    if not isinstance(nodes_raw, list) or (not nodes_raw and not (kube and kube.discover)):
        errors.append("nodes: must be a non-empty list of node entries (or give kubernetes: to discover them)")
        nodes_raw = []
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    base = {"ssh": d_ssh, "labels": d_labels, "transport": d_transport}
    for i, entry in enumerate(nodes_raw):
        node = _parse_node(i, entry, base, seen, errors)
        if node is not None:
            nodes.append(node)
    rules = _parse_rules(doc.get("profile_rules", []), errors)
    site = doc.get("site_checks", [])
    if not isinstance(site, list) or not all(isinstance(x, str) and x for x in site):
        errors.append("site_checks: must be a list of site rule files or folders (paths relative to the inventory)")
        site = []
    folder = Path(path).parent
    site = [x if Path(x).is_absolute() else str(folder / x) for x in site]
    if errors:
        raise UsageError(f"{path}: invalid inventory:\n  " + "\n  ".join(errors))
    defaults_json = {"transport": d_transport, "ssh": d_ssh, "labels": d_labels}
    return Inventory(
        path=path, nodes=nodes, default_profile=d_profile, rules=rules, kubernetes=kube, defaults=defaults_json, site_checks=site
    )


def merge_discovered(inv: Inventory, found: list[Any]) -> Inventory:
    """Add the nodes the Kubernetes API named to the inventory. A node in both keeps its inventory
    entry (address, transport, ssh) and gains the API's labels under its own; others get the
    inventory defaults and their InternalIP as SSH address."""
    by_name = {n.name: n for n in inv.nodes}
    for d in found:
        node = by_name.get(d.name)
        if node is not None:
            node.labels = {**d.labels, **node.labels}
            node.discovered = f"{d.why}; also in the inventory"
            node.gpu_capacity = d.gpus
            node.gpu_resources = dict(d.resources)
            node.gpu_allocatable = dict(d.allocatable)
            if not node.address and node.transport != "local":
                node.address = d.internal_ip
            continue
        if not NAME_RE.match(d.name):
            continue
        node = NodeSpec(
            name=d.name,
            transport=inv.defaults.get("transport", "ssh"),
            address=d.internal_ip,
            ssh=dict(inv.defaults.get("ssh") or {}),
            labels={**(inv.defaults.get("labels") or {}), **d.labels},
            discovered=d.why,
            gpu_capacity=d.gpus,
            gpu_resources=dict(d.resources),
            gpu_allocatable=dict(d.allocatable),
        )
        inv.nodes.append(node)
        by_name[d.name] = node
    return inv


def _parse_rules(raw: Any, errors: list[str]) -> list[ProfileRule]:
    rules = []
    for _, where, r in each_mapping(raw, "profile_rules", RULE_KEYS, errors, "{nodes: GLOB, labels: {...}, profile: NAME}"):
        if not isinstance(r.get("profile"), str):
            errors.append(f"{where}.profile: required, a profile name or file path")
        if r.get("nodes") is not None and not isinstance(r.get("nodes"), str):
            errors.append(f"{where}.nodes: must be a node-name glob such as 'h100-*'")
        labels = _check_labels(r.get("labels", {}), f"{where}.labels", errors)
        if r.get("nodes") is None and not labels:
            errors.append(f"{where}: give nodes (a name glob) or labels, or both")
        rules.append(ProfileRule(profile=str(r.get("profile")), nodes=r.get("nodes"), labels=labels))
    return rules


def load_inventory(path: str | Path) -> Inventory:
    p = Path(path)
    return parse_inventory(read_yaml(p, "inventory"), str(p))
