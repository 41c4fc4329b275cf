"""Site checks over real SSH (paramiko and OpenSSH) against lab nodes: declarative rules read in the
node's single collection, a Python site check that runs commands through testinfra's `host` on the same
connection settings, and a rule whose path tries shell injection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_or_skip
from tests.lab.builder import Lab, NodeSpec, lab_available
from tests.site_rules import DPKG_STATUS, rule

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent
INJECTED = "/etc/gnc/x'; touch /tmp/gnc-lab-pwned; echo '$(touch /tmp/gnc-lab-pwned2)"

RULES = "checks:\n" + "".join(
    [
        rule("SITE-CONF", "medium", "file: {path: /etc/gnc/site.conf, owner: root, mode_max: \"0644\", regex: '^pool=gpu-a$'}"),
        rule("SITE-SOMAXCONN", "medium", "sysctl: {name: net.core.somaxconn, min: 4096}"),
        rule("SITE-NO-DEBUG-PARAM", "low", "cmdline: {lacks: gnc-debug-never-set}"),
        rule("SITE-PERSISTENCED-ENABLED", "medium", "systemd: {unit: nvidia-persistenced.service, enabled: true}"),
        rule("SITE-TOOLKIT", "high", 'package: {name: nvidia-container-toolkit, version: ">=1.17.8"}'),
        rule("SITE-INJECTION", "low", f"file: {{path: {json.dumps(INJECTED)}, exists: false}}"),
    ]
)
GOOD_FILES = {
    "/etc/gnc/site.conf": "pool=gpu-a\n",
    "/var/lib/dpkg/status": DPKG_STATUS,
    # the driver's nvidia-smi as the Python site check calls it (GPU Operator layout, not on PATH)
    "/run/nvidia/driver/usr/bin/nvidia-smi": "#!/bin/sh\nprintf '00000000:18:00.0, 550.90.07\\n00000000:19:00.0, 550.90.07\\n'\n",
}
BAD_FILES = {
    "/etc/gnc/site.conf": "pool=gpu-b\n",
    "/var/lib/dpkg/status": DPKG_STATUS.replace("Version: 1.17.8-1", "Version: 1.17.4-1"),
    "/run/nvidia/driver/usr/bin/nvidia-smi": "#!/bin/sh\nprintf '00000000:18:00.0, 550.90.07\\n00000000:19:00.0, 535.104.05\\n'"
    "\n",
}
WANTS = "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
EXPECTED = {
    "site-good": {
        "SITE-CONF": "passed",
        "SITE-SOMAXCONN": "passed",
        "SITE-NO-DEBUG-PARAM": "passed",
        "SITE-PERSISTENCED-ENABLED": "passed",
        "SITE-TOOLKIT": "passed",
        "SITE-INJECTION": "passed",
        "SITE-DRIVER-SMI-PINNED": "passed",
    },
    "site-bad": {
        "SITE-CONF": "failed",
        "SITE-SOMAXCONN": "failed",
        "SITE-NO-DEBUG-PARAM": "passed",
        "SITE-PERSISTENCED-ENABLED": "failed",
        "SITE-TOOLKIT": "failed",
        "SITE-INJECTION": "passed",
        "SITE-DRIVER-SMI-PINNED": "failed",
    },
}


@pytest.fixture(scope="module")
def site_lab(tmp_path_factory):
    require_or_skip(lab_available())
    lab = Lab(Path(tmp_path_factory.mktemp("sitelab")), first_subnet=225)
    mode = {"/run/nvidia/driver/usr/bin/nvidia-smi": 0o755}
    links = {WANTS: "/lib/systemd/system/nvidia-persistenced.service"}
    lab.add(NodeSpec(name="site-good", files=GOOD_FILES, modes=mode, links=links, sysctls={"net.core.somaxconn": "4096"}))
    lab.add(NodeSpec(name="site-bad", files=BAD_FILES, modes=mode, sysctls={"net.core.somaxconn": "1024"}))
    with lab.running():
        yield lab


def audit(lab: Lab, tmp: Path, transport: str, *checks: str) -> tuple[subprocess.CompletedProcess, dict]:
    inv = yaml.safe_load(lab.inventory())
    inv["defaults"]["transport"] = transport
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(inv))
    (tmp / "profile.yaml").write_text("extends: default\nsite:\n  SITE-DRIVER-SMI-PINNED: {version: 550.90.07}\n")
    args = [sys.executable, "-m", "conformance", "run", "--inventory", str(tmp / "inventory.yaml"), "--profile",
            str(tmp / "profile.yaml"), "--output", str(tmp / "out"), *(a for c in checks for a in ("--checks", c)),
            "--", "-k", "site"]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p, json.loads((tmp / "out" / "results.json").read_text())


@pytest.mark.parametrize("transport", ["ssh", "openssh"])
def test_site_checks_over_ssh(site_lab, tmp_path, transport):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    example = str(ROOT / "examples" / "site-checks" / "test_site_driver.py")
    p, doc = audit(site_lab, tmp_path, transport, str(rules), example)
    got: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        if r["check"].startswith("SITE-"):
            got.setdefault(r["node"], {})[r["check"]] = r["outcome"]
    assert got == EXPECTED, p.stdout[-2000:] + p.stderr[-2000:]
    by = {(r["node"], r["check"]): r for r in doc["results"]}
    assert by[("site-bad", "SITE-DRIVER-SMI-PINNED")]["message"] == "00000000:19:00.0 runs 535.104.05, pinned 550.90.07"
    assert by[("site-bad", "SITE-CONF")]["message"] == "/etc/gnc/site.conf does not match /^pool=gpu-a$/"
    assert by[("site-bad", "SITE-TOOLKIT")]["message"] == "package nvidia-container-toolkit:amd64 is 1.17.4-1, wanted >=1.17.8"
    # the injected path was only ever data: nothing ran on the node (its /tmp is the lab's overlay)
    for node in site_lab.nodes:
        assert not any((node.dir / "upper" / "tmp").glob("gnc-lab-pwned*"))
    assert not list(Path("/tmp").glob("gnc-lab-pwned*"))
    # one collection per node; the Python check's commands come on top and are counted
    executions = {n["name"]: n["collection"]["remote_executions"] for n in doc["nodes"]}
    assert all(e > 1 for e in executions.values()), executions


def test_declarative_rules_add_no_remote_execution(site_lab, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    _, doc = audit(site_lab, tmp_path, "ssh", str(rules))
    assert {n["name"]: n["collection"]["remote_executions"] for n in doc["nodes"]} == {"site-good": 1, "site-bad": 1}
    assert {r["check"] for r in doc["results"] if r["check"].startswith("SITE-")} == set(EXPECTED["site-good"]) - {
        "SITE-DRIVER-SMI-PINNED"
    }
