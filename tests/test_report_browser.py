"""The HTML report in a real browser: a node value that would run script if inserted as HTML
stays text. (`<script>` inserted through innerHTML never runs, so it would prove nothing; an
`<img onerror>` does run.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import require_or_skip
from tests.fakeroot import make_host_root

HOSTILE = "<img src=x onerror=document.title='PWNED'>"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_node_values_stay_text_in_the_browser(tmp_path):
    browser = chromium()
    require_or_skip(None if browser else "no Chromium found (Debian package chromium) for the browser test")
    host = make_host_root(
        tmp_path / "host", ["--config", "/k.yaml"], {"/k.yaml": f'kind: KubeletConfiguration\ncpuManagerPolicy: "{HOSTILE}"\n'}
    )
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--host-root", str(host), "--output", str(out)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert HOSTILE in (out / "results.json").read_text().replace('\\"', '"')
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            (out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "GPU node conformance report</title>" in dom  # the report rendered
    assert "PWNED" not in dom.split("</title>", 1)[0]  # onerror never ran
    assert '<img src="x"' not in dom
    assert "&lt;img src=x onerror=document.title='PWNED'&gt;" in dom  # shown as text
    assert Path(out / "report.html").stat().st_size > 0
