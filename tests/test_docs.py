"""The documentation site (issue 54 item 16): README is the newcomer's page and points into docs/; the check
reference is made from the checks themselves and stays equal to them; the site builds with MkDocs (Material)
in strict mode, so a broken link or a page left out of the navigation fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_check_reference_is_the_checks_themselves():
    made = subprocess.run([sys.executable, "-m", "conformance", "checks", "--markdown"], capture_output=True, text=True,
                          check=True, timeout=120).stdout  # fmt: skip
    assert (ROOT / "docs" / "checks.md").read_text() == made, "run: conformance checks --markdown > docs/checks.md"


def test_readme_is_short_and_every_page_it_names_exists():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 80
    named = set(re.findall(r"`(docs/[a-z-]+\.md)`", readme))
    assert named and all((ROOT / p).is_file() for p in named), named
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {Path(p).name for p in named} | {"index.md"} == pages  # every page is reachable from the README


@pytest.mark.slow  # MkDocs builds the whole site
def test_the_site_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs is not installed: pip install -e '.[test]' brings mkdocs-material"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    p = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT, env=env)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    page = (tmp_path / "site" / "checks" / "index.html").read_text()
    assert 'id="gpu-cdi"' in page and "Remediation:" in page
