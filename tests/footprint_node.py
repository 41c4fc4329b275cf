"""A node laid out in a folder at any size, and the processes one collection of it creates, counted by the
kernel (strace on every fork, vfork and clone that is not a thread): what the collector costs a node, whatever
the number of its processes, threads, CPUs, IRQs and GPUs. Shared by tests/test_footprint.py and
benchmarks/footprint.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakeroot import make_host_root
from tests.test_cli_local import KUBELET

COMMS = ("kworker/3:1", "ksoftirqd/7", "migration/12", "python3", "bash", "sshd", "node_exporter", "dcgm-exporter")


def build_node(root: Path, processes: int, cpus: int, irqs: int, gpus: int) -> Path:
    """A host root with `processes` processes in /proc (their comm, status and cmdline; a kubelet among them),
    `cpus` CPUs on two NUMA nodes with SMT 2, `irqs` IRQ folders with a handler each, and `gpus` NVIDIA GPUs
    (with an NVSwitch) on the PCI bus."""
    half = cpus // 2
    files: dict[str, str] = {
        "/kubelet-cwd/kubelet.yaml": KUBELET,
        "/etc/containerd/config.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        'runtime_type = "io.containerd.runc.v2"\n',
        "/sys/devices/system/cpu/online": f"0-{cpus - 1}\n",
        "/sys/devices/system/node/online": "0-1\n",
        "/sys/devices/system/node/node0/cpulist": f"0-{half // 2 - 1},{half}-{half + half // 2 - 1}\n",
        "/sys/devices/system/node/node1/cpulist": f"{half // 2}-{half - 1},{half + half // 2}-{cpus - 1}\n",
    }
    for c in range(cpus):
        files[f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"] = f"{c % half},{c % half + half}\n"
    for n in range(irqs):
        files[f"/proc/irq/{n + 24}/smp_affinity_list"] = f"0-{cpus - 1}\n"
        files[f"/proc/irq/{n + 24}/effective_affinity_list"] = f"{n % cpus}\n"
        files[f"/proc/irq/{n + 24}/mlx5_comp{n}@pci:0000:17:00.0/.keep"] = ""
    for g in range(gpus):
        bdf = f"0000:{0x18 + g:02x}:00.0"
        for attr, value in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", str(g * 2 // gpus)),
                            ("local_cpulist", "0-15"), ("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "16"),
                            ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16"), ("device", "0x2330")):  # fmt: skip
            files[f"/sys/bus/pci/devices/{bdf}/{attr}"] = value + "\n"
    if gpus:
        files.update(
            {"/sys/bus/pci/devices/0000:05:00.0/vendor": "0x10de\n", "/sys/bus/pci/devices/0000:05:00.0/class": "0x068000\n"}
        )
    for p in range(processes):
        pid = 10000 + p
        comm = COMMS[p % len(COMMS)]
        files[f"/proc/{pid}/comm"] = comm + "\n"
        files[f"/proc/{pid}/status"] = f"Name:\t{comm}\nState:\tS (sleeping)\nCpus_allowed_list:\t0-{cpus - 1}\n"
        files[f"/proc/{pid}/cmdline"] = comm + "\0"
    return make_host_root(root, ["--config", "kubelet.yaml"], files)


@dataclass
class Footprint:
    processes: int  # fork, vfork and clone (not threads) of the shell and everything it started
    programs: int  # execve
    cpu_s: float  # user + system CPU of the collection (children included)
    wall_s: float
    output_bytes: int


CLONE = re.compile(r"\b(clone3?|fork|vfork)\(")


def measure(script: bytes, argv: list[str], trace: Path, env: dict[str, str] | None = None, runs: int = 1) -> Footprint:
    """Run `sh -s -- ARGV` with `script` on stdin under strace, counting what it creates, then `runs` times alone,
    timing it (strace's own cost is not the collector's): the median run's CPU and wall time (a shared machine's
    neighbours move one run's figures by a fifth either way)."""
    strace = shutil.which("strace")
    assert strace, "strace is needed to count process creation (apt-get install strace)"
    subprocess.run([strace, "-f", "-qq", "-e", "trace=process", "-o", str(trace), "sh", "-s", "--", *argv],
                   input=script, capture_output=True, timeout=600, check=False, env=env)  # fmt: skip
    processes = programs = 0
    for line in trace.read_text().splitlines():
        m = CLONE.search(line)
        if m and "CLONE_THREAD" not in line and "resumed>" not in line[: m.start()]:
            processes += 1
        elif " execve(" in line and line.rstrip().endswith("= 0"):  # a PATH search's failed tries are not programs
            programs += 1
    timed = []
    for _ in range(runs):
        before, t0 = _children_cpu(), time.monotonic()
        p = subprocess.run(["sh", "-s", "--", *argv], input=script, capture_output=True, timeout=600, check=False, env=env)
        timed.append((_children_cpu() - before, time.monotonic() - t0, len(p.stdout)))
    cpu, wall, size = sorted(timed)[len(timed) // 2]
    return Footprint(processes, programs, cpu, wall, size)


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
