"""Fleet benchmark: a lab of N simulated nodes (network namespaces, real sshd) behind 50 ms
round-trip delay lines, audited by the real `conformance run`; and, on the same lab for N = 10, the
naive approach a testinfra user would write (testinfra's paramiko backend, one connection per node
reused, one command per fact, nodes one after another).

    sudo python -m benchmarks.fleet [--sizes 10,50,100,200] [--parallel 64] [--repeat 3]

For each size, --repeat rounds, each timing back to back (in alternating order, so that drift in this
shared machine's speed falls on both): the floor of any SSH-based audit here, plain OpenSSH sending the
very same collector bytes to the same nodes --parallel at a time; `conformance run`; and `conformance
collect` (the same collection without pytest); and the run with one pytest item per check
(`--items=check`; `conformance run` uses one item per node at these sizes). Prints per size the medians and range of: wall time,
nodes per second, remote executions per node, peak memory, the run's CPU per node (user + system of
its process, paramiko's threads included), the ratio run / floor (of each round's pair), and what the
run's CPU is made of: the collection (`conformance collect`), and pytest's own floor, that is pytest
with the same plugins and output options running as many empty tests as the run had checks; and how
busy the whole machine (2 cores, shared by the runner, the lab's nodes and the relay) was. Then
the naive time for 10 nodes and that ratio. Issue 16's goals: ratio <= 1.10 and CPU <= 40 ms per
node at 100 and 200 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.delayline import DelayLines, measure_round_trip
from tests.lab.builder import Lab, NodeSpec, lab_available
from tests.lab.nodes import GOOD_ARGS, GOOD_FILES, GOOD_SYSCTLS

# What the collector reads on a conformant lab node, as a testinfra user would fetch it: one call each.
NAIVE_FACTS = [
    "cat /proc/sys/kernel/hostname",
    "uname -r",
    "stat -fc %T /sys/fs/cgroup",
    "pgrep -x kubelet",
    "pgrep -x containerd",
    "cat /proc/$(pgrep -x kubelet)/cmdline",
    "readlink /proc/$(pgrep -x kubelet)/cwd",
    "cat /etc/kubernetes/kubelet-config.yaml",
    "ls /etc/kubernetes/kubelet.conf.d/",
    "cat /etc/kubernetes/kubelet.conf.d/10-topology.conf",
    "cat /var/lib/kubelet/cpu_manager_state",
    "cat /var/lib/kubelet/memory_manager_state",
    "cat /etc/containerd/config.toml",
    "ls /etc/containerd/conf.d/",
    "cat /etc/containerd/conf.d/99-nvidia.toml",
    "cat /etc/crio/crio.conf",
    "ls /etc/crio/crio.conf.d/",
    "test -d /sys/fs/cgroup/kubepods.slice",
    "test -d /sys/fs/cgroup/kubepods",
    "cat /proc/sys/net/ipv4/tcp_tw_reuse",
    "cat /proc/sys/net/core/somaxconn",
    "cat /proc/sys/net/ipv4/ip_local_port_range",
    "cat /proc/sys/net/ipv4/ip_local_reserved_ports",
    "cat /sys/devices/system/node/online",
    "cat /sys/devices/system/cpu/online",
    "cat /sys/devices/system/node/node0/cpulist",
    "cat /sys/devices/system/node/node1/cpulist",
    *[f"cat /sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list" for c in range(16)],
    "ls /sys/block/",
    "cat /sys/block/nvme0n1/queue/scheduler",
]


def build_lab(root: Path, n: int) -> Lab:
    lab = Lab(root)
    for i in range(n):
        lab.add(
            NodeSpec(
                name=f"node-{i:03d}",
                kubelet_args=GOOD_ARGS,
                files=dict(GOOD_FILES),
                sysctls=GOOD_SYSCTLS,
                nvme={"nvme0n1": "[none] mq-deadline"},
            )
        )
    lab.start()
    return lab


def relay_inventory(lab: Lab, lines: DelayLines, nodes: int, tmp: Path) -> Path:
    kh = tmp / "known_hosts_relay"
    keys = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lab.known_hosts.read_text().splitlines()}
    kh.write_text(
        "".join(f"[127.0.0.1]:{port} {keys[node.address]}\n" for node, port in zip(lab.nodes, lines.ports, strict=True))
    )
    inv = tmp / f"inventory-{nodes}.yaml"
    rows = [
        f"  - {{name: {n.spec.name}, address: 127.0.0.1, ssh: {{port: {p}}}}}"
        for n, p in zip(lab.nodes[:nodes], lines.ports[:nodes], strict=True)
    ]
    inv.write_text(
        f"defaults:\n  ssh: {{user: root, identity_file: {lab.client_key}, known_hosts: {kh}}}\nnodes:\n" + "\n".join(rows) + "\n"
    )
    return inv


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat): the lab's nodes, the relay,
    the runner, all of it."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_since(start: tuple[int, int]) -> float:
    """The share of the machine's CPU time that was busy since `start` (cpu_ticks())."""
    busy, total = cpu_ticks()
    return (busy - start[0]) / max(1, total - start[1])


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, int, float]:
    """(wall s, peak RSS KB, CPU s: user + system of the process and its threads)."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    _, _, usage = os.wait4(p.pid, 0)
    return time.monotonic() - t, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def timed_run(inv: Path, out: Path, parallel: int, command: str = "run", *extra: str) -> tuple[float, int, dict, float]:
    """(wall s, peak RSS KB, results (run only), CPU s of the command's process: paramiko's threads included)."""
    argv = [sys.executable, "-m", "conformance", command, "--inventory", str(inv), "--output", str(out), f"--parallel={parallel}"]
    wall, rss, cpu = timed([*argv, *extra])
    doc = json.loads((out / "results.json").read_text()) if command == "run" else {}
    return wall, rss, doc, cpu


def pytest_floor(tests: int, nodes: int, tmp: Path) -> float:
    """CPU s of pytest itself running `tests` empty tests (nodes x checks, parametrized as the suite is),
    with the plugins and the quiet and HTML options `conformance run` uses, and without this project's
    plugin: what no pytest-based audit of that many checks can go below here."""
    from conformance.commands.common import QUIET

    d = tmp / f"pytest-floor-{tests}"
    d.mkdir(exist_ok=True)
    checks = max(1, round(tests / nodes))
    (d / "test_floor.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('node', [f'node-{{i:05d}}' for i in range({nodes})], scope='session')\n"
        f"@pytest.mark.parametrize('check', range({checks}))\n"
        "def test_check(node, check):\n    pass\n"
    )
    plugins = ["-p", "no:gpu_node_conformance", "-p", "no:cacheprovider", "-p", "no:testinfra", "-p", "no:hypothesispytest"]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *plugins,
        *QUIET,
        f"--html={d / 'report.html'}",
        "--self-contained-html",
        "test_floor.py",
    ]
    return timed(argv, cwd=d)[2]


def openssh_floor(lab: Lab, lines: DelayLines, n: int, parallel: int, known_hosts: Path) -> tuple[float, float]:
    """Plain OpenSSH: the collector's exact bytes on stdin of `sh -s` on each node, `parallel` at a time
    (the floor of any SSH-based audit over these links). Returns (wall s, CPU s of the ssh clients)."""
    from concurrent.futures import ThreadPoolExecutor

    from conformance.collection.collect import MAX_BYTES, collector_script

    script = collector_script()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)

    def one(port: int) -> int:
        argv = ["ssh", "-F", "/dev/null", "-i", str(lab.client_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={known_hosts}", "-p", str(port), "root@127.0.0.1",
                "sh", "-s", "--", "''", str(MAX_BYTES)]  # fmt: skip
        return subprocess.run(argv, input=script, capture_output=True, timeout=300).returncode

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        codes = list(pool.map(one, lines.ports[:n]))
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(codes):
        print(f"  (OpenSSH floor: {sum(c != 0 for c in codes)} of {n} collections failed)")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def naive(lab: Lab, lines: DelayLines, n: int, known_hosts: Path) -> tuple[float, int]:
    import paramiko
    import testinfra
    import testinfra.backend.paramiko as tb

    class VerifyingClient(paramiko.SSHClient):
        """testinfra's paramiko backend accepts unknown host keys with a warning; here the baseline
        verifies them against the lab's known_hosts and refuses unknown ones, as conformance run does."""

        def __init__(self) -> None:
            super().__init__()
            self.load_host_keys(str(known_hosts))

        def set_missing_host_key_policy(self, policy: object) -> None:
            super().set_missing_host_key_policy(paramiko.RejectPolicy())

    tb.paramiko.SSHClient = VerifyingClient  # type: ignore[misc]
    cfg = known_hosts.with_name("ssh_config_naive")
    cfg.write_text("")  # keep the runner's own ~/.ssh/config out of the measurement
    t = time.monotonic()
    calls = 0
    for node, port in zip(lab.nodes[:n], lines.ports[:n], strict=True):
        host = testinfra.get_host(f"paramiko://root@127.0.0.1:{port}", ssh_identity_file=str(lab.client_key), ssh_config=str(cfg))
        for cmd in NAIVE_FACTS:
            host.run(cmd)
            calls += 1
        del node
    return time.monotonic() - t, calls // n


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a cancelled job) unwinds like Ctrl-C, so that the lab's namespaces and processes go."""
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,50,100,200")
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--naive-nodes", type=int, default=10, help="nodes for the naive baseline (0: none)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per size (medians are printed)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    sizes = [int(s) for s in args.sizes.split(",")]
    reason = lab_available()
    if reason:
        print(f"cannot build the lab: {reason}", file=sys.stderr)
        return 4
    rt = measure_round_trip(lambda t: DelayLines(t, 0.025), samples=10)
    print(
        f"delay line round trip (ping-pong over the relay): median {statistics.median(rt[1:]) * 1000:.1f} ms, "
        f"first {rt[0] * 1000:.1f} ms (includes connection setup)"
    )
    with tempfile.TemporaryDirectory(prefix="gnc-fleet-") as tmp_s:
        tmp = Path(tmp_s)
        t = time.monotonic()
        lab = build_lab(tmp / "lab", max(sizes))
        print(f"lab of {max(sizes)} nodes (namespaces, sshd, kubelet process) built in {time.monotonic() - t:.1f} s")
        lines = DelayLines([(n.address, 22) for n in lab.nodes], delay=0.025)
        try:
            ours: dict[int, float] = {}
            rows = []
            for n in sizes:
                inv = relay_inventory(lab, lines, n, tmp)
                rounds = []
                for r in range(args.repeat):
                    got: dict[str, Any] = {}
                    steps = ["floor", "run", "per check", "collect"]
                    for step in steps if r % 2 == 0 else reversed(steps):
                        ticks = cpu_ticks()
                        if step == "floor":
                            got["floor"], got["floor cpu"] = openssh_floor(
                                lab, lines, n, args.parallel, tmp / "known_hosts_relay"
                            )
                        elif step == "per check":  # the same run with one pytest item per check
                            got[step] = timed_run(inv, tmp / f"out-{n}-check-{r}", args.parallel, "run", "--items=check")
                        else:
                            got[step] = timed_run(inv, tmp / f"out-{n}-{step}-{r}", args.parallel, step)
                        got[f"busy {step}"] = busy_since(ticks)
                    rounds.append(got)
                    wall, _, doc, cpu = got["run"]
                    print(f"  {n} nodes, round {r + 1}: run {wall:.1f} s, floor {got['floor']:.1f} s, collect "
                          f"{got['collect'][0]:.1f} s, ratio "
                          f"{wall / got['floor']:.2f}, run CPU {cpu / n * 1000:.0f} ms/node; per check: "
                          f"{got['per check'][0]:.1f} s, ratio {got['per check'][0] / got['floor']:.2f}, "
                          f"CPU {got['per check'][3] / n * 1000:.0f} ms/node; collect CPU "
                          f"{got['collect'][3] / n * 1000:.0f} ms/node, the floor's ssh clients' CPU "
                          f"{got['floor cpu'] / n * 1000:.0f} ms/node; machine busy {got['busy floor']:.0%} during "
                          f"the floor, {got['busy run']:.0%} during the run", flush=True)  # fmt: skip
                doc = rounds[-1]["run"][2]
                floor_cpu = pytest_floor(len(doc["results"]), n, tmp)
                ours[n] = statistics.median(g["run"][0] for g in rounds)
                rows.append((n, rounds, doc, floor_cpu))
            print(f"{'nodes':>6} {'wall s':>8} {'nodes/s':>8} {'exec/node':>10} {'peak MB':>8} {'floor s':>8} {'collect s':>9} "
                  f"{'ratio':>14} "
                  f"{'CPU ms/node':>14} {'collect':>8} {'pytest':>7} {'rest':>6} {'per check: ratio':>18} {'CPU':>5}  "
                  f"verdicts")  # fmt: skip
            for n, rounds, doc, floor_cpu in rows:
                med = statistics.median
                walls = [g["run"][0] for g in rounds]
                ratios = [g["run"][0] / g["floor"] for g in rounds]
                cpus = [g["run"][3] / n * 1000 for g in rounds]
                collect_cpu = med(g["collect"][3] / n * 1000 for g in rounds)
                execs = statistics.mean(x["collection"]["remote_executions"] for x in doc["nodes"])
                verdicts = {v: sum(x["verdict"] == v for x in doc["nodes"]) for v in ("accepted", "rejected", "unreachable")}
                spread = f"{med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                cpu = f"{med(cpus):.0f} ({min(cpus):.0f}-{max(cpus):.0f})"
                pytest_ms = floor_cpu / n * 1000
                check_ratio = med(g["per check"][0] / g["floor"] for g in rounds)
                check_cpu = med(g["per check"][3] / n * 1000 for g in rounds)
                print(f"{n:>6} {med(walls):>8.1f} {n / med(walls):>8.1f} {execs:>10.1f} "
                      f"{max(g['run'][1] for g in rounds) / 1024:>8.0f} {med(g['floor'] for g in rounds):>8.1f} "
                      f"{med(g['collect'][0] for g in rounds):>9.1f} {spread:>14} "
                      f"{cpu:>14} {collect_cpu:>8.0f} {pytest_ms:>7.0f} {med(cpus) - collect_cpu - pytest_ms:>6.0f} "
                      f"{check_ratio:>18.2f} {check_cpu:>5.0f}  {verdicts}")  # fmt: skip
            print("(medians of the rounds, range in brackets; collect s: `conformance collect` of the same nodes, the")
            print(" collection without pytest; CPU per node: collect = that collection's,")
            print(" pytest = pytest's own floor for as many empty tests (one item each), rest = what is left of the run's")
            print(" CPU (negative: the run's one item per node costs less than pytest's per-check floor); per check:")
            print(" the same run with --items=check, one pytest item per check)")
            for n, rounds, _, _ in rows:
                cpus = sorted(g["run"][3] / n * 1000 for g in rounds)
                walls = sorted(g["run"][0] / g["floor"] for g in rounds)
                collect_ms = statistics.median(g["collect"][3] / n * 1000 for g in rounds)
                print(f"goals at {n} nodes: ratio <= 1.10 in every round: {'met' if walls[-1] <= 1.10 else 'missed'} "
                      f"(worst {walls[-1]:.2f}); CPU <= 40 ms/node: {'met' if cpus[len(cpus) // 2] <= 40 else 'missed'} "
                      f"(median {cpus[len(cpus) // 2]:.0f}, the collection's {collect_ms:.0f})")  # fmt: skip
            k = args.naive_nodes
            if not k:
                return 0
            relay_inventory(lab, lines, k, tmp)  # writes the relay ports' known_hosts
            naive_s, per_node = naive(lab, lines, k, tmp / "known_hosts_relay")
            mine = ours.get(k) or timed_run(relay_inventory(lab, lines, k, tmp), tmp / "out-naive", args.parallel)[0]
            print(
                f"naive testinfra approach, {k} nodes one after another: {naive_s:.1f} s, {per_node} remote "
                f"executions per node; conformance run on the same {k} nodes: {mine:.1f} s; ratio {naive_s / mine:.1f} x"
            )
        finally:
            lines.close()
            lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
