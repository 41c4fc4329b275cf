"""Package rules on RPM nodes, decided by the real rpm (Debian ships rpm 4.18 with rpmbuild).

Real packages are built with rpmbuild and registered in a real RPM database (`rpm -i --justdb` into a
database folder of a node laid out in a directory). The real rpm then decides:
- which installed instances a rule's name selects (`rpm -q NAME`),
- whether an instance meets a version constraint: a package that Requires `NAME OP EVR` is test-installed
  (`rpm -i --test`) against a database holding that instance alone, so rpm's own dependency check
  (rpmverOverlap) answers,
- how two version strings order (`rpm.vercmp`, rpm's rpmvercmp),
and the suite must agree. The whole path runs through the real collector, which calls the real rpm."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.facts.packages import rpm_lookup, rpm_packages
from conformance.facts.rpmversion import satisfies, vercmp
from tests.conftest import require_or_skip

QUERY = "%{NAME} %{ARCH} %|EPOCH?{%{EPOCH}}:{-}| %{VERSION} %{RELEASE}\\n"  # the collector's query format
SPEC = """Name: %{pname}
Version: %{pver}
Release: %{prel}
%{?pepoch:Epoch: %{pepoch}}
%{?preq:Requires: %{preq}}
Summary: a package made for this test
License: MIT
%description
A package made for the suite's tests.
%files
"""
# (name, arch, epoch, version, release): what RHEL-family GPU nodes hold, with rpm's traps: a second
# architecture, an epoch, install-only kernels in two versions, a dot in a name, tilde and caret versions
INSTANCES = [
    ("nvidia-driver", "x86_64", "3", "550.90.07", "1.el9"),
    ("nvidia-driver", "i686", None, "550.54.15", "1.el9"),
    ("cuda-toolkit-12-4", "noarch", None, "12.4.1", "1"),
    ("kernel-core", "x86_64", None, "5.14.0", "427.13.1.el9_4"),
    ("kernel-core", "x86_64", None, "5.14.0", "362.8.1.el9_3"),
    ("python3.11", "x86_64", None, "3.11.7", "1.el9"),
    ("nvidia-fabric-manager", "x86_64", None, "550.90.07~rc1", "1"),
    ("libnvidia-container1", "x86_64", None, "1.17.0^20241105git", "1"),
]
CONSTRAINTS = [
    ">=550.90.07", ">550.90.07", "=550.90.07", "<=550.54.15", "<550.90.07", ">=3:550.90.07", ">=4:1", "=3:550.90.07-1.el9",
    ">=550.90.07-2", "<<560", ">>550.54.15", ">=12.4", ">12.4.1", "=12.4.1-1", ">=5.14.0-400", "=5.14.0", "<5.14.0-400",
    ">=3.11", ">=550.90.07", "<550.90.07", ">=1.17.0", ">1.17.0", "<1.17.1", "550.90.07~rc1",
]  # fmt: skip


def _rpm() -> tuple[str, str]:
    rpm, rpmbuild = shutil.which("rpm"), shutil.which("rpmbuild")
    require_or_skip(None if rpm and rpmbuild else "rpm and rpmbuild are not installed (the Debian package rpm)")
    assert rpm and rpmbuild
    return rpm, rpmbuild


def build(top: Path, name: str, arch: str, epoch: str | None, version: str, release: str, requires: str = "") -> Path:
    _, rpmbuild = _rpm()
    top.mkdir(parents=True, exist_ok=True)
    (top / "p.spec").write_text(SPEC)
    defs = {"_topdir": str(top), "pname": name, "pver": version, "prel": release}
    if epoch:
        defs["pepoch"] = epoch
    if requires:
        defs["preq"] = requires
    args = [rpmbuild, "-bb", "--quiet", *(x for k, v in defs.items() for x in ("--define", f"{k} {v}"))]
    subprocess.run([*args, "--target", arch, str(top / "p.spec")], check=True, capture_output=True, timeout=120)
    (rpm_file,) = (top / "RPMS").glob(f"*/{name}-{version}-{release}.*.rpm")
    return rpm_file


def database(dbpath: Path, rpm_files: list[Path]) -> Path:
    rpm, _ = _rpm()
    dbpath.mkdir(parents=True, exist_ok=True)
    subprocess.run([rpm, "--dbpath", str(dbpath), "--initdb"], check=True, capture_output=True, timeout=120)
    if rpm_files:
        install = [rpm, "--dbpath", str(dbpath), "-i", "--justdb", "--nodeps", "--noscripts", "--ignorearch", "--ignoreos"]
        subprocess.run([*install, *map(str, rpm_files)], check=True, capture_output=True, timeout=120)
    return dbpath


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple, Path]:
    top = tmp_path_factory.mktemp("rpms")
    return {inst: build(top / f"b{i}", *inst) for i, inst in enumerate(INSTANCES)}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, built) -> Path:
    """A node laid out in a folder with every instance in its RPM database at /var/lib/rpm."""
    root = tmp_path_factory.mktemp("rpmnode")
    database(root / "var/lib/rpm", list(built.values()))
    return root


def queried(dbpath: Path) -> str:
    rpm, _ = _rpm()
    return subprocess.run([rpm, "--dbpath", str(dbpath), "-qa", "--queryformat", QUERY], check=True, capture_output=True,
                          text=True, timeout=120).stdout  # fmt: skip


def test_names_select_the_instances_rpm_q_selects(node):
    rpm, _ = _rpm()
    packages = rpm_packages(queried(node / "var/lib/rpm"))
    assert len(packages) == len(INSTANCES)
    specs = ["nvidia-driver", "nvidia-driver.i686", "nvidia-driver.x86_64", "nvidia-driver.aarch64", "kernel-core", "python3.11",
             "python3", "cuda-toolkit-12-4", "cuda-toolkit-12-4.noarch", "libnvidia-container1", "not-there"]  # fmt: skip
    for spec in specs:
        real = subprocess.run([rpm, "--dbpath", str(node / "var/lib/rpm"), "-q", "--queryformat", QUERY, spec],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        want = sorted(line for line in real.stdout.splitlines() if line and not line.startswith("package "))
        ours = sorted(f"{p.name} {p.arch} {p.version}" for p in rpm_lookup(packages, spec))
        assert ours == sorted(_evr_line(line) for line in want), spec
    # the spelling shared with dpkg rules selects as name.arch does
    assert rpm_lookup(packages, "nvidia-driver:i686") == rpm_lookup(packages, "nvidia-driver.i686")


def _evr_line(line: str) -> str:
    name, arch, epoch, version, release = line.split(" ")
    return f"{name} {arch} {'' if epoch == '-' else epoch + ':'}{version}-{release}"


@pytest.mark.slow  # rpmbuild and rpm over every case
def test_version_constraints_hold_as_rpms_dependency_check_decides(tmp_path, built):
    """Each instance alone in a database; a package requiring NAME OP EVR is test-installed against it."""
    rpm, _ = _rpm()
    disagreements = []
    for i, inst in enumerate(INSTANCES):
        db = database(tmp_path / f"db{i}", [built[inst]])
        (pkg,) = rpm_packages(queried(db))
        for j, constraint in enumerate(CONSTRAINTS):
            op, evr = _split(constraint)
            rpm_op = {">>": ">", "<<": "<"}.get(op, op)
            probe = build(tmp_path / f"probe{i}-{j}", f"probe{i}x{j}", "noarch", None, "1", "1", f"{inst[0]} {rpm_op} {evr}")
            test = subprocess.run([rpm, "--dbpath", str(db), "-i", "--test", "--justdb", "--ignorearch", str(probe)],
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            real = test.returncode == 0
            assert real or "Failed dependencies" in test.stderr, test.stderr
            if satisfies(pkg.version, constraint) != real:
                disagreements.append((pkg.version, constraint, real))
    assert disagreements == []


def _split(constraint: str) -> tuple[str, str]:
    for op in (">=", "<=", ">>", "<<", "=", ">", "<"):
        if constraint.startswith(op):
            return op, constraint[len(op) :]
    return "=", constraint


def test_segments_order_as_rpm_vercmp_orders_them():
    rpm, _ = _rpm()
    rng = random.Random(26)
    chars = "01a9.~^_+Zz"
    pairs = [("1.0", "1.0~rc1"), ("1.0^", "1.0"), ("1.0^git1", "1.0.1"), ("10xyz", "10.1xyz"), ("1.05", "1.5"), ("a", "1"),
             ("1.0~rc1", "1.0~rc1~git"), ("1_0", "1.0"), ("5.5p10", "5.5p1"), ("2.0.1a", "2.0.1")]  # fmt: skip

    def word() -> str:
        return "".join(rng.choice(chars) for _ in range(rng.randint(1, 7)))

    pairs += [(word(), word()) for _ in range(800)]
    lua = "%{lua: " + " ".join(f'print(rpm.vercmp("{a}", "{b}") .. " ")' for a, b in pairs) + "}"
    out = subprocess.run([rpm, "--eval", lua], capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert len(out) == len(pairs)
    assert [(a, b, vercmp(a, b)) for a, b in pairs] == [(a, b, int(o)) for (a, b), o in zip(pairs, out, strict=True)]


RULES = """checks:
  - {id: SITE-DRIVER, severity: critical, title: t, rationale: r, remediation: m, package: {name: nvidia-driver, version: ">=550.90.07"}}
  - {id: SITE-DRIVER-64, severity: critical, title: t, rationale: r, remediation: m, package: {name: nvidia-driver.x86_64, version: ">=550.90.07"}}
  - {id: SITE-DRIVER-NEWER, severity: critical, title: t, rationale: r, remediation: m, package: {name: nvidia-driver:x86_64, version: ">550.90.07"}}
  - {id: SITE-KERNEL, severity: critical, title: t, rationale: r, remediation: m, package: {name: kernel-core, installed: true}}
  - {id: SITE-NO-NOUVEAU, severity: critical, title: t, rationale: r, remediation: m, package: {name: xorg-x11-drv-nouveau, installed: false}}
  - {id: SITE-FM, severity: critical, title: t, rationale: r, remediation: m, package: {name: nvidia-fabric-manager, version: ">=550.90.07"}}
