"""Site-check material shared by the tests: a rule file with every matcher passing and failing, the
node files it judges, and a Python site check that uses testinfra's `host`."""

from __future__ import annotations

import grp
import os
import pwd

ME = pwd.getpwuid(os.getuid()).pw_name

DPKG_STATUS = """\
Package: nvidia-container-toolkit
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 1.17.8-1

Package: nvidia-driver-550
Status: install ok installed
Version: 550.54.15-0ubuntu1
Description: NVIDIA driver metapackage
 a continuation line: Version: 999 (not a field)

Package: nvidia-fabricmanager-550
Status: deinstall ok config-files
Version: 550.90.07-1
"""

# node path -> content: what every matcher reads
NODE_FILES = {
    "/etc/gnc/site.conf": "alpha\nbeta=42\n",
    "/etc/gnc/app.yaml": "server:\n  port: 8080\n",
    "/etc/gnc/app.json": '{"a": {"b": 3}}',
    "/etc/gnc/app.toml": "version = 3\n",
    "/etc/gnc/broken.yaml": "key: [unclosed\n",
    "/proc/sys/vm/nr_hugepages": "2048\n",
    "/proc/sys/net/core/somaxconn": "4096\n",
    "/proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet iommu=pt intel_iommu=on\n",
    # modules.builtin(5) of the kernel the tests run on: the collector reads the node's own uname -r
    f"/lib/modules/{os.uname().release}/modules.builtin": "kernel/drivers/nvme/host/nvme-core.ko\nkernel/fs/ext4/ext4.ko\n",
    "/etc/systemd/system/irqbalance.service": "",
    "/usr/lib/systemd/system/irqbalance.service": "[Service]\nExecStart=/usr/sbin/irqbalance\n",
    "/lib/systemd/system/nvidia-persistenced.service": "[Service]\nExecStart=/usr/bin/nvidia-persistenced\n",
    "/proc/modules": "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\nnouveau 2301952 0 - Live 0x0000000000000000\n",
    "/sys/fs/cgroup/system.slice/nvidia-persistenced.service/cgroup.events": "populated 1\nfrozen 0\n",
    "/sys/fs/cgroup/system.slice/idle.service/cgroup.events": "populated 0\nfrozen 0\n",
    # a template instance sits in its template's slice, '-' escaped (systemd.slice(5))
    "/sys/fs/cgroup/system.slice/system-serial\\x2dgetty.slice/serial-getty@ttyS0.service/cgroup.events": (
        "populated 1\nfrozen 0\n"
    ),
    # Delegate=yes: the service's own cgroup.procs is empty, its processes are in a child; populated covers it
    "/sys/fs/cgroup/system.slice/containerd.service/cgroup.events": "populated 1\nfrozen 0\n",
    # moved out of system.slice with Slice= (EKS AL2023 puts its container runtime in runtime.slice), and nested
    "/sys/fs/cgroup/runtime.slice/crio.service/cgroup.events": "populated 1\nfrozen 0\n",
    "/sys/fs/cgroup/gpu.slice/gpu-monitor.slice/dcgm.service/cgroup.events": "populated 1\nfrozen 0\n",
    "/sys/fs/cgroup/system.slice/containerd.service/cgroup.procs": "",
    # cgroup v1 (name=systemd): a Delegate=yes unit with its process in a child cgroup, and an idle one
    "/sys/fs/cgroup/systemd/system.slice/docker.service/cgroup.procs": "",
    "/sys/fs/cgroup/systemd/system.slice/docker.service/daemon/cgroup.procs": "1234\n",
    "/sys/fs/cgroup/systemd/system.slice/v1idle.service/cgroup.procs": "",
    "/sys/fs/cgroup/systemd/system.slice/v1idle.service/empty/cgroup.procs": "",
    "/var/lib/dpkg/status": DPKG_STATUS,
    # the node's own names for owners (under a host root the runner's /etc/passwd does not name them)
    "/etc/passwd": f"{ME}:x:{os.getuid()}:{os.getgid()}:node user:/:/bin/sh\n",
    "/etc/group": f"{grp.getgrgid(os.getgid()).gr_name}:x:{os.getgid()}:\n",
}
NODE_MODES = {"/etc/gnc/site.conf": 0o640}
NODE_LINKS = {
    "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service": "/lib/systemd/system/nvidia-persistenced.service",
    "/etc/systemd/system/ondemand.service": "/dev/null",
    "/run/systemd/system/thermald.service": "/dev/null",  # systemctl mask --runtime
    "/usr/lib/systemd/system/thermald.service": "/dev/null",
}


