"""Where system services and interrupts may run: systemd's CPUAffinity= over the files systemd itself reads
(the real `systemd-analyze --root cat-config` decides which, and in which order), PID 1's real mask, and
/proc/irq affinities with their handlers, effective affinities and kernel-managed IRQs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from conformance.collection.collect import collect_node
from conformance.config.inventory import NodeSpec
from conformance.facts.node_facts import NodeFacts
from conformance.facts.system_cpus import Irq, isolcpus_managed, parse_cpu_affinity, parse_irqs, parse_pid1
from tests.conftest import require_or_skip


def test_cpu_affinity_assignments_merge_and_an_empty_one_resets():
    # systemd-system.conf(5): "This option may be specified more than once, in which case the specified CPU
    # affinity masks are merged. If the empty string is assigned, the mask is reset"
    main = ("/etc/systemd/system.conf", "[Manager]\n#CPUAffinity=1 2\nCPUAffinity=0-1\n")
    drop = ("/etc/systemd/system.conf.d/50.conf", "[Manager]\nCPUAffinity=0 4,8-9 12\n")
    assert parse_cpu_affinity([main]) == (frozenset({0, 1}), "/etc/systemd/system.conf")
    assert parse_cpu_affinity([main, drop]) == (
        frozenset({0, 1, 4, 8, 9, 12}),
        "/etc/systemd/system.conf, /etc/systemd/system.conf.d/50.conf",
    )
    twice = ("/etc/systemd/system.conf", "[Manager]\nCPUAffinity=0\nCPUAffinity=2\n")
    assert parse_cpu_affinity([twice])[0] == frozenset({0, 2})
    reset = ("/etc/systemd/system.conf.d/90.conf", "[Manager]\nCPUAffinity=\n")
    assert parse_cpu_affinity([main, drop, reset]) == (None, "/etc/systemd/system.conf.d/90.conf (reset)")
    after = ("/etc/systemd/system.conf.d/95.conf", "[Manager]\nCPUAffinity=3\n")
    assert parse_cpu_affinity([main, drop, reset, after]) == (frozenset({3}), "/etc/systemd/system.conf.d/95.conf")
    other_section = ("/etc/systemd/system.conf", "[Service]\nCPUAffinity=3\n")
    assert parse_cpu_affinity([other_section]) == (None, "")


def test_irq_affinities_handlers_effective_and_managed():
    irqs = parse_irqs(
        {
            "/proc/irq/24/smp_affinity_list": "0-1\n",
            "/proc/irq/9/smp_affinity_list": "0\n",
            "/proc/irq/40/smp_affinity_list": "2-3\n",
        },
        ["/proc/irq/24/nvme0q1/", "/proc/irq/24/nvme0q2/", "/proc/irq/30/ACPI:Ged/", "/proc/irq/40/nvme0q0/"],
        {"/proc/irq/24/effective_affinity_list": "1\n", "/proc/irq/9/effective_affinity_list": "\n"},
    )
    # without debugfs: NVMe I/O queues are managed by their driver; the admin queue (q0) and others unknown
    assert irqs == {
        24: Irq(frozenset({1}), ["nvme0q1", "nvme0q2"], True, True, frozenset({0, 1})),
        9: Irq(frozenset(), [], True, None, frozenset({0})),
        40: Irq(frozenset({2, 3}), ["nvme0q0"], False, None, frozenset({2, 3})),
    }
    told = parse_irqs({"/proc/irq/40/smp_affinity_list": "2-3\n"}, ["/proc/irq/40/nvme0q0/"], {}, managed={7})
    assert told[40].managed is False


def test_isolcpus_managed_irq_and_pid1():
    # Documentation/admin-guide/kernel-parameters.txt: isolcpus=[flag-list,]<cpu-list>
    assert isolcpus_managed("BOOT_IMAGE=/vmlinuz isolcpus=managed_irq,domain,2-7 quiet") == frozenset(range(2, 8))
    assert isolcpus_managed("isolcpus=2-7") == frozenset()
    assert isolcpus_managed("isolcpus=nohz,managed_irq,1,3") == frozenset({1, 3})
    status = "Name:\tsystemd\nUmask:\t0000\nCpus_allowed:\t0011\nCpus_allowed_list:\t0,4\n"
    assert parse_pid1(status) == ("systemd", frozenset({0, 4}))


def _write(root: Path, files: dict[str, str], links: dict[str, str]) -> None:
    for path, text in files.items():
        f = root / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    for path, target in links.items():
        f = root / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.symlink_to(target)


LAYOUTS = {
    "drop-ins across folders": (
        {
            "/usr/lib/systemd/system.conf": "[Manager]\nCPUAffinity=9\n",  # hidden by /etc's main file
            "/etc/systemd/system.conf": "[Manager]\nCPUAffinity=0\n",
            "/usr/lib/systemd/system.conf.d/10-a.conf": "[Manager]\nCPUAffinity=1\n",  # hidden by /run's 10-a
            "/run/systemd/system.conf.d/10-a.conf": "[Manager]\nCPUAffinity=2\n",
            "/usr/lib/systemd/system.conf.d/20-b.conf": "[Manager]\nCPUAffinity=3\n",  # masked from /etc
            "/usr/local/lib/systemd/system.conf.d/30-c.conf": "[Manager]\nCPUAffinity=4\n",
        },
        {"/etc/systemd/system.conf.d/20-b.conf": "/dev/null"},
        frozenset({0, 2, 4}),
    ),
    "main file only in /usr/lib": (
        {
            "/usr/lib/systemd/system.conf": "[Manager]\nCPUAffinity=0 8\n",
            "/etc/systemd/system.conf.d/50.conf": "[Manager]\nCPUAffinity=\n",
        },
        {},
        None,
    ),
    "a reset then a later drop-in": (
        {
            "/etc/systemd/system.conf": "[Manager]\nCPUAffinity=0-3\n",
            "/run/systemd/system.conf.d/50-reset.conf": "[Manager]\nCPUAffinity=\n",
            "/usr/lib/systemd/system.conf.d/60-x.conf": "[Manager]\nCPUAffinity=5\n",
            "/etc/systemd/system.conf.d/40-empty.conf": "",
        },
        {},
        frozenset({5}),
    ),
}


def test_systemd_files_are_read_as_systemd_analyze_reads_them(tmp_path):
    analyze = shutil.which("systemd-analyze")
    require_or_skip(None if analyze else "systemd-analyze is not installed (the Debian package systemd)")
    assert analyze
    for name, (files, links, expected) in LAYOUTS.items():
        root = tmp_path / re.sub(r"\W+", "-", name)
        _write(root, files, links)
        real = subprocess.run([analyze, f"--root={root}", "cat-config", "systemd/system.conf"], capture_output=True, text=True,
                              check=True, timeout=120).stdout  # fmt: skip
        real_order = [line[2:].removeprefix(str(root)) for line in real.splitlines() if line.startswith(f"# {root}/")]
        bundle = collect_node(NodeSpec(name="n1", transport="local", host_root=str(root)), retries=0)
        assert bundle.error is None, bundle.error
        sc = NodeFacts(bundle).system_cpus
        ours = [p for p in sc.affinity_source.removesuffix(" (reset)").split(", ") if p]
        assert set(ours) <= set(real_order), name  # every file that set it is one systemd reads
        # the same files in the same order give the same merged mask: parse systemd's own concatenation
        real_docs = [(p, (root / p.lstrip("/")).read_text() if (root / p.lstrip("/")).resolve() != Path("/dev/null") else "")
                     for p in real_order]  # fmt: skip
        assert parse_cpu_affinity(real_docs)[0] == sc.affinity == expected, name


def test_host_root_pid1_mask_cmdline_and_effective_irq_affinity(tmp_path):
    root = tmp_path / "node"
    _write(
        root,
        {
            "/proc/1/status": f"Name:\tsystemd\nCpus_allowed_list:\t{_mine()}\n",
            "/proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz isolcpus=managed_irq,1-3\n",
            "/proc/irq/24/smp_affinity_list": "0-3\n",
            "/proc/irq/24/effective_affinity_list": "2\n",
            "/proc/irq/24/nvme0q1/.keep": "",
        },
        {},
    )
    bundle = collect_node(NodeSpec(name="n1", transport="local", host_root=str(root)), retries=0)
    sc = NodeFacts(bundle).system_cpus
    assert sc.pid1 == ("systemd", frozenset(os.sched_getaffinity(0)))
    assert sc.irqs[24] == Irq(frozenset({2}), ["nvme0q1"], True, True, frozenset({0, 1, 2, 3}))
    assert sc.isolated_managed == frozenset({1, 2, 3})
    assert sc.managed_source.startswith("driver names")


def _mine() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in cpus)
