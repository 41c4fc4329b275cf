"""The HTML report in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium; no browser is downloaded): it renders without console errors, the verdicts and the matrix
are visible, a click on a matrix cell reveals its row, and a node value that would run script if
inserted as HTML stays text. (`<script>` inserted through innerHTML never runs, so it would prove
nothing; an `<img onerror>` does run.)"""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    assert banner.is_displayed() and banner.text.split()[-1] in ("accepted", "rejected", "unreachable")
    assert driver.find_element(By.CSS_SELECTOR, ".gnc table.m").is_displayed()
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    assert driver.title.startswith("GPU node conformance report") and "PWNED" not in driver.title  # onerror never ran
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


def test_the_first_screen_says_what_was_judged_and_the_environment_comes_last(driver, report):
    """Scope and verdicts sit in the first screen (1,000 px), above the runner's environment table."""
    from selenium.webdriver.common.by import By

    driver.get((report / "report.html").as_uri())
    scope = driver.find_element(By.ID, "gnc-scope")
    environment = driver.find_element(By.ID, "environment")
    assert scope.location["y"] < 1000 and scope.is_displayed()
    assert environment.location["y"] > driver.find_element(By.ID, "results-table").location["y"]
    assert driver.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert driver.find_elements(By.CSS_SELECTOR, "th.col-duration, th.col-links") == []  # no "0 ms", no empty links
    skipped = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "tbody.skipped div.log")]
    assert all("('" not in t and "suites/" not in t for t in skipped)  # a reason, not pytest's tuple


def test_printed_the_controls_go_and_failures_keep_their_evidence(driver, report):
    """With print media: no filter controls or expanders, each failure's evidence shown, the verdict badges and
    matrix cells readable without background graphics (black text and a border)."""
    from selenium.webdriver.common.by import By

    driver.get((report / "report.html").as_uri())
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert not driver.find_element(By.CSS_SELECTOR, ".controls").is_displayed()
        failed = driver.find_elements(By.CSS_SELECTOR, "tbody.failed tr.extras-row, tbody.error tr.extras-row")
        assert failed and all(r.is_displayed() for r in failed)
        assert driver.find_elements(By.CSS_SELECTOR, "tbody.failed details[open]")
        badge = driver.find_element(By.CSS_SELECTOR, ".gnc span.verdict")
        assert badge.value_of_css_property("color") in ("rgba(0, 0, 0, 1)", "rgb(0, 0, 0)")
        pdf = base64.b64decode(driver.print_page())
        assert pdf.startswith(b"%PDF")
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def test_axe_core_finds_no_serious_accessibility_violation(driver, report):
    """axe-core (as axe-selenium-python ships it) over the whole page: no serious or critical violation
    (contrast, names of controls, the page's language, ...)."""
    import axe_selenium_python

    script = Path(axe_selenium_python.__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
    driver.get((report / "report.html").as_uri())
    driver.execute_script(script.read_text(encoding="utf-8"))
    result = driver.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(function (r) { done(r.violations); },"
        " function (e) { done(String(e)); });"
    )
    assert isinstance(result, list), result
    serious = [(v["id"], v["impact"], [n["target"] for n in v["nodes"][:3]])
               for v in result if v["impact"] in ("serious", "critical")]  # fmt: skip
    assert serious == [], serious
