"""The layout's rules (docs/architecture.md), checked on the import graph read from the source (ast): the
pipeline's stages import only downwards and no modules import each other in a circle; check bodies never
reach a transport, the Kubernetes API or the run; parsers do no I/O; outputs do not judge; the programs
that run on nodes import nothing from the package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "conformance"
IO_MODULES = ("subprocess", "socket", "paramiko", "kubernetes", "urllib3", "requests", "http", "shutil", "tempfile")
IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "urlopen", "system", "popen"}


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (functions too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def offending(files: list[Path], banned: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for f in files:
        bad = sorted(m for m in imports(f) if any(m == b or m.startswith(b + ".") for b in banned))
        if bad:
            found[str(f.relative_to(ROOT))] = bad
    return found


# The pipeline's stages, bottom first (docs/architecture.md "Stage order"). A module may import its own
# stage and the stages below it, never one above.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("configuration", ("conformance", "conformance.errors", "conformance.config")),
    ("collection", ("conformance.collection",)),
    ("facts", ("conformance.facts",)),
    ("live facts", ("conformance.cluster", "conformance.measurements")),
    ("checks", ("conformance.checks", "suites")),
    ("outputs", ("conformance.outputs",)),
    ("the run", ("conformance.run", "conformance.session", "conformance.fixtures", "conformance.plugin")),
    ("commands", ("conformance.cli", "conformance.commands", "conformance.__main__")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    files = [*PKG.rglob("*.py"), *(ROOT / "suites").glob("*.py")]
    return {module_name(f): f for f in files}


def stage_of(module: str) -> int:
    """The stage of a module: the one whose longest prefix names it (conformance alone is its __init__)."""
    best, level = -1, -1
    for i, (_, prefixes) in enumerate(STAGES):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best and (p != "conformance" or module == p):
                best, level = len(p), i
    return level


def project_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (each import resolved to the longest module it names)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        out = set()
        for target in imports(path):
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                out.add(".".join(parts))
        graph[name] = out
    return graph


def test_every_module_has_a_stage():
    assert [m for m in project_modules() if stage_of(m) < 0] == []


def test_imports_point_down_the_pipeline():
    graph = project_imports(project_modules())
    upward = sorted(
        f"{m} ({STAGES[stage_of(m)][0]}) imports {t} ({STAGES[stage_of(t)][0]})"
        for m, targets in graph.items()
        for t in targets
        if stage_of(t) > stage_of(m)
    )
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    graph = project_imports(project_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_runs_parts_never_import_what_composes_them():
    """conformance/run/ holds the run's parts; session.Run, the fixtures and the plugin compose them from above
    (issue 60 item 4: run/streamed.py imported session.Run). Type-checking imports count too."""
    above = ("conformance.session", "conformance.fixtures", "conformance.plugin")
    found = offending(sorted((PKG / "run").rglob("*.py")), above)
    assert found == {}


def test_the_stages_exist_as_packages():
    stages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert {"config", "collection", "facts", "cluster", "measurements", "checks", "outputs"} <= stages


def test_check_bodies_reach_no_transport_api_or_run():
    banned = (
        "conformance.collection", "conformance.cluster", "conformance.measurements", "conformance.session",
        "conformance.outputs", "conformance.plugin", "conformance.cli", *IO_MODULES,
    )  # fmt: skip
    assert offending(sorted((ROOT / "suites").glob("*.py")), banned) == {}


def test_parsers_do_no_io():
    files = sorted((PKG / "facts").glob("*.py"))
    banned = ("conformance.collection.transports", "conformance.cluster", "conformance.measurements", "conformance.session",
              "conformance.outputs", *IO_MODULES)  # fmt: skip
    assert offending(files, banned) == {}
    assert {str(f.relative_to(ROOT)): sorted(calls(f) & IO_CALLS) for f in files if calls(f) & IO_CALLS} == {}


def test_outputs_render_and_never_judge():
    # merge reads pod logs with the in-cluster manifests' markers (conformance.cluster.manifests, no API call)
    banned = ("suites", "conformance.facts", "conformance.checks.gpu_rules", "conformance.collection", "conformance.cluster.api",
              "conformance.cluster.pods", "conformance.cluster.acceptance")  # fmt: skip
    assert offending(sorted((PKG / "outputs").glob("*.py")), banned) == {}


def test_node_programs_import_nothing_from_the_package():
    probes = [PKG / "collection" / "probes" / f"{n}.py" for n in ("nvml_facts", "h2d_bandwidth", "driver_library")]
    assert offending(probes, ("conformance",)) == {}


def test_no_class_keeps_more_than_about_a_dozen_attributes():
    """The run's state is split by concern (docs/architecture.md); no object grows into a catch-all."""
    big = {}
    for f in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                attrs = {
                    a.attr
                    for a in ast.walk(node)
                    if isinstance(a, ast.Attribute)
                    and isinstance(a.value, ast.Name)
                    and a.value.id == "self"
                    and isinstance(a.ctx, ast.Store)
                }
                if len(attrs) > 13:
                    big[f"{f.relative_to(ROOT)}:{node.name}"] = len(attrs)
    assert big == {}


# Size limits (docs/architecture.md "Size limits"): a class that outgrows them holds more than one job.
CLASS_LINES_MAX = 300
RUN_LINES_MAX = 200


def _classes() -> list[tuple[str, ast.ClassDef]]:
    out = []
    for f in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                out.append((f"{f.relative_to(ROOT)}:{node.name}", node))
    return out


