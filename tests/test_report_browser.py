"""The HTML report in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium; no browser is downloaded): it renders without console errors, the verdicts and the matrix
are visible, a click on a matrix cell reveals its row, and a node value that would run script if
inserted as HTML stays text. (`<script>` inserted through innerHTML never runs, so it would prove
nothing; an `<img onerror>` does run.)"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_or_skip
from tests.fakeroot import make_host_root

pytestmark = pytest.mark.slow  # headless Chromium

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
def driver(tmp_path_factory):
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
    # Chromium leaves an empty org.chromium.Chromium.* folder in TMPDIR on each start: in this test's own folder
    env = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium-tmp"))}
    d = webdriver.Chrome(service=Service(executable_path=chromedriver, env=env), options=opts)
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
    return row.find_elements(By.CSS_SELECTOR, "th, td")[heads.index(check)]


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
    # a finding's cell is a link to its row in the findings (`#NODE/CHECK`): the browser's history goes back
    waived = next(r for r in doc["results"] if r["outcome"] == "waived")
    matrix_cell(driver, waived["node"], waived["check"]).find_element(By.TAG_NAME, "a").click()
    target = f"{waived['node']}/{waived['check']}"
    WebDriverWait(driver, 5).until(lambda d: d.execute_script("return decodeURIComponent(location.hash)") == "#" + target)
    row = driver.find_element(By.ID, target)
    assert row.is_displayed() and waived["message"][:40] in row.text
    driver.back()
    WebDriverWait(driver, 5).until(lambda d: d.execute_script("return location.hash") == "")


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
    """With print media: no filter controls, expanders or permalinks, each finding's evidence shown (pytest-html's
    table, which repeats them, is left off paper), the verdict badges and matrix cells readable without
    background graphics (black text and a border). Printed to PDF (Chromium's own printing), page 1 holds the
    scope and the nodes not accepted, and every failed or errored result is in the document with its evidence."""
    import io

    import pypdf
    from selenium.webdriver.common.by import By

    driver.get((report / "report.html").as_uri())
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert not driver.find_element(By.CSS_SELECTOR, ".controls").is_displayed()
        assert not driver.find_element(By.CSS_SELECTOR, "form.gnc-filters").is_displayed()
        assert not driver.find_element(By.ID, "results-table").is_displayed()
        rows = driver.find_elements(By.CSS_SELECTOR, "#gnc-findings tbody tr")
        assert rows and all(r.is_displayed() for r in rows)
        assert all(d.is_displayed() for d in driver.find_elements(By.CSS_SELECTOR, "#gnc-findings details[open] pre"))
        badge = driver.find_element(By.CSS_SELECTOR, ".gnc span.verdict")
        assert badge.value_of_css_property("color") in ("rgba(0, 0, 0, 1)", "rgb(0, 0, 0)")
        # issue 54 item 3: the matrix's failed, error and waived cells are links: the screen rule made them white,
        # and a print rule less specific than it left them white on paper (only passed and skipped survived)
        links = driver.find_elements(By.CSS_SELECTOR, ".gnc table.m td.c a")
        assert links and all(a.value_of_css_property("color") in ("rgba(0, 0, 0, 1)", "rgb(0, 0, 0)") for a in links)
        # the matrix fits an A4 landscape page (297 mm less 2 x 10 mm margins, at 96 px per inch): no column cut off
        width = driver.execute_script("return document.querySelector('.gnc table.m').getBoundingClientRect().width")
        assert width <= (297 - 20) / 25.4 * 96, width
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    printed = driver.execute_cdp_cmd("Page.printToPDF", {"printBackground": False, "landscape": True, "paperWidth": 11.69,
                                                          "paperHeight": 8.27, "preferCSSPageSize": True})  # fmt: skip
    pages = [" ".join(p.extract_text().split()) for p in pypdf.PdfReader(io.BytesIO(base64.b64decode(printed["data"]))).pages]
    doc = json.loads((report / "results.json").read_text())
    assert "Scope and verdicts" in pages[0]
    for n in doc["nodes"]:
        if n["verdict"] != "accepted":
            assert n["name"] in pages[0] and n["verdict"] in pages[0]
    whole = " ".join(pages)
    for r in doc["results"]:
        if r["outcome"] in ("failed", "error"):
            assert r["check"] in whole, r["check"]
            if r["evidence"]:
                assert " ".join(r["evidence"][0].split())[:30] in whole, (r["check"], r["evidence"][0])


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


def test_findings_filter_by_node_check_severity_outcome_and_text_and_say_when_nothing_matches(driver, report):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get((report / "report.html").as_uri())
    rows = driver.find_elements(By.CSS_SELECTOR, "#gnc-findings tbody tr")
    form = driver.find_element(By.CSS_SELECTOR, "#gnc-findings form")
    shown = driver.find_element(By.ID, "gnc-shown")
    assert shown.text == f"{len(rows)} of {len(rows)} rows shown"
    severity = rows[0].get_attribute("data-severity")
    Select(form.find_element(By.NAME, "severity")).select_by_visible_text(severity)
    visible = [r for r in rows if r.is_displayed()]
    assert visible and all(r.get_attribute("data-severity") == severity for r in visible)
    assert shown.text == f"{len(visible)} of {len(rows)} rows shown"
    form.find_element(By.NAME, "text").send_keys("no such text anywhere 1234")
    assert not any(r.is_displayed() for r in rows)
    assert shown.text.startswith("No finding matches these filters")
    # a permalink to a row the filters hide clears them and lands
    target = rows[0].get_attribute("id") or rows[0].find_element(By.CSS_SELECTOR, "[id]").get_attribute("id")
    driver.execute_script("location.hash = arguments[0]", target)
    assert rows[0].is_displayed()
    # several words find the rows holding all of them, in any order (issue 54 item 9)
    text = form.find_element(By.NAME, "text")
    node, check = rows[0].get_attribute("data-node"), rows[0].get_attribute("data-check").split()[0]
    text.clear()
    text.send_keys(f"{check.lower()}   {node.upper()}")
    visible = [r for r in rows if r.is_displayed()]
    assert rows[0] in visible and all(node in r.text and check in r.text for r in visible)
    text.send_keys(" no-such-word")
    assert not any(r.is_displayed() for r in rows)


def test_every_node_and_finding_has_a_permalink_that_lands(driver, report):
    from selenium.webdriver.common.by import By

    doc = json.loads((report / "results.json").read_text())
    for n in doc["nodes"]:
        driver.get((report / "report.html").as_uri() + f"#node-{n['name']}")
        assert driver.find_element(By.ID, f"node-{n['name']}").is_displayed()
    finding = next(r for r in doc["results"] if r["outcome"] in ("failed", "error"))
    driver.get((report / "report.html").as_uri() + f"#{finding['node']}/{finding['check']}")
    row = driver.find_element(By.CSS_SELECTOR, "#gnc-findings tr:target, #gnc-findings tr:has(:target)")
    assert row.is_displayed() and finding["check"] in row.text
    # pytest-html's filter bar counts the tool's results, as the scope section does
    counts = {o: sum(r["outcome"] == o for r in doc["results"]) for o in ("passed", "failed", "skipped")}
    bar = driver.find_element(By.CSS_SELECTOR, ".controls .filters").text
    assert all(f"{c} {o.capitalize()}" in bar for o, c in counts.items()), bar
    assert not driver.find_element(By.CSS_SELECTOR, ".run-count").is_displayed()


def test_the_fleet_search_finds_every_node_and_permalinks_reach_unlisted_nodes(driver, tmp_path):
    """A 2,100-node page lists 2,000 nodes; the search still finds the others, says when nothing matches, and
    `#node-NAME` of an unlisted node lands on a row made for it."""
    from selenium.webdriver.common.by import By

    from conformance.outputs.fleet_view import NODE_LIST_MAX
    from tests.test_fleet_report import fleet

    n = NODE_LIST_MAX + 100
    (tmp_path / "results.json").write_text(json.dumps(fleet(n)))
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "conformance", "report", str(tmp_path / "results.json"), "--output", str(out)],
                   capture_output=True, text=True, timeout=600)  # fmt: skip
    last = f"gpu-{n - 1:04d}"  # accepted and last by name: not among the 2,000 listed
    html = (out / "report.html").read_text()
    assert f"id='node-{last}'" not in html
    driver.get((out / "report.html").as_uri())
    driver.find_element(By.CSS_SELECTOR, "#gnc-every-node summary").click()
    box = driver.find_element(By.ID, "gnc-find")
    box.send_keys(last)
    assert [r.text.split()[0] for r in driver.find_elements(By.CSS_SELECTOR, "#gnc-nodes tbody tr")] == [last]
    assert driver.find_element(By.ID, "gnc-found").text == "1 node(s) match"
    box.clear()
    box.send_keys("no-such-node")
    assert driver.find_elements(By.CSS_SELECTOR, "#gnc-nodes tbody tr") == []
    assert driver.find_element(By.ID, "gnc-found").text.startswith("No node matches")
    driver.get((out / "report.html").as_uri() + f"#node-{last}")
    assert driver.find_element(By.ID, f"node-{last}").is_displayed()
    # issue 54 item 8: at fleet scale too, findings have #NODE/CHECK permalinks and the per-check lists link to them;
    # a finding the page leaves out (it keeps the first 2,000, what blocks first) lands on its node's row
    from selenium.webdriver.support.ui import WebDriverWait

    assert "<a href='#gpu-0007/X-1'>gpu-0007</a>" in html and "id='gpu-0007/X-1'" in html
    driver.get((out / "report.html").as_uri() + "#gpu-0007/X-1")
    assert driver.find_element(By.ID, "gpu-0007/X-1").is_displayed()
    assert f"id='{last}/FLEET-CONSISTENT'" not in html
    driver.get((out / "report.html").as_uri() + f"#{last}/FLEET-CONSISTENT")
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return location.hash") == f"#node-{last}")
    assert driver.find_element(By.ID, f"node-{last}").is_displayed()


def test_the_keyboard_reaches_matrix_cells_and_opens_result_rows(driver, report):
    """Keyboard access: pytest-html's row expanders take focus and open with Enter, and a finding's matrix cell
    is a link (the keyboard's Enter follows it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get((report / "report.html").as_uri())
    cell = "#results-table tr.collapsible > td.col-result"
    expander = WebDriverWait(driver, 5).until(lambda d: d.find_element(By.CSS_SELECTOR, cell))
    assert expander.get_attribute("tabindex") == "0" and expander.get_attribute("role") == "button"
    row_id = expander.find_element(By.XPATH, "./ancestor::tbody").get_attribute("id")

    def extras_class(d):  # pytest-html redraws the table: find the row again each time
        return d.find_element(By.ID, row_id).find_element(By.CSS_SELECTOR, "tr.extras-row").get_attribute("class")

    before = extras_class(driver)
    # focus() takes only on a focusable element (one without tabindex stays unfocused); then the keyboard's Enter
    driver.execute_script("arguments[0].focus()", expander)
    assert driver.execute_script("return document.activeElement === arguments[0]", expander)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(driver, 5).until(lambda d: extras_class(d) != before)
    link = driver.find_element(By.CSS_SELECTOR, ".gnc table.m td.c a")
    driver.execute_script("arguments[0].focus()", link)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(driver, 5).until(lambda d: d.execute_script("return location.hash") == link.get_attribute("hash"))
