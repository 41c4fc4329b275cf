"""Site checks through the local transport and the real collector against a node laid out in a folder:
every matcher passes and fails, profiles set thresholds, Python site checks use testinfra's `host`, and a
malformed rule file is a usage error naming the file, the rule and the field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.facts.debversion import compare, satisfies
from conformance.facts.packages import dpkg_packages
from tests.conftest import require_or_skip
from tests.site_rules import EXPECTED, NODE_FILES, NODE_LINKS, NODE_MODES, PYTHON_CHECK, PYTHON_COMMANDS, PYTHON_EXPECTED, RULES

ROOT = Path(__file__).resolve().parent.parent


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def node_root(tmp_path):
    root = tmp_path / "node"
    for path, content in NODE_FILES.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    for path, mode in NODE_MODES.items():
        (root / path.lstrip("/")).chmod(mode)
    for path, target in NODE_LINKS.items():
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return root


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "site"
    d.mkdir()
    (d / "rules.yaml").write_text(RULES)
    (d / "test_site_python.py").write_text(PYTHON_CHECK)
    return d


def outcomes(out: Path) -> tuple[dict, dict]:
    doc = json.loads((out / "results.json").read_text())
    return {r["check"]: r for r in doc["results"] if r["check"].startswith("SITE-")}, doc


def test_every_matcher_passes_and_fails_through_the_real_collector(node_root, site, tmp_path):
    out = tmp_path / "out"
    p = conformance("run", "--host-root", str(node_root), "--checks", str(site), "--output", str(out), "--", "-k", "site")
    assert p.returncode == 1, p.stdout + p.stderr
    got, doc = outcomes(out)
    assert {c: r["outcome"] for c, r in got.items()} == {**EXPECTED, **PYTHON_EXPECTED}
    # the messages and evidence name what decided
    assert got["SITE-FILE-MODE"]["message"] == "/etc/gnc/site.conf has mode 0640: more permissive than 0600"
    assert got["SITE-JSON-KEY"]["message"] == "/etc/gnc/app.json a.b is 3, below the minimum 10"
    assert got["SITE-YAML-BROKEN"]["message"].startswith("/etc/gnc/broken.yaml: not valid YAML")
    assert got["SITE-DRIVER"]["message"] == "package nvidia-driver-550 is 550.54.15-0ubuntu1, wanted >=550.90.07"
    assert got["SITE-FABRICMANAGER"]["message"] == "nvidia-fabricmanager.service is not running"
    assert "enabled by /etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service" in " ".join(
        got["SITE-PERSISTENCED"]["evidence"]
    )
    assert got["SITE-NO-NOUVEAU"]["message"] == "kernel module nouveau is loaded"
    # first-class: in the checks metadata with their origin, in JUnit and Prometheus
    assert doc["checks"]["SITE-HUGEPAGES"]["origin"] == str(site / "rules.yaml")
    assert doc["checks"]["SITE-PY-ECHO"]["origin"] == str(site / "test_site_python.py")
    assert 'check="SITE-IOMMU-PT"' in (out / "results.prom").read_text()
    assert "SITE-DRIVER" in (out / "junit.xml").read_text()
    # the declarative rules added no remote execution; the Python check's host commands are counted
    assert doc["nodes"][0]["collection"]["remote_executions"] == 1 + PYTHON_COMMANDS
    # a value from the host reached the shell only quoted
    assert not Path("/tmp/gnc-site-pwned").exists()


def test_profile_thresholds_and_waivers(node_root, site, tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("extends: default\nsite:\n  SITE-JSON-KEY: {min: 2}\n  SITE-SOMAXCONN: {equals: 4096}\n")
    waivers = tmp_path / "w.yaml"
    waivers.write_text(
        "waivers:\n  - check: SITE-DRIVER\n    justification: roll-out in week 50\n    owner: gpu-platform\n"
        "    ticket: https://tracker.example.com/GPU-50\n    expires: 2099-01-01\n"
    )
    out = tmp_path / "out"
    args = ["run", "--host-root", str(node_root), "--checks", str(site / "rules.yaml"), "--profile", str(profile)]
    p = conformance(*args, "--waivers", str(waivers), "--output", str(out), "--", "-k", "site")
    got, _ = outcomes(out)
    assert got["SITE-JSON-KEY"]["outcome"] == "passed" and got["SITE-SOMAXCONN"]["outcome"] == "passed", p.stderr
    assert got["SITE-DRIVER"]["outcome"] == "waived"
    lint = conformance("waivers", "lint", str(waivers), "--checks", str(site / "rules.yaml"))
    assert lint.returncode == 0 and "no problems" in lint.stdout, lint.stdout
    assert "matches no known check id" in conformance("waivers", "lint", str(waivers)).stdout
    profile.write_text("extends: default\nsite:\n  SITE-JSON-KEY: {minimum: 2}\n")
    p = conformance(*args, "--output", str(tmp_path / "o2"))
    assert p.returncode == 4
    assert f"{profile}: site.SITE-JSON-KEY: file.minimum: unknown field" in p.stderr


def test_snapshot_keeps_what_the_rules_read(node_root, site, tmp_path):
    snap = tmp_path / "snap"
    rules = str(site / "rules.yaml")
    assert conformance("collect", "--host-root", str(node_root), "--checks", rules, "--output", str(snap)).returncode == 0
    out = tmp_path / "out"
    conformance("run", "--snapshot", str(snap), "--checks", rules, "--output", str(out), "--", "-k", "site")
    got, _ = outcomes(out)
    assert {c: r["outcome"] for c, r in got.items()} == EXPECTED


def test_checks_lists_site_checks_with_their_origin(site):
    p = conformance("checks", "--checks", str(site))
    assert p.returncode == 0, p.stderr
    lines = {line.split()[0]: line for line in p.stdout.splitlines()}
    assert lines["SITE-IOMMU-PT"].endswith(f"[{site / 'rules.yaml'}]")
    assert lines["SITE-PY-ECHO"].endswith(f"[{site / 'test_site_python.py'}]")
    assert "[" not in lines["KUBELET-CPU-POLICY"]


def test_the_shipped_examples_load():
    p = conformance("checks", "--checks", str(ROOT / "examples" / "site-checks"))
    assert p.returncode == 0, p.stderr
    ids = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("SITE-")}
    assert {"SITE-IOMMU-PT", "SITE-NVIDIA-PEERMEM", "SITE-DRIVER-SMI-PINNED", "SITE-CONTAINER-TOOLKIT"} <= ids
    assert "SITE-FABRICMANAGER-SERVICE" not in ids  # in nvswitch/: for an NVSwitch profile only


GOOD = "  - id: SITE-OK\n    severity: low\n    title: t\n    rationale: r\n    remediation: m\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("checks: [", "not valid YAML"),
        ("rules: []", "a site rule file is a mapping with a `checks:` list"),
        ("checks:\n" + GOOD.replace("SITE-OK", "MY-OK") + "    cmdline: {has: x}\n",
         "checks[0] (MY-OK): id: must start with SITE-"),
        ("checks:\n" + GOOD.replace("SITE-OK", "KUBELET-CPU-POLICY"), "id: must start with SITE-"),
        ("checks:\n" + GOOD.replace("severity: low", "severity: urgent") + "    cmdline: {has: x}\n",
         "checks[0] (SITE-OK): severity: must be one of critical, high, medium, low"),
        ("checks:\n" + GOOD.replace("    remediation: m\n", "") + "    cmdline: {has: x}\n",
         "checks[0] (SITE-OK): remediation: missing"),
        ("checks:\n" + GOOD, "checks[0] (SITE-OK): needs exactly one matcher"),
        ("checks:\n" + GOOD + "    cmdline: {has: x}\n    module: {name: y}\n",
         "needs exactly one matcher (file, sysctl, cmdline, module, systemd, package), has 2"),
        ("checks:\n" + GOOD + "    file: {path: /etc/x, colour: red}\n", "checks[0] (SITE-OK): file.colour: unknown field"),
        ("checks:\n" + GOOD + "    file: {path: etc/x}\n", "checks[0] (SITE-OK): file.path: must be an absolute path"),
        ("checks:\n" + GOOD + '    file: {path: "/etc/x\\ny"}\n', "file.path: must be an absolute path (no newline or NUL"),
        ("checks:\n" + GOOD + "    file: {path: /etc/x, regex: '(('}\n", "file.regex: not a regular expression"),
        ("checks:\n" + GOOD + "    file: {path: /etc/x, mode: 644}\n", "file.mode: must be an octal mode in quotes"),
        ("checks:\n" + GOOD + "    sysctl: {name: 'vm.x; reboot', min: 1}\n", "sysctl.name: must be a dotted sysctl name"),
        ("checks:\n" + GOOD + "    systemd: {unit: 'x.service; reboot', running: true}\n", "systemd.unit: must be a unit name"),
        ("checks:\n" + GOOD + "    module: {name: nvidia, loaded: yes-please}\n", "module.loaded: must be true or false"),
        ("checks:\n" + GOOD + "    systemd: {unit: docker.socket, running: true}\n",
         "systemd.running: only a .service unit has processes of its own"),
        ("checks:\n" + GOOD + "    file: {path: /etc/x, min: 1}\n", "file.min: compares a parsed key"),
        ("checks:\n" + GOOD + "    cmdline: {has: x}\n" + GOOD + "    cmdline: {has: y}\n",
         "checks[1] (SITE-OK): id already declared"),
    ],
)  # fmt: skip
def test_malformed_rule_files_are_usage_errors_naming_file_rule_and_field(tmp_path, text, says):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    p = conformance("run", "--host-root", str(tmp_path), "--checks", str(f), "--output", str(tmp_path / "out"))
    assert p.returncode == 4, p.stdout + p.stderr
    assert str(f) in p.stderr and says in p.stderr, p.stderr


@pytest.mark.parametrize(
    ("check_id", "says"),
    [
        ("KUBELET-CPU-POLICY", "a site check's id starts with SITE-"),
        ("SITE-IOMMU-PT", "check id SITE-IOMMU-PT is already declared by"),
    ],
)
def test_python_site_checks_cannot_take_another_checks_id(tmp_path, check_id, says):
    d = tmp_path / "py"
    d.mkdir()
    (d / "rules.yaml").write_text(RULES)
    (d / "test_clash.py").write_text(PYTHON_CHECK.replace("SITE-PY-ECHO", check_id))
    p = conformance("run", "--host-root", str(tmp_path), "--checks", str(d), "--output", str(tmp_path / "out"))
    assert p.returncode == 4 and says in p.stderr and "test_clash.py" in p.stderr, p.stderr


def test_a_yaml_rule_cannot_take_a_built_in_id_even_with_the_prefix_rule_bypassed(tmp_path):
    """Built-in ids never start with SITE-, so the prefix rule already keeps them apart; a rule file
    naming the same SITE- id twice across files is refused with both files named."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("checks:\n" + GOOD + "    cmdline: {has: x}\n")
    b.write_text("checks:\n" + GOOD + "    cmdline: {has: y}\n")
    p = conformance("checks", "--checks", str(a), "--checks", str(b))
    assert p.returncode == 4 and f"{b}: checks[0] (SITE-OK): id already declared in {a}" in p.stderr


