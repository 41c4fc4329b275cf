"""The distributions users install: the wheel and the sdist carry every module and data file of the
package trees, and the installed `conformance` (not the source tree) runs every command from a folder
outside the repository, including a full lab audit over SSH with the source tree's exact verdicts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conformance import __version__
from tests.installed import ROOT, Installed, build_distributions, package_files, sdist_names, source_files, wheel_names
from tests.lab.nodes import EXPECTED
from tests.test_lab_audit import outcomes

pytestmark = pytest.mark.slow  # the built wheel and sdist, installed as users install them (tests/tiers.py)


@pytest.fixture(params=["wheel", "sdist"])
def installed(request: pytest.FixtureRequest) -> Installed:
    return request.getfixturevalue(f"installed_{request.param}")


def test_the_wheel_carries_every_module_and_data_file(distributions):
    wheel, _ = distributions
    names = wheel_names(wheel)
    files = package_files()
    assert any(f.endswith(".sh") for f in files) and any(f.endswith(".yaml") for f in files)  # data files are counted
    assert [f for f in files if f not in names] == []
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_sdist_carries_every_module_and_data_file(distributions):
    _, sdist = distributions
    names = sdist_names(sdist)
    assert [f for f in [*package_files(), "pyproject.toml", "README.md", "MANIFEST.in"] if f not in names] == []


def test_a_new_module_or_data_file_cannot_be_left_out(tmp_path, monkeypatch):
    """Discovery, not lists: a module in a new subpackage and a data file in a new folder, added to a
    copy of the tree, land in the wheel without any change to the packaging files."""
    copy = tmp_path / "tree"
    for rel in source_files():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    (copy / "conformance" / "newstage").mkdir()
    (copy / "conformance" / "newstage" / "__init__.py").write_text("")
    (copy / "conformance" / "newstage" / "thing.py").write_text("X = 1\n")
    (copy / "conformance" / "rules").mkdir()
    (copy / "conformance" / "rules" / "site.yaml").write_text("rules: []\n")
    monkeypatch.setattr("tests.installed.ROOT", copy)
    monkeypatch.setattr(
        "tests.installed.source_files", lambda: [str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()]
    )
    wheel, _ = build_distributions(tmp_path / "build")
    names = wheel_names(wheel)
    assert {"conformance/newstage/thing.py", "conformance/rules/site.yaml"} <= names


def test_the_installed_package_is_the_one_imported(installed):
    where = installed.package_dir()
    assert installed.venv in where.parents and ROOT not in where.parents


def test_version_checks_and_profiles(installed, tmp_path):
    p = installed.conformance("--version", cwd=tmp_path)
    assert p.returncode == 0 and __version__ in p.stdout
    p = installed.conformance("checks", cwd=tmp_path)
    source = subprocess.run([sys.executable, "-m", "conformance", "checks"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and p.stdout == source.stdout and "KUBELET-CPU-POLICY" in p.stdout
    p = installed.conformance("profiles", "list", cwd=tmp_path)
    assert p.returncode == 0
    assert {line.split()[0] for line in p.stdout.splitlines()} == {
        f.stem for f in (ROOT / "conformance" / "config" / "profiles").glob("*.yaml")
    }


def test_run_collect_and_replay(installed, tmp_path):
    """The README's first command, from the installed package: this machine is audited with the local
    transport (it is no GPU node: rejected, exit 1), all four reports are written, and a collected
    snapshot replays to the same verdicts."""
    p = installed.conformance("run", "--output", "out", cwd=tmp_path)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    for name in ("report.html", "junit.xml", "results.json", "results.prom"):
        assert (tmp_path / "out" / name).stat().st_size > 0, name
        assert f" out/{name}" in p.stdout  # as the user would type it from where they stand
    live = json.loads((tmp_path / "out" / "results.json").read_text())
    assert live["nodes"][0]["transport"] == "local" and live["complete"] is True
    p = installed.conformance("collect", "--output", "snap", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = installed.conformance("run", "--snapshot", "snap", "--output", "replay", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    replay = json.loads((tmp_path / "replay" / "results.json").read_text())
    assert outcomes(replay) == outcomes(live)


@pytest.mark.lab
def test_lab_audit_over_ssh_from_the_installed_wheel(installed_wheel, lab, tmp_path):
    (tmp_path / "inventory.yaml").write_text(lab.inventory())
    p = installed_wheel.conformance("run", "--inventory", "inventory.yaml", "--output", "out", cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert outcomes(doc) == EXPECTED