def rule(rid: str, severity: str, matcher: str) -> str:
    return f"""  - id: {rid}
    severity: {severity}
    title: {rid.lower()}
    rationale: why {rid} matters
    remediation: how to fix {rid}
    {matcher}
"""


RULES = "checks:\n" + "".join(
    [
        rule(
            "SITE-FILE-OK",
            "medium",
            f'file: {{path: /etc/gnc/site.conf, owner: {ME}, mode: "0640", contains: alpha, '
            r"regex: '^beta=\d+$', not_contains: gamma}",
        ),
        rule("SITE-FILE-EQUALS", "low", 'file: {path: /etc/gnc/site.conf, equals: "alpha\\nbeta=42"}'),
        rule("SITE-FILE-NOT-EQUAL", "low", "file: {path: /etc/gnc/site.conf, equals: alpha}"),
        rule("SITE-FILE-MODE", "low", 'file: {path: /etc/gnc/site.conf, mode_max: "0600"}'),
        rule("SITE-FILE-ABSENT", "low", "file: {path: /swapfile, exists: false}"),
        rule("SITE-FILE-PRESENT", "low", "file: {path: /etc/gnc/site.conf, exists: false}"),
        rule("SITE-FILE-MISSING", "low", "file: {path: /etc/gnc/none.conf, contains: x}"),
        rule("SITE-YAML-KEY", "low", "file: {path: /etc/gnc/app.yaml, format: yaml, key: server.port, value: 8080}"),
        rule("SITE-JSON-KEY", "low", "file: {path: /etc/gnc/app.json, format: json, key: a.b, min: 10}"),
        rule("SITE-TOML-KEY", "low", "file: {path: /etc/gnc/app.toml, format: toml, key: version, in: [2, 3]}"),
        rule("SITE-YAML-BROKEN", "low", "file: {path: /etc/gnc/broken.yaml, format: yaml, key: key, value: x}"),
        rule("SITE-HUGEPAGES", "low", "sysctl: {name: vm.nr_hugepages, min: 1024}"),
        rule("SITE-SOMAXCONN", "low", "sysctl: {name: net.core.somaxconn, equals: 65535}"),
        rule("SITE-IOMMU-PT", "medium", "cmdline: {has: iommu=pt}"),
        rule("SITE-NOT-QUIET", "low", "cmdline: {lacks: quiet}"),
        # the kernel reads '-' and '_' in a parameter's name alike (kernel/params.c parameq): intel_iommu=on
        rule("SITE-INTEL-IOMMU", "medium", "cmdline: {has: intel-iommu=on}"),
        rule("SITE-IOMMU-VALUE", "low", "cmdline: {has: iommu=PT}"),  # values are compared as written
        rule("SITE-PEERMEM", "high", "module: {name: nvidia-peermem}"),
        rule("SITE-NO-NOUVEAU", "high", "module: {name: nouveau, loaded: false}"),
        rule("SITE-NVME-CORE", "low", "module: {name: nvme_core}"),  # built in: modules.builtin
        rule("SITE-NO-EXT4", "low", "module: {name: ext4, loaded: false}"),
        rule("SITE-NO-VFIO", "low", "module: {name: vfio_pci, loaded: false}"),
        rule("SITE-PERSISTENCED", "medium", "systemd: {unit: nvidia-persistenced.service, running: true, enabled: true}"),
        rule("SITE-FABRICMANAGER", "critical", "systemd: {unit: nvidia-fabricmanager.service, running: true}"),
        rule("SITE-SERIAL-GETTY", "low", "systemd: {unit: serial-getty@ttyS0.service, running: true}"),
        rule("SITE-DELEGATED", "low", "systemd: {unit: containerd.service, running: true}"),
        rule("SITE-DELEGATED-V1", "low", "systemd: {unit: docker.service, running: true}"),
        rule("SITE-IDLE-V1", "low", "systemd: {unit: v1idle.service, running: true}"),
        rule("SITE-IDLE-NOT-RUNNING", "low", "systemd: {unit: idle.service, running: false, enabled: false}"),
        rule("SITE-OWN-SLICE", "low", "systemd: {unit: crio.service, running: true}"),
        rule("SITE-OWN-SLICE-STOPPED", "low", "systemd: {unit: crio.service, running: false}"),
        rule("SITE-NESTED-SLICE", "low", "systemd: {unit: dcgm.service, running: true}"),
        rule("SITE-ONDEMAND-MASKED", "low", "systemd: {unit: ondemand.service, masked: true}"),
        rule("SITE-THERMALD-RUNTIME-MASK", "low", "systemd: {unit: thermald.service, masked: false}"),
        rule("SITE-EMPTY-UNIT-MASKED", "low", "systemd: {unit: irqbalance.service, masked: true}"),
        rule("SITE-REAL-UNIT", "low", "systemd: {unit: nvidia-persistenced.service, masked: true}"),
        rule("SITE-TOOLKIT", "high", 'package: {name: nvidia-container-toolkit, version: ">=1.17.8"}'),
        rule("SITE-TOOLKIT-AMD64", "high", 'package: {name: "nvidia-container-toolkit:amd64", version: ">=1.17.8"}'),
        rule("SITE-TOOLKIT-I386", "low", 'package: {name: "nvidia-container-toolkit:i386"}'),
        rule("SITE-DRIVER", "high", 'package: {name: nvidia-driver-550, version: ">=550.90.07"}'),
        rule("SITE-FM-PACKAGE", "low", "package: {name: nvidia-fabricmanager-550}"),
    ]
)
EXPECTED = {
    "SITE-FILE-OK": "passed",
    "SITE-FILE-EQUALS": "passed",
    "SITE-FILE-NOT-EQUAL": "failed",
    "SITE-FILE-MODE": "failed",
    "SITE-FILE-ABSENT": "passed",
    "SITE-FILE-PRESENT": "failed",
    "SITE-FILE-MISSING": "failed",
    "SITE-YAML-KEY": "passed",
    "SITE-JSON-KEY": "failed",
    "SITE-TOML-KEY": "passed",
    "SITE-YAML-BROKEN": "error",
    "SITE-HUGEPAGES": "passed",
    "SITE-SOMAXCONN": "failed",
    "SITE-IOMMU-PT": "passed",
    "SITE-NOT-QUIET": "failed",
    "SITE-INTEL-IOMMU": "passed",
    "SITE-IOMMU-VALUE": "failed",
    "SITE-PEERMEM": "passed",
    "SITE-NO-NOUVEAU": "failed",
    "SITE-NVME-CORE": "passed",
    "SITE-NO-EXT4": "failed",  # built into the kernel
    "SITE-NO-VFIO": "passed",
    "SITE-PERSISTENCED": "passed",
    "SITE-FABRICMANAGER": "failed",
    "SITE-SERIAL-GETTY": "passed",
    "SITE-DELEGATED": "passed",
    "SITE-DELEGATED-V1": "passed",  # its process is in a child cgroup
    "SITE-IDLE-V1": "failed",
    "SITE-IDLE-NOT-RUNNING": "passed",
    "SITE-OWN-SLICE": "passed",  # it failed: only system.slice was looked at
    "SITE-OWN-SLICE-STOPPED": "failed",  # it passed: "not running" for a unit that runs elsewhere
    "SITE-NESTED-SLICE": "passed",
    "SITE-ONDEMAND-MASKED": "passed",
    "SITE-THERMALD-RUNTIME-MASK": "failed",  # masked in /run, which comes before /usr/lib
    "SITE-EMPTY-UNIT-MASKED": "passed",  # an empty unit file masks it
    "SITE-REAL-UNIT": "failed",
    "SITE-TOOLKIT": "passed",
    "SITE-TOOLKIT-AMD64": "passed",
    "SITE-TOOLKIT-I386": "failed",  # dpkg-query: no such architecture installed
    "SITE-DRIVER": "failed",
    "SITE-FM-PACKAGE": "failed",  # deinstalled, only its config files remain
}

PYTHON_CHECK = """\
from conformance.checks import check


@check("SITE-PY-ECHO", "low", title="a command runs through host", rationale="r", remediation="m", source="host.run")
def test_echo(node, host, evidence):
    r = host.run("printf '%%s' %s", "hello$(touch /tmp/gnc-site-pwned)")
    evidence.add(r.stdout)
    assert r.rc == 0 and r.stdout == "hello$(touch /tmp/gnc-site-pwned)"


@check("SITE-PY-FILE", "medium", title="a file test -e cannot find", rationale="r", remediation="m", source="host.run")
def test_file(node, host):
    assert host.run("test -e %s", "/etc/gnc-no-such-file").rc == 0, "/etc/gnc-no-such-file does not exist"
"""
PYTHON_EXPECTED = {"SITE-PY-ECHO": "passed", "SITE-PY-FILE": "failed"}
PYTHON_COMMANDS = 2  # two host.run calls: one remote execution each