@pytest.mark.parametrize(
    ("a", "b", "sign"),
    [
        ("1.0", "1.0", 0), ("1.0~rc1", "1.0", -1), ("1.0", "1.0-1", -1), ("1:0.1", "2.0", 1), ("1.10", "1.9", 1),
        ("550.90.07-0ubuntu1", "550.90.07-0ubuntu0.22.04.1", 1), ("1.2a", "1.2", 1), ("2.0", "2.0+b1", -1),
        ("1.0-1", "1.0-1~bpo1", 1), ("1.0.0", "1.0", 1),
    ],
)  # fmt: skip
def test_debian_version_order(a, b, sign):
    c = compare(a, b)
    assert (c > 0) - (c < 0) == sign
    assert satisfies(a, f">={b}") == (sign >= 0) and satisfies(a, f"<<{b}") == (sign < 0)


def test_dpkg_status_parsing_ignores_continuation_lines():
    from tests.site_rules import DPKG_STATUS

    pkgs = {p.name: p for p in dpkg_packages(DPKG_STATUS)}
    assert (pkgs["nvidia-driver-550"].status, pkgs["nvidia-driver-550"].version) == ("install ok installed", "550.54.15-0ubuntu1")
    assert pkgs["nvidia-fabricmanager-550"].status == "deinstall ok config-files"


