"""Exclusive CPUs handed out by a DRA CPU driver instead of the kubelet's CPU manager (issue 52 item 5).

kubernetes-sigs/dra-driver-cpu (driver `dra.cpu`, v0.1 to v0.2; the kubelet runs `cpuManagerPolicy: none`, its
docs/user/configuration.md "Kubelet configuration prerequisites") picks the CPUs of each prepared ResourceClaim
(in `individual` mode the allocated devices are CPUs; in the default `grouped` mode a device is a NUMA node or
socket with consumable capacity `dra.cpu/cpu`, and the driver chooses which of its CPUs), then writes one CDI spec
per claim: kind `dra.k8s.io/cpu`, device `claim-<claim UID>`, with the environment edit
`DRA_CPUSET_<claim UID>=<cpulist>` (pkg/driver/cdi.go AddDevice, dra_hooks.go prepareDevices), in /var/run/cdi
as `dra.k8s.io-cpu_claim-<UID>.json`. Its NRI plugin pins each such container's cpuset to that list and confines
every other container to the rest (the shared pool). Those specs are the node's record of every exclusive
allocation, as cpu_manager_state is the kubelet's."""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.errors import FactUnavailable, ParseError
from conformance.facts.cdi import CdiRegistry
from conformance.facts.cpulist import parse_cpulist

KIND = "dra.k8s.io/cpu"
ENV_PREFIX = "DRA_CPUSET_"
SPEC_PREFIX = "dra.k8s.io-cpu_"  # the transient spec names the driver writes (GenerateTransientSpecName)


def claim_cpu_sets(reg: CdiRegistry) -> dict[str, tuple[frozenset[int], str]]:
    """Claim UID -> (its CPUs, the spec file), from the driver's CDI specs. A spec of the driver that could not be
    read leaves the node's allocations unknown; a device without its DRA_CPUSET value is a ParseError."""
    unread = sorted(p for p in reg.errors if p.rsplit("/", 1)[-1].startswith(SPEC_PREFIX))
    if unread:
        raise FactUnavailable(f"the DRA CPU driver's CDI spec {unread[0]} could not be read: {reg.errors[unread[0]]}")
    out: dict[str, tuple[frozenset[int], str]] = {}
    for spec in reg.of_kind(KIND):
        for name in spec.devices:
            if not name.startswith("claim-"):
                continue
            uid = name.removeprefix("claim-")
            values = [e.split("=", 1)[1] for e in spec.env.get(name, []) if e.startswith(f"{ENV_PREFIX}{uid}=")]
            if len(values) != 1:
                raise ParseError(f"{spec.path}: device {name} sets {ENV_PREFIX}{uid} {len(values)} times (expected once)")
            out[uid] = (parse_cpulist(values[0], what=f"{spec.path}: {ENV_PREFIX}{uid}"), spec.path)
    return out


@dataclass
class DraCpuAssignments:
    """The node's exclusive CPUs as the DRA CPU driver recorded them, shaped as the pod checks read
    cpu_manager_state: `entries` keyed "DRA claim <UID>", the shared pool the online CPUs no claim holds."""

    claims: dict[str, frozenset[int]]
    specs: dict[str, str]
    default_cpus: frozenset[int]
    entries: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    pod_entries: dict[str, frozenset[int]] = field(default_factory=dict)
    policy: str = "dra"
    owner: str = "the DRA CPU driver"
    record: str = "the DRA CPU driver's CDI specs (/var/run/cdi, kind dra.k8s.io/cpu)"

    @classmethod
    def of(cls, sets: dict[str, tuple[frozenset[int], str]], online: frozenset[int]) -> DraCpuAssignments:
        claims = {uid: cpus for uid, (cpus, _) in sets.items()}
        held = frozenset().union(*claims.values()) if claims else frozenset()
        return cls(
            claims=claims,
            specs={uid: path for uid, (_, path) in sets.items()},
            default_cpus=online - held,
            entries={f"DRA claim {uid}": {"": cpus} for uid, cpus in claims.items()},
        )
