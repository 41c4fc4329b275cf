"""The report page's style sheet and the script that links matrix cells to result rows (conformance.outputs.html_report
puts them on the page)."""

from __future__ import annotations

from conformance.outputs.palette import MUTED, OUTCOME_COLOURS, VERDICT_COLOURS

STYLE = """<style>
.gnc table{border-collapse:collapse;margin:6px 0 14px}
.gnc td,.gnc th{border:1px solid #ccc;padding:2px 6px;font-size:12px}
.gnc .verdict{color:#fff;font-weight:bold;padding:1px 6px;border-radius:3px}
.gnc .gnc-interrupted{border:2px solid #b35900;background:#fff4e5;padding:6px 10px;font-size:14px}
.gnc .m td.c{width:18px;height:18px;text-align:center;color:#fff;padding:0;font-size:11px}
.gnc .m th.r{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;white-space:nowrap;max-height:190px}
.gnc .fam{text-align:center;background:#f5f5f5}
.gnc pre{white-space:pre-wrap;margin:2px 0}
.gnc .m td.c{cursor:pointer}
/* the page: what was judged and the verdicts first, the runner's environment last */
body{display:flex;flex-direction:column;color:#222}
body>#environment-header,body>#environment{order:90}
body>footer{order:99}
#results-table{color:#222}
a{color:#0d47a1}
p.filter{color:#222}
.filters button,.collapse button{color:#0d47a1;text-decoration:underline}
</style>
<style media="print">
@page{size:A4 landscape;margin:10mm}
body{min-width:0;font-size:10px}
.controls,.summary__reload,p.filter,.collapse,#show_all_details,#hide_all_details,.logexpander,.media,
.gnc-search,.sortable::after{display:none!important}
tbody.results-table-row,.gnc tr,.gnc section>table{break-inside:avoid}
.failed .extras-row,.error .extras-row{display:table-row!important}
.gnc .verdict,.gnc .m td.c{color:#000!important;background:none!important;border:1px solid #000}
.gnc .m td.c{width:11px;height:11px;font-size:8px}
.gnc .m th.r{max-height:120px;font-size:8px}
</style>
<style>
/* pytest's item count: the scope section states the tool's own */
.run-count{display:none}
.gnc .mwrap{overflow:auto;max-height:85vh;max-width:100%}
.gnc table.m thead tr.ids th{position:sticky;top:0;background:#fff;z-index:2}
.gnc table.m tbody th{position:sticky;left:0;background:#fff;z-index:1;font-weight:normal;text-align:left;font-size:12px}
.gnc table.m td.c a{color:#fff;text-decoration:none;display:block}
.gnc table.m td.b,.gnc span.b{box-shadow:inset 0 0 0 2px #000;font-weight:bold}
.gnc tr:target,.gnc tr:has(:target){outline:3px solid #1565c0}
.gnc .sr{position:absolute;left:-9999px}
.gnc td.blocks{font-weight:bold}
.gnc table.findings td{vertical-align:top}
.gnc .gnc-filters label{margin-right:8px}
@media print{.gnc .mwrap{overflow:visible;max-height:none}.gnc-filters,#gnc-shown,.gnc a.pl,#results-table,
#gnc-find,#gnc-found{display:none!important}.gnc table.m td.c a{color:#000!important}.gnc a{color:#000}
.gnc .findings tr{break-inside:avoid}}
tbody.gnc-target td{outline:2px solid #1565c0}
.gnc .fleet-total .verdict{font-size:15px;margin-right:6px}
.gnc table.fleet td.n{text-align:right;min-width:28px}
.gnc table.fleet td.hot{background:#ffcdd2}
</style>
<script>
// A click on a matrix cell shows its result row: re-enable the outcome filter that hides it,
// expand it and scroll to it. Rows are tbody elements whose id is the pytest node id.
document.addEventListener("click", function (ev) {
  var cell = ev.target.closest && ev.target.closest(".gnc table.m td.c");
  if (!cell) return;
  var test = cell.getAttribute("data-test");
  if (!test) {
    var head = cell.closest("table").querySelector("tr.ids").children[cell.cellIndex];
    var tpl = head && head.getAttribute("data-tpl");
    if (!tpl) return;
    test = tpl.replace("{node}", cell.parentNode.getAttribute("data-node"));
  }
  function find() {
    var rows = document.querySelectorAll("tbody.results-table-row");
    for (var i = 0; i < rows.length; i++) {
      var id = rows[i].id;  // "<node id>" for the call phase, "<node id>::setup" for a setup error
      if (id === test || id.indexOf(test + "::") === 0) return rows[i];
    }
    return null;
  }
  function reveal(row) {
    // expand without going through the table's own handlers, which may re-render it
    var extras = row.querySelector("tr.extras-row");
    if (extras) extras.classList.remove("hidden");
    var result = row.querySelector("td.col-result");
    if (result) result.classList.remove("collapsed");
    document.querySelectorAll("tbody.gnc-target").forEach(function (r) { r.classList.remove("gnc-target"); });
    row.classList.add("gnc-target");
    row.scrollIntoView({block: "center"});
  }
  if (!find()) {
    // filtered out: turn the outcome filters back on (the table re-renders)
    var boxes = document.querySelectorAll("input.filter:not(:checked)");
    for (var j = 0; j < boxes.length; j++) boxes[j].click();
  }
  // reveal now and again for a moment, in case the table re-renders after this click
  var ticks = 0;
  (function again() {
    var r = find();
    if (r && !r.classList.contains("gnc-target")) reveal(r);
    if (++ticks < 20) setTimeout(again, 50);
  })();
});
</script>
<script>
// pytest-html's outcome filters: one labelled group of labelled checkboxes
document.addEventListener("DOMContentLoaded", function () {
  var group = document.querySelector(".controls .filters");
  if (group) { group.setAttribute("role", "group"); group.setAttribute("aria-label", "Show results by outcome"); }
  document.querySelectorAll("input.filter[data-test-result]").forEach(function (box) {
    box.setAttribute("aria-label", "show " + box.getAttribute("data-test-result") + " results");
  });
  // pytest-html's row expanders (a row's result cell) answer clicks only: reachable by Tab, opened with Enter
  // or Space. pytest-html redraws its whole table on every toggle, filter or sort: the cells are marked again.
  function focusable() {
    document.querySelectorAll("#results-table tr.collapsible > td.col-result:not([tabindex])").forEach(function (td) {
      td.setAttribute("tabindex", "0"); td.setAttribute("role", "button");
      td.setAttribute("aria-label", "show or hide the details of this " + td.textContent.toLowerCase() + " result");
    });
  }
  focusable();
  new MutationObserver(focusable).observe(document.body, {childList: true, subtree: true});
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if ((ev.key === "Enter" || ev.key === " ") && t.matches && t.matches("#results-table tr.collapsible > td.col-result")) {
      ev.preventDefault(); t.click();
    }
  });
});
</script>"""
# one palette for the page (conformance.outputs.palette): the matrix, the badges and pytest-html's own table
STYLE = STYLE.replace(
    "</style>\n<script>",
    "".join(f".gnc .v-{v}{{background:{c}}}\n" for v, c in VERDICT_COLOURS.items())
    + "".join(f".gnc .o-{o}{{background:{c}}}\n" for o, c in OUTCOME_COLOURS.items())
    + "".join(f"span.{o},.{o} .col-result{{color:{c}}}\n" for o, c in OUTCOME_COLOURS.items() if o != "none")
    + "".join(f"span.{o},.{o} .col-result{{color:{MUTED}}}\n" for o in ("xfailed", "xpassed", "rerun"))  # never used here
    + "</style>\n<script>",
)