# Multi-Arch status stanzas (dpkg's own format: one stanza per installed architecture of a Multi-Arch: same
# package); the real dpkg-query decides which instances each name selects.
MULTIARCH_STATUS = """\
Package: libnvidia-compute-550
Status: install ok installed
Priority: optional
Section: libs
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Multi-Arch: same
Version: 550.127.05-0ubuntu1
Description: NVIDIA libcompute package

Package: libnvidia-compute-550
Status: install ok installed
Priority: optional
Section: libs
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: i386
Multi-Arch: same
Version: 550.54.15-0ubuntu1
Description: NVIDIA libcompute package

Package: nvidia-container-toolkit
Status: install ok installed
Priority: optional
Section: utils
Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>
Architecture: amd64
Version: 1.17.8-1
Description: NVIDIA Container toolkit

Package: nvidia-kernel-common-550
Status: deinstall ok config-files
Priority: optional
Section: libs
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Version: 550.90.07-0ubuntu1
Description: Shared files used with the kernel module

Package: nvidia-firmware-550
Status: install ok installed
Priority: optional
Section: kernel
Maintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: all
Version: 550.127.05-0ubuntu1
Description: Firmware files used by the kernel module
"""


def test_package_names_select_instances_as_dpkg_query_does(tmp_path):
    from conformance.facts.packages import dpkg_lookup

    dpkg_query = shutil.which("dpkg-query")
    require_or_skip(None if dpkg_query else "dpkg-query is not installed (the Debian package dpkg)")
    assert dpkg_query is not None
    (tmp_path / "status").write_text(MULTIARCH_STATUS)
    (tmp_path / "info").mkdir()
    (tmp_path / "updates").mkdir()
    pkgs = dpkg_packages(MULTIARCH_STATUS)
    specs = [
        "libnvidia-compute-550", "libnvidia-compute-550:amd64", "libnvidia-compute-550:i386", "libnvidia-compute-550:arm64",
        "nvidia-container-toolkit", "nvidia-container-toolkit:amd64", "nvidia-container-toolkit:i386",
        "nvidia-kernel-common-550", "nvidia-firmware-550", "nvidia-firmware-550:all", "nvidia-firmware-550:amd64",
        "not-there",
    ]  # fmt: skip
    for spec in specs:
        got = subprocess.run(
            [dpkg_query, f"--admindir={tmp_path}", "-W", "-f=${Package}:${Architecture} ${Version} ${db:Status-Status}\\n", spec],
            capture_output=True, text=True,
        )  # fmt: skip
        real = sorted(line for line in got.stdout.splitlines() if line.strip())
        ours = sorted(f"{p.name}:{p.arch} {p.version} {p.status.split()[-1]}" for p in dpkg_lookup(pkgs, spec))
        assert ours == real, spec


