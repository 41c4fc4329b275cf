"""A Python site check: a rule that needs a command, written with testinfra's `host` (bound to the node
through the suite's own SSH, OpenSSH or local connection). Each `host.run` is one more remote
execution, counted in the node's collection record; keep such checks read-only.

    conformance run --inventory nodes.yaml --checks examples/site-checks

The pinned version comes from the node's profile (site: {SITE-DRIVER-SMI-PINNED: {version: ...}}), so
one file serves fleets with different pins.
"""

from conformance.checks import check
from conformance.errors import FactUnavailable


@check(
    "SITE-DRIVER-SMI-PINNED",
    "high",
    title="Every GPU runs the fleet's pinned driver, as nvidia-smi reports it",
    rationale="""A node whose GPUs report a driver other than the fleet's pin (a half-finished upgrade, a
    GPU Operator that fell back to the host driver) breaks NCCL and CUDA compatibility with the rest of
    the job's nodes.""",
    remediation="Install the pinned driver and reboot, or update the pin in the profile's site section.",
    source="nvidia-smi --query-gpu=pci.bus_id,driver_version (testinfra host)",
)
def test_driver_version_is_pinned(node, host, profile, evidence):
    want = ((profile.get("site") or {}).get("SITE-DRIVER-SMI-PINNED") or {}).get("version")
    if not want:
        raise FactUnavailable("no pin: set site: {SITE-DRIVER-SMI-PINNED: {version: ...}} in the node's profile")
    try:
        smi = host.find_command("nvidia-smi", extrapaths=("/run/nvidia/driver/usr/bin", "/usr/bin"))
    except ValueError:
        raise FactUnavailable("nvidia-smi not found (PATH, /run/nvidia/driver/usr/bin, /usr/bin)") from None
    r = host.run("%s --query-gpu=pci.bus_id,driver_version --format=csv,noheader", smi)
    if r.rc != 0:
        raise FactUnavailable(f"nvidia-smi exited {r.rc}: {r.stderr.strip()[:200]}")
    evidence.source = f"{smi} --query-gpu (testinfra host)"
    rows = [[c.strip() for c in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
    evidence.add(*(f"{bus}: driver {version}" for bus, version in rows), f"pinned: {want}")
    wrong = [f"{bus} runs {version}" for bus, version in rows if version != want]
    assert rows, "nvidia-smi listed no GPU"
    assert not wrong, f"{'; '.join(wrong)}, pinned {want}"