"""  # noqa: E501
EXPECTED = {
    "SITE-DRIVER": "failed",  # the i686 instance is 550.54.15
    "SITE-DRIVER-64": "passed",
    "SITE-DRIVER-NEWER": "passed",  # epoch 3 is newer than any release of 550.90.07 without one
    "SITE-KERNEL": "passed",
    "SITE-NO-NOUVEAU": "passed",
    "SITE-FM": "failed",  # 550.90.07~rc1 comes before 550.90.07
}


def run_rules(root: Path, tmp_path: Path) -> dict[str, dict]:
    (tmp_path / "site").mkdir(parents=True, exist_ok=True)
    (tmp_path / "site" / "rules.yaml").write_text(RULES)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "conformance", "run", "--host-root", str(root), "--checks", str(tmp_path / "site"),
                        "--output", str(out), "--", "-k", "site"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert (out / "results.json").exists(), p.stdout + p.stderr
    doc = json.loads((out / "results.json").read_text())
    return {r["check"]: r for r in doc["results"] if r["check"].startswith("SITE-")}


def test_rules_on_an_rpm_node_through_the_real_collector_and_rpm(node, tmp_path):
    got = run_rules(node, tmp_path)
    assert {c: r["outcome"] for c, r in got.items()} == EXPECTED
    assert got["SITE-DRIVER"]["message"] == "package nvidia-driver:i686 is 550.54.15-1.el9, wanted >=550.90.07"
    assert "rpm (/var/lib/rpm): nvidia-driver:x86_64 3:550.90.07-1.el9 (installed)" in got["SITE-DRIVER"]["evidence"]


def test_an_rpm_database_at_usr_lib_sysimage_is_read(built, tmp_path):
    root = tmp_path / "suse"
    database(root / "usr/lib/sysimage/rpm", list(built.values()))
    (root / "var/lib/rpm").mkdir(parents=True)  # Debian's rpm ships an empty one: no database there
    got = run_rules(root, tmp_path)
    assert {c: r["outcome"] for c, r in got.items()} == EXPECTED


def test_an_unreadable_or_absent_database_is_an_error_never_a_pass(node, tmp_path):
    bare = tmp_path / "bare"
    (bare / "var/lib/rpm").mkdir(parents=True)
    got = run_rules(bare, tmp_path / "a")
    assert {r["outcome"] for r in got.values()} == {"error"}
    assert got["SITE-NO-NOUVEAU"]["message"].startswith("no package database on this node: looked at /var/lib/dpkg/status")
    # a database rpm cannot read (not a database at all) is rpm's failure, named, not "nothing installed"
    broken = tmp_path / "broken"
    (broken / "var/lib/rpm").mkdir(parents=True)
    (broken / "var/lib/rpm" / "rpmdb.sqlite").write_text("not a database\n")
    got = run_rules(broken, tmp_path / "b")
    assert {r["outcome"] for r in got.values()} == {"error"}, got
    assert "rpm --dbpath /var/lib/rpm -qa exited" in got["SITE-NO-NOUVEAU"]["message"]


def test_an_rpm_ostree_database_is_read_through_its_links_inside_the_host_root(built, tmp_path):
    """RHCOS and Fedora CoreOS keep rpm's database at /usr/share/rpm; /var/lib/rpm and /usr/lib/sysimage/rpm link to it.
    An absolute link below a host root must lead into the root, not to the audit's own /usr/share/rpm."""
    root = tmp_path / "rhcos"
    database(root / "usr/share/rpm", list(built.values()))
    (root / "var/lib").mkdir(parents=True)
    (root / "var/lib/rpm").symlink_to("/usr/share/rpm")
    (root / "usr/lib/sysimage").mkdir(parents=True)
    (root / "usr/lib/sysimage/rpm").symlink_to("../../share/rpm")
    got = run_rules(root, tmp_path)
    assert {c: r["outcome"] for c, r in got.items()} == EXPECTED
    assert any(line.startswith("rpm (/var/lib/rpm): ") for line in got["SITE-DRIVER"]["evidence"]), got["SITE-DRIVER"]