def test_every_installed_architecture_must_satisfy_a_version_rule():
    from conformance.facts.packages import dpkg_lookup

    pkgs = dpkg_packages(MULTIARCH_STATUS)
    both = dpkg_lookup(pkgs, "libnvidia-compute-550")
    assert [p.version for p in both] == ["550.127.05-0ubuntu1", "550.54.15-0ubuntu1"]
    assert [p.arch for p in dpkg_lookup(pkgs, "libnvidia-compute-550:amd64")] == ["amd64"]


def test_site_rule_paths_reach_the_node_only_base64_encoded():
    from conformance.collection.collect import collector_script

    hostile = "read /etc/x'; touch /tmp/gnc-pwned; echo '"
    script = collector_script(hostile)
    assert b"touch /tmp/gnc-pwned" not in script and os.path.exists("/tmp/gnc-pwned") is False


def test_a_profiles_site_checks_apply_to_its_nodes_only(node_root, site, tmp_path):
    (tmp_path / "hgx.yaml").write_text("extends: default\nsite_checks: [site/rules.yaml]\n")  # relative to the profile
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"nodes:\n  - name: hgx-1\n    transport: local\n    host_root: {node_root}\n    profile: {tmp_path / 'hgx.yaml'}\n"
        f"  - name: pcie-1\n    transport: local\n    host_root: {node_root}\n"
    )
    out = tmp_path / "out"
    conformance("run", "--inventory", str(inv), "--output", str(out), "--", "-k", "site")
    doc = json.loads((out / "results.json").read_text())
    nodes = {r["node"] for r in doc["results"] if r["check"].startswith("SITE-")}
    assert nodes == {"hgx-1"}
    assert {r["check"]: r["outcome"] for r in doc["results"] if r["node"] == "hgx-1"} == EXPECTED


