"""The HTML report in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium; no browser is downloaded): it renders without console errors, the verdicts and the matrix
are visible, a click on a matrix cell reveals its row, and a node value that would run script if
inserted as HTML stays text. (`<script>` inserted through innerHTML never runs, so it would prove
nothing; an `<img onerror>` does run.)"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import require_or_skip
from tests.fakeroot import make_host_root

HOSTILE = "<img src=x onerror=document.title='PWNED'>"


def browser_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    host = make_host_root(
        tmp / "host",
        ["--config", "/k.yaml"],
        {
            "/k.yaml": f'kind: KubeletConfiguration\ncpuManagerPolicy: "{HOSTILE}"\n',
            "/proc/sys/net/core/somaxconn": "4096\n",
            "/proc/sys/net/ipv4/tcp_tw_reuse": "1\n",
            "/proc/sys/net/ipv4/ip_local_port_range": "1024 65535\n",
            "/proc/sys/net/ipv4/ip_local_reserved_ports": "\n",
        },
    )
    waivers = tmp / "waivers.yaml"
    until = (dt.date.today() + dt.timedelta(days=30)).isoformat()
    waivers.write_text(
        f"waivers:\n  - check: SYSCTL-SOMAXCONN\n    justification: raised next week\n    expires: {until}\n"
        f"  - check: NODE-NVME-*\n    nodes: nothing-*\n    justification: unused\n    expires: {until}\n"
    )
    out = tmp / "out"
    p = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--host-root", str(host), "--output", str(out), "--waivers", str(waivers)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (out / "report.html").is_file(), p.stdout + p.stderr
    return out


@pytest.fixture(scope="module")
def driver():
    chromium, chromedriver = browser_paths()
    require_or_skip(None if chromium and chromedriver else "no Chromium/chromedriver (Debian: chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        require_or_skip("selenium is not installed (pip install -e '.[test]')")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    yield d
    d.quit()


def test_renders_without_console_errors_and_shows_verdicts_and_matrix(driver, report):
    from selenium.webdriver.common.by import By

    driver.get((report / "report.html").as_uri())
    banner = driver.find_element(By.CSS_SELECTOR, ".gnc span.verdict")
    assert banner.is_displayed() and banner.text in ("accepted", "rejected", "unreachable")
    assert driver.find_element(By.CSS_SELECTOR, ".gnc table.m").is_displayed()
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    assert driver.title == "GPU node conformance report"  # onerror never ran
    assert driver.find_elements(By.CSS_SELECTOR, "img[src='x']") == []
    assert HOSTILE in driver.find_element(By.TAG_NAME, "body").text  # shown as text
    assert "matching nothing: 1" in driver.find_element(By.CSS_SELECTOR, ".gnc").text


def matrix_cell(driver, node: str, check: str):
    from selenium.webdriver.common.by import By

    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, ".gnc table.m tr.ids th")]
    row = driver.find_element(By.CSS_SELECTOR, f".gnc table.m tr[data-node='{node}']")
    return row.find_elements(By.CSS_SELECTOR, "td")[heads.index(check)]


def test_click_on_a_matrix_cell_reveals_its_row(driver, report):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get((report / "report.html").as_uri())
    doc = json.loads((report / "results.json").read_text())
    passed = next(r for r in doc["results"] if r["outcome"] == "passed")
    # pytest-html collapses passed rows; hide them too through the outcome filter, then click
    driver.find_element(By.CSS_SELECTOR, "input.filter[data-test-result='passed']").click()
    matrix_cell(driver, passed["node"], passed["check"]).click()
    row = WebDriverWait(driver, 5).until(lambda d: d.find_element(By.CSS_SELECTOR, "tbody.gnc-target"))
    assert row.get_attribute("id") in (passed["test"], passed["test"] + "::setup")
    assert row.is_displayed()
    assert "hidden" not in row.find_element(By.CSS_SELECTOR, "tr.extras-row").get_attribute("class")
    waived = next(r for r in doc["results"] if r["outcome"] == "waived")
    matrix_cell(driver, waived["node"], waived["check"]).click()
    row = WebDriverWait(driver, 5).until(
        lambda d: next(
            (r for r in d.find_elements(By.CSS_SELECTOR, "tbody.gnc-target") if waived["test"] in r.get_attribute("id")), None
        )
    )
    assert row.get_attribute("id") in (waived["test"], waived["test"] + "::setup") and row.is_displayed()
