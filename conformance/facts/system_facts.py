"""The system's facts of one node: cgroups (version, the pod tree's driver), network sysctls, the kernel's
release and block-device schedulers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.errors import FactUnavailable
from conformance.facts import kernel
from conformance.facts.node_base import FactsBase, fact
from conformance.facts.releases import Release, parse_release

NVME_SCHEDULER = re.compile(r"/sys/block/(nvme[^/]*)/queue/scheduler")


@dataclass
class Sysctls:
    tcp_tw_reuse: int
    somaxconn: int
    port_range: tuple[int, int]
    reserved_ports: set[int]


class SystemFacts(FactsBase):
    """The system's facts, each read on first use from the collected bundle."""

    @fact
    def cgroup_version(self) -> int:
        self.require_reachable()
        rec = self.bundle.command("stat-cgroup")
        if rec.status != "0":
            raise FactUnavailable(f"stat -fc %t /sys/fs/cgroup failed (exit {rec.status}) on node {self.name}")
        return kernel.cgroup_version(rec.data.decode("utf-8", "replace"))

    @fact
    def kubepods_driver(self) -> tuple[str | None, str]:
        self.require_reachable()
        dirs = self.bundle.dirs()
        unseen = [d for d in kernel.KUBEPODS_DIRS if d not in dirs]
        if unseen:  # a layout not looked for is unknown, never "absent" (which would leave the kubelet config to decide)
            raise FactUnavailable(f"node {self.name}: whether {unseen[0]} exists was not looked at (an older snapshot)")
        return kernel.kubepods_driver(dirs)

    @fact
    def kubelet_cgroup_driver(self) -> tuple[str, str, str]:
        """(driver, the source that decided, how). Since Kubernetes 1.31 the kubelet takes the driver from the
        runtime, so the pod cgroup tree decides when it exists; the kubelet config otherwise."""
        driver, why = self.kubepods_driver
        if driver is not None:
            return driver, "pod cgroup tree", why
        s = self.kubelet_config.get("cgroupDriver")
        return str(s.value), "kubelet config cgroupDriver", f"{why}; {s.describe()}"

    @fact
    def sysctls(self) -> Sysctls:
        self.require_reachable()
        b = self.bundle
        return Sysctls(
            tcp_tw_reuse=kernel.parse_int_sysctl(b.text("/proc/sys/net/ipv4/tcp_tw_reuse"), "net.ipv4.tcp_tw_reuse"),
            somaxconn=kernel.parse_int_sysctl(b.text("/proc/sys/net/core/somaxconn"), "net.core.somaxconn"),
            port_range=kernel.parse_port_range(b.text("/proc/sys/net/ipv4/ip_local_port_range")),
            reserved_ports=kernel.parse_port_set(b.text("/proc/sys/net/ipv4/ip_local_reserved_ports")),
        )

    @fact
    def kernel_release(self) -> Release:
        rec = self.bundle.command("uname")
        if rec.status != "0":
            raise FactUnavailable(f"uname -r exited {rec.status}: the kernel release is unknown")
        return parse_release(rec.data.decode("utf-8", "replace"), "uname -r")

    @fact
    def nvme_schedulers(self) -> dict[str, str]:
        self.require_reachable()
        out = {}
        for dev, path in self.listed("/sys/block/nvme*/queue/scheduler", NVME_SCHEDULER, "a scheduler file"):
            out[dev] = kernel.parse_scheduler(self.bundle.text(path), dev)
        return out