# Unit layouts; the real `systemctl --root=ROOT is-enabled UNIT` (it reads unit files offline, no manager)
# decides which are masked ("masked", or "masked-runtime" for a mask under /run).
UNIT_LAYOUTS = {
    "usr-only": {"/usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/true\n"},
    "etc-mask": {"/usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/true\n", "/etc/systemd/system/u.service": None},
    "runtime-mask": {
        "/usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/true\n",
        "/run/systemd/system/u.service": None,
    },
    "etc-empty": {"/usr/lib/systemd/system/u.service": "[Service]\nExecStart=/bin/true\n", "/etc/systemd/system/u.service": ""},
    "usr-empty": {"/usr/lib/systemd/system/u.service": ""},
    "etc-copy-over-runtime-mask": {
        "/etc/systemd/system/u.service": "[Service]\nExecStart=/bin/true\n",
        "/run/systemd/system/u.service": None,
    },
    "lib-mask": {"/lib/systemd/system/u.service": None},
}


def real_systemctl() -> str:
    systemctl = shutil.which("systemctl")
    require_or_skip(None if systemctl else "systemctl is not installed (the Debian package systemd)")
    assert systemctl is not None
    return systemctl


@pytest.mark.parametrize("layout", sorted(UNIT_LAYOUTS))
def test_masks_read_as_the_real_systemctl_reads_them(layout, tmp_path):
    from conformance.checks.site_judges import unit_masked
    from conformance.collection.collect import collect_node
    from conformance.config.inventory import NodeSpec
    from conformance.config.site_rules import UNIT_PATH

    systemctl = real_systemctl()
    root = tmp_path / "root"
    for path, text in UNIT_LAYOUTS[layout].items():
        f = root / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            f.symlink_to("/dev/null")
        else:
            f.write_text(text)
    state = subprocess.run(
        [systemctl, f"--root={root}", "is-enabled", "u.service"], capture_output=True, text=True
    ).stdout.strip()
    site = "\n".join([*(f"stat {d}/u.service" for d in UNIT_PATH), *(f"link {d}/u.service" for d in UNIT_PATH)])
    bundle = collect_node(NodeSpec(name="n", transport="local", host_root=str(root)), retries=0, site=site)
    masked, how = unit_masked(bundle, "u.service")
    assert masked == state.startswith("masked"), f"systemctl says {state!r}; the suite: {how}"


# Where a unit is linked into a target; the real `systemctl --root=ROOT is-enabled` decides which count as
# enabled ("enabled", "enabled-runtime"): links in /etc or /run, not a vendor's in /usr/lib.
UNIT_FILE = "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
WANTS_LAYOUTS = {
    "etc-wants": "/etc/systemd/system/multi-user.target.wants",
    "etc-requires": "/etc/systemd/system/multi-user.target.requires",
    "runtime-wants": "/run/systemd/system/multi-user.target.wants",
    "vendor-wants": "/usr/lib/systemd/system/multi-user.target.wants",
    "lib-wants": "/lib/systemd/system/multi-user.target.wants",
    "local-lib-wants": "/usr/local/lib/systemd/system/multi-user.target.wants",
    "not-linked": "",
    "etc-wants-but-masked": "/etc/systemd/system/multi-user.target.wants",
}


@pytest.mark.parametrize("layout", sorted(WANTS_LAYOUTS))
def test_enabled_reads_as_the_real_systemctl_reads_it(layout, tmp_path):
    from conformance.checks.site_judges import judge_systemd
    from conformance.collection.collect import collect_node
    from conformance.config.inventory import NodeSpec
    from conformance.config.site_rules import SiteRule, needs_section

    systemctl = real_systemctl()
    root = tmp_path / "root"
    unit = root / "usr/lib/systemd/system/u.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(UNIT_FILE)
    if WANTS_LAYOUTS[layout]:
        wants = root / WANTS_LAYOUTS[layout].lstrip("/")
        wants.mkdir(parents=True, exist_ok=True)
        (wants / "u.service").symlink_to("/usr/lib/systemd/system/u.service")
    if layout.endswith("masked"):
        (root / "etc/systemd/system/u.service").symlink_to("/dev/null")
    state = subprocess.run([systemctl, f"--root={root}", "is-enabled", "u.service"], capture_output=True, text=True).stdout
    rule = SiteRule(spec=None, kind="systemd", params={"unit": "u.service", "enabled": True}, origin="test")  # type: ignore[arg-type]
    bundle = collect_node(NodeSpec(name="n", transport="local", host_root=str(root)), retries=0, site=needs_section([rule]))
    problems, lines = judge_systemd(bundle, rule.params)
    assert (not problems) == (state.strip() in ("enabled", "enabled-runtime")), (
        f"systemctl says {state.strip()!r}; the suite: {lines}"
    )
