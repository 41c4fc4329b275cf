"""Where system services and interrupts may run: systemd's CPUAffinity= over system.conf and its
drop-ins (systemd-system.conf(5)), and /proc/irq affinities with their handlers."""

from __future__ import annotations

from conformance.facts.system_cpus import parse_cpu_affinity, parse_irqs


def test_cpu_affinity_lists_ranges_drop_ins_and_reset():
    main = ("/etc/systemd/system.conf", "[Manager]\n#CPUAffinity=1 2\nCPUAffinity=0-1\n")
    drop = ("/etc/systemd/system.conf.d/50.conf", "[Manager]\nCPUAffinity=0 4,8-9 12\n")
    assert parse_cpu_affinity([main]) == (frozenset({0, 1}), "/etc/systemd/system.conf")
    assert parse_cpu_affinity([main, drop]) == (frozenset({0, 4, 8, 9, 12}), "/etc/systemd/system.conf.d/50.conf")
    reset = ("/etc/systemd/system.conf.d/90.conf", "[Manager]\nCPUAffinity=\n")
    assert parse_cpu_affinity([main, drop, reset])[0] is None
    other_section = ("/etc/systemd/system.conf", "[Service]\nCPUAffinity=3\n")
    assert parse_cpu_affinity([other_section]) == (None, "")


def test_irq_affinities_and_handlers():
    irqs = parse_irqs(
        {"/proc/irq/24/smp_affinity_list": "0-1\n", "/proc/irq/9/smp_affinity_list": "0\n"},
        ["/proc/irq/24/nvme0q1/", "/proc/irq/24/nvme0q2/", "/proc/irq/30/ACPI:Ged/"],
    )
    assert irqs == {24: (frozenset({0, 1}), ["nvme0q1", "nvme0q2"]), 9: (frozenset({0}), [])}