def test_no_class_is_longer_than_the_stated_limit():
    long = {name: n.end_lineno - n.lineno + 1 for name, n in _classes() if n.end_lineno - n.lineno + 1 > CLASS_LINES_MAX}
    assert long == {}


def test_the_run_composes_its_parts_and_stays_small():
    """Run is at most RUN_LINES_MAX lines; how a run starts lives in conformance.run.starts, not on Run; the
    verdict is decided in conformance.config.verdict only; identity and drift are their own part."""
    (run,) = [n for name, n in _classes() if name == "conformance/session.py:Run"]
    assert run.end_lineno - run.lineno + 1 <= RUN_LINES_MAX
    methods = {f.name for f in run.body if isinstance(f, ast.FunctionDef)}
    assert not methods & {"from_options", "from_results"}
    assert "conformance.run.starts" not in imports(PKG / "session.py")
    # the starts build the parts below Run and never reach back up to it (issue 54 item 17): Run composes them
    assert not {m for m in imports(PKG / "run" / "starts.py") if m.startswith("conformance.session")}
    # nothing but the verdict module calls the verdict rule itself
    deciders = sorted(
        str(f.relative_to(ROOT)) for f in PKG.rglob("*.py")
        if f != PKG / "config" / "verdict.py" and {"verdict", "blocking_failures", "not_judged"} & calls(f)
    )  # fmt: skip
    assert deciders == []
    identity_part = imports(PKG / "run" / "identities.py")
    assert "conformance.checks.fleet_drift.drift_results" in identity_part
    assert "conformance.checks.fleet_drift.drift_results" not in imports(PKG / "session.py")


def test_node_facts_is_composed_of_one_class_per_domain():
    from conformance.facts.node_facts import NodeFacts

    domains = [c.__name__ for c in NodeFacts.__bases__]
    assert domains == ["KubeletFacts", "RuntimeFacts", "CpuFacts", "GpuNodeFacts", "SystemFacts"]
    assert NodeFacts.__dict__.keys() <= {"__module__", "__doc__", "__qualname__", "__firstlineno__", "__static_attributes__"}


def test_each_command_declares_its_options_in_a_table():
    from conformance import cli

    assert [c.name for c in cli.COMMANDS] == ["run", "collect", "report", "diff", "waivers", "profiles", "manifests",
                                               "merge", "gate", "checks"]  # fmt: skip
    build = next(n for n in ast.walk(ast.parse((PKG / "cli.py").read_text())) if isinstance(n, ast.FunctionDef)
                 and n.name == "build_parser")  # fmt: skip
    assert build.end_lineno - build.lineno + 1 <= 25  # the loop over COMMANDS, no option written out
    # each command in its own module, its options table beside its body (issue 54 item 17)
    for c in cli.COMMANDS:
        module = PKG / "commands" / f"{c.name}.py"
        tree = ast.parse(module.read_text())
        names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert c.name.upper() in names and f"cmd_{c.name}" in funcs, module
    assert len((PKG / "cli.py").read_text().splitlines()) <= 150


def _raises_unknown(node: ast.AST) -> bool:
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return getattr(call, "id", getattr(call, "attr", "")) == "FactUnavailable"


def _settles(node: ast.AST) -> bool:
    """An assert, or a call of the helpers that settle failures and unknowns (checks.conclude and its wrappers)."""
    if isinstance(node, ast.Assert):
        return True
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("conclude", "settle", "_fail_or_error")


def test_a_definite_failure_is_never_hidden_by_an_unknown():
    """Issue 59 item 8: a check that finds part of its subject unknown judges the rest, and a definite failure is
    `failed` (its message naming the failures first, then what was not judged: checks.conclude), never `error`. In a
    check body an unknown is therefore never raised from inside a loop over its parts (collect it and conclude), nor
    while failures it has collected are not yet settled (between the start of a `problems`/`failures` list and the
    assert or conclude that settles it)."""
    bad = []
    for f in sorted((ROOT / "suites").glob("test_*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
            for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))):
                bad += [f"{f.name}:{r.lineno} {fn.name}: raises an unknown inside a loop"
                        for r in ast.walk(loop) if _raises_unknown(r)]  # fmt: skip
            lists = [n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                     if isinstance(t, ast.Name) and t.id in ("problems", "failures")]  # fmt: skip
            settled = [n.lineno for n in ast.walk(fn) if _settles(n)]
            for r in (n for n in ast.walk(fn) if _raises_unknown(n)):
                if any(start < r.lineno for start in lists) and any(
                    s > r.lineno and not any(start < s < r.lineno for start in lists) for s in settled
                ):
                    open_from = max(start for start in lists if start < r.lineno)
                    if any(open_from < s < r.lineno for s in settled):
                        continue  # the list begun before it was settled before it
                    bad.append(f"{f.name}:{r.lineno} {fn.name}: raises an unknown while the failures collected from line "
                               f"{open_from} wait")  # fmt: skip
    assert not bad, "\n".join(bad)


def test_the_runs_parts_never_import_the_run_above_them():
    """Issue 60 item 4: session.Run composes the parts in conformance/run/; a part that needs the run takes it as a
    protocol of its own floor, never by importing session (not even for its type)."""
    bad = {f.name: sorted(i for i in imports(f) if i == "conformance.session" or i.startswith("conformance.session."))
           for f in sorted((PKG / "run").glob("*.py"))}  # fmt: skip
    assert not {k: v for k, v in bad.items() if v}, bad