KUBELET_SPEC = """Name: openshift-kubelet
Version: 4.17.0
Release: 202410211507.p0.el9
Summary: the kubelet as RHCOS ships it (a stand-in file)
License: MIT
%description
A package made for the suite's tests.
%install
mkdir -p %{buildroot}/usr/bin
printf 'kubelet stand-in of openshift-kubelet 4.17\\n' > %{buildroot}/usr/bin/kubelet
chmod 0755 %{buildroot}/usr/bin/kubelet
%files
/usr/bin/kubelet
"""


def kubelet_rpm_root(tmp_path: Path) -> Path:
    """A host root whose kubelet is openshift-kubelet's file, installed by rpm itself into an rpm-ostree database."""
    rpm, rpmbuild = _rpm()
    top = tmp_path / "build"
    top.mkdir()
    (top / "k.spec").write_text(KUBELET_SPEC)
    defs = ["--define", f"_topdir {top}", "--define", "__os_install_post %{nil}", "--define", "_build_id_links none"]
    subprocess.run([rpmbuild, "-bb", "--quiet", *defs, str(top / "k.spec")], check=True, capture_output=True, timeout=120)
    (pkg,) = (top / "RPMS").glob("*/openshift-kubelet-4.17.0-*.rpm")
    root = tmp_path / "root"
    database(root / "usr/share/rpm", [])
    install = [rpm, "--root", str(root), "--dbpath", "/usr/share/rpm", "-i", "--nodeps", "--noscripts", "--ignorearch",
               "--ignoreos", str(pkg)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    (root / "var/lib").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/rpm").symlink_to("../../usr/share/rpm")
    from tests.fakeroot import make_host_root

    return make_host_root(root, ["--config", "/etc/kubernetes/kubelet.conf"], {"/etc/kubernetes/kubelet.conf": "{}"})


def collect_root(root: Path, path: str | None = None):
    from conformance.collection.bundle import parse_wire
    from conformance.collection.collect import collector_script

    env = {"PATH": path or "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    p = subprocess.run(["sh", "-s", "--", str(root), "4194304"], input=collector_script(), capture_output=True,
                       timeout=120, env=env, check=False)  # fmt: skip
    return parse_wire("rhcos", p.stdout, 4194304)


def test_openshifts_kubelet_package_names_the_kubelets_minor(tmp_path):
    from conformance.facts.daemon_release import Span
    from conformance.facts.node_facts import NodeFacts

    root = kubelet_rpm_root(tmp_path)
    b = collect_root(root)
    assert b.optional_command("kubelet-package").data.decode().startswith("rpm openshift-kubelet 4.17.0-")
    assert b.meta("kubelet-package-proof").data.decode().startswith("rpm-attrs ")  # its size and mtime are rpm's
    known = NodeFacts(b).kubelet_release
    assert known.span == Span.minor(1, 30), known.evidence()  # OpenShift 4.17 runs Kubernetes 1.30
    # a release tarball's kubelet copied over the package's file: the header's size, mtime and digest all differ
    (root / "usr/bin/kubelet").write_bytes(b"a kubelet from a release tarball, v1.31.2\n")
    tarball = collect_root(root)
    proof = tarball.meta("kubelet-package-proof").data.decode().split()
    assert proof[0] == "digest" and proof[2] != proof[3], proof
    assert not NodeFacts(tarball).kubelet_release.span.known


def test_a_tool_missing_from_the_audits_image_is_the_audits_gap(tmp_path):
    """Below a host root the collector runs the audit's own programs: an image without rpm leaves the release unknown,
    and says the image lacks it (the node has its rpm; it is never run)."""
    from conformance.facts.node_facts import NodeFacts

    root = kubelet_rpm_root(tmp_path)
    tools = tmp_path / "image-bin"
    tools.mkdir()
    for tool in ("awk", "base64", "head", "tail", "cat", "tr", "cut", "stat", "readlink", "dirname", "uname", "timeout",
                 "md5sum", "xargs", "sh", "dpkg-query"):  # fmt: skip
        found = shutil.which(tool)
        assert found, tool
        (tools / tool).symlink_to(found)
    tools.chmod(0o755)
    b = collect_root(root, str(tools))
    assert b.optional_command("kubelet-package").status == "notool"
    why = " ".join(NodeFacts(b).kubelet_release.evidence())
    assert "the audit's image has no rpm to read the node's package database" in why, why
