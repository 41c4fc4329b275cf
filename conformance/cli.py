"""The `conformance` command: run, collect, checks.

Exit codes, the same for every command: 0 every node accepted (or the command succeeded),
1 a node rejected or unreachable, 2 interrupted, 4 usage, inventory or profile error."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import signal
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.errors import UsageError
from conformance.outputs import diff, diff_lines, load_results, push_to_gateway

EXIT_OK, EXIT_REJECTED, EXIT_INTERRUPTED, EXIT_USAGE = 0, 1, 2, 4
GROUP_BY_HELP = "node label that groups nodes in the report's fleet view (default: a node-pool label)"
SELECT_HELP = (
    "judge only these checks: globs over check ids and family names, e.g. 'KUBELET-CPU-*', gpu_health, "
    "FLEET-CONSISTENT (repeat; `conformance checks` lists ids and families)"
)


def suites_dir() -> Path:
    here = Path(__file__).resolve().parent.parent / "suites"
    if not (here / "__init__.py").is_file():
        raise UsageError(f"the check suites were not found at {here}; reinstall gpu-node-conformance")
    return here


def _default_output() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("reports") / stamp


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


@dataclass(frozen=True)
class Opt:
    """One option or argument of a command, as argparse.add_argument takes it."""

    flags: tuple[str, ...]
    kw: dict[str, Any]


def opt(*flags: str, **kw: Any) -> Opt:
    return Opt(flags, kw)


@dataclass(frozen=True)
class Command:
    """One command of the command line: its help, its options and, for a command of actions (waivers lint,
    profiles list/show), those actions. Each command's table sits with its function below; build_parser reads
    COMMANDS."""

    name: str
    help: str
    options: tuple[Opt, ...] = ()
    description: str | None = None
    epilog: str | None = None
    actions: tuple[Command, ...] = ()
    action_dest: str | None = None


CHECKS_OPTION = opt(
    "--checks",
    action="append",
    default=[],
    metavar="FILE|DIR",
    help="site checks: a YAML rule file, or a folder of them and of Python test_*.py files (repeatable)",
)
COLLECTION_OPTIONS = (
    opt("--inventory", metavar="FILE", help="inventory YAML (default: this machine)"),
    opt("--host-root", metavar="DIR", default="", help="with no inventory: read this machine below DIR"),
    opt("--parallel", type=int, default=16, metavar="N", help="nodes collected at once (default 16)"),
    opt(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="per-node bound on connection, authentication and the remote collector together",
    ),
    opt(
        "--retries",
        type=int,
        default=2,
        metavar="N",
        help="retries of a transient connection failure, with backoff (default 2; never auth or host keys)",
    ),
    opt("-v", "--verbose", action="count", default=0, help="more detail (progress, each check)"),
    CHECKS_OPTION,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="conformance",
        formatter_class=_Formatter,
        description="Conformance checks for Kubernetes GPU nodes: CPU pinning, NUMA locality, cgroups, runtime, sysctls.",
        epilog=textwrap.dedent("""\
            examples:
              conformance run                                  # audit this machine
              conformance run --inventory inventory/example.yaml --output reports/today
              conformance checks

            exit codes: 0 all nodes accepted, 1 a node rejected or unreachable, 2 interrupted, 4 usage error"""),
    )
    p.add_argument("--version", action="version", version=f"gpu-node-conformance {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        _add_command(sub, command)
    return p


def _add_command(sub: Any, c: Command) -> None:
    cp = sub.add_parser(c.name, formatter_class=_Formatter, help=c.help, description=c.description, epilog=c.epilog)
    for o in c.options:
        cp.add_argument(*o.flags, **o.kw)
    if c.actions:
        actions = cp.add_subparsers(dest=c.action_dest, metavar="ACTION", required=True)
        for a in c.actions:
            _add_command(actions, a)


def load_registry() -> dict:
    from conformance.checks import load_builtin

    suites_dir()
    return load_builtin()


DIFF = Command(
    "diff",
    help="compare two results.json: new failures, fixed, still failing, new and vanished nodes",
    epilog="example:\n  conformance diff reports/monday/results.json reports/tuesday/results.json\n"
    "exit code 1 when there are new failures or vanished nodes",
    options=(
        opt("before", metavar="A"),
        opt("after", metavar="B"),
        opt("--json", action="store_true", help="print the diff as JSON"),
    ),
)


def cmd_diff(args: argparse.Namespace) -> int:
    d = diff(load_results(args.before), load_results(args.after))
    print(json.dumps(d, indent=2) if args.json else "\n".join(diff_lines(d)))
    return EXIT_REJECTED if d["new_failures"] or d["vanished_nodes"] else EXIT_OK


GATE = Command(
    "gate",
    help="turn a results document's verdicts into node labels, annotations and taints (dry run unless --apply)",
    description="Accepted nodes get the label gpu-conformance.io/accepted=<profile> and lose the startup taint; "
    "rejected, unreachable and incomplete nodes keep or get it. Every node gets the annotation "
    "gpu-conformance.io/verdict. Nothing else on a node is touched. Without --apply the patches are printed "
    "and nothing is written. Needs 'get' and 'patch' on nodes: the ClusterRole in deploy/gate-rbac.yaml.",
    epilog=textwrap.dedent("""\
        examples:
          conformance gate reports/today/results.json                  # print the patches, write nothing
          conformance gate reports/today/results.json --apply --context prod
          conformance gate merged/results.json --in-cluster --apply --taint example.com/unverified
        exit code 1 when a node was refused (stale or mismatched results, no permission)"""),
    options=(
        opt("results", metavar="RESULTS_JSON"),
        opt("--apply", action="store_true", help="write the patches (default: print them and write nothing)"),
        opt("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)"),
        opt("--context", metavar="NAME", help="kubeconfig context"),
        opt("--in-cluster", action="store_true", help="use the pod's ServiceAccount"),
        opt("--inventory", metavar="FILE", help="take the API access from this inventory's kubernetes: section"),
        opt("--taint", default=None, metavar="KEY", help="the startup taint's key (default gpu-conformance.io/unverified)"),
        opt(
            "--taint-effect",
            default="NoSchedule",
            choices=("NoSchedule", "NoExecute"),
            help="NoExecute also evicts running pods: only where that is wanted",
        ),
        opt("--max-age", type=float, default=24.0, metavar="HOURS", help="refuse results older than this (24)"),
    ),
)


def cmd_gate(args: argparse.Namespace) -> int:
    from conformance.checks import required_of
    from conformance.cluster.api import api_client
    from conformance.cluster.gate import TAINT, DocumentRefused, GateSettings, gate
    from conformance.config.kubernetes import KubeSpec

    doc = load_results(args.results)
    if args.inventory:
        from conformance.config.inventory import load_inventory

        spec = load_inventory(args.inventory).kubernetes
        if spec is None:
            raise UsageError(f"{args.inventory}: no kubernetes: section to reach the API with")
    else:
        spec = KubeSpec(kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster)
    settings = GateSettings(taint=args.taint or TAINT, effect=args.taint_effect, max_age_s=args.max_age * 3600)
    try:
        plans = gate(api_client(spec), doc, settings, args.apply, required_of)
    except DocumentRefused as e:
        print(str(e))
        return EXIT_REJECTED
    for plan in plans:
        head = f"{plan.node:<24} {plan.verdict:<11}"
        if plan.not_judged:
            shown = ", ".join(plan.not_judged[:8]) + (f" and {len(plan.not_judged) - 8} more" if len(plan.not_judged) > 8 else "")
            print(f"{head} not judged, so not accepted: {shown}")
        if plan.patch_failed:
            print(f"{head} refused: {plan.refused}")
            continue
        if plan.refused:
            print(f"{head} acceptance refused: {plan.refused}")
        if plan.patch is None:
            print(f"{head} unchanged ({plan.note})")
        else:
            print(f"{head} {'patched:' if plan.applied else 'would run:'} {plan.kubectl()}")
    if not args.apply:
        print("dry run: nothing written (--apply writes these patches)")
    return EXIT_REJECTED if any(p.refused for p in plans) else EXIT_OK


WAIVERS = Command(
    "waivers",
    help="check a waivers file: unknown check ids, past expiry, missing fields",
    epilog="example:\n  conformance waivers lint inventory/waivers.example.yaml\nexit code 1 when it finds problems",
    action_dest="waivers_command",
    actions=(Command("lint", help="report problems in a waivers file", options=(opt("file", metavar="FILE"), CHECKS_OPTION)),),
)


def cmd_waivers(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from conformance.config.waivers import lint

    load_site_checks(args.checks)  # waivers of site checks name ids from these files
    from conformance.checks import REGISTRY

    problems = lint(args.file, set(REGISTRY), datetime.now(UTC).date())
    for p in problems:
        print(p)
    if not problems:
        print(f"{args.file}: no problems")
    return EXIT_REJECTED if problems else EXIT_OK


PROFILES = Command(
    "profiles",
    help="list bundled profiles, or show a profile's effective values",
    epilog="examples:\n  conformance profiles list\n  conformance profiles show a100-training\n"
    "  conformance profiles show ./my-profile.yaml",
    action_dest="profiles_command",
    actions=(
        Command("list", help="bundled profile names and descriptions"),
        Command("show", help="effective values (after extends) as YAML", options=(opt("profile", metavar="NAME|FILE"),)),
    ),
)


def cmd_profiles(args: argparse.Namespace) -> int:
    import yaml

    from conformance.config.profile import bundled_names, load_profile

    if args.profiles_command == "list":
        for name in bundled_names():
            print(f"{name:<24} {load_profile(name).values.get('description', '')}")
        return EXIT_OK
    p = load_profile(args.profile)
    print(f"# profile {p.name} ({p.source}), with everything it extends applied")
    print(yaml.safe_dump(p.values, sort_keys=False, default_flow_style=False).rstrip())
    return EXIT_OK


def load_site_checks(paths: list[str], inventory_site: list[str] | None = None) -> list:
    """The declarative rules in `paths` (registered beside the built-in checks) and the Python site
    checks there (imported, so a bad file is a usage error naming it before anything runs)."""
    from conformance.checks import REGISTRY, builtin_ids
    from conformance.config.site_rules import load_rules, python_dirs

    suites_dir()
    rules = load_rules([*paths, *(inventory_site or [])], builtin_ids())
    for r in rules:
        REGISTRY[r.spec.id] = r.spec
    for where in python_dirs(paths):
        files = [Path(where)] if where.endswith(".py") else sorted(Path(where).glob("test_*.py"))
        for f in files:
            spec = importlib.util.spec_from_file_location(f.stem, f)
            if spec is None or spec.loader is None:
                raise UsageError(f"{f}: cannot be imported as a Python site check")
            module = importlib.util.module_from_spec(spec)
            sys.modules[f.stem] = module
            try:
                spec.loader.exec_module(module)
            except ValueError as e:
                raise UsageError(str(e)) from None
            except Exception as e:
                raise UsageError(f"{f}: importing this site check failed: {type(e).__name__}: {e}") from None
            finally:
                sys.modules.pop(f.stem, None)
    return rules


CHECKS = Command(
    "checks",
    help="list every check (id, severity, family, title)",
    epilog="examples:\n  conformance checks\n  conformance checks --json | jq -r '.[].id'\n"
    "  conformance checks --checks examples/site-checks   # with the site's own, and where each comes from\n"
    "  conformance checks --markdown > docs/checks.md",
    options=(
        opt("--json", action="store_true", help="print JSON with rationale and remediation"),
        opt("--markdown", action="store_true", help="print the check reference page (docs/checks.md)"),
        CHECKS_OPTION,
    ),
)


def cmd_checks(args: argparse.Namespace) -> int:
    load_site_checks(args.checks)
    from conformance.checks import REGISTRY

    specs = sorted(REGISTRY.values(), key=lambda s: (s.origin != "built-in", s.family, s.id))
    if args.json:
        print(json.dumps([s.to_json() for s in specs], indent=2))
        return EXIT_OK
    if args.markdown:
        from conformance.outputs.check_reference import check_reference

        sys.stdout.write(check_reference(specs))
        return EXIT_OK
    width = max(len(s.id) for s in specs)
    for s in specs:
        origin = "" if s.origin == "built-in" else f"  [{s.origin}]"
        print(f"{s.id:<{width}}  {s.severity:<8}  {s.family:<16}  {s.title}{origin}")
    return EXIT_OK


def _inventory(args: argparse.Namespace):
    from conformance.config.inventory import load_inventory, local_inventory

    return load_inventory(args.inventory) if args.inventory else local_inventory(args.host_root)


COLLECT = Command(
    "collect",
    help="save each node's raw facts (a snapshot) without judging",
    epilog="example:\n  conformance collect --inventory nodes.yaml --output snapshots/2026-12-02",
    options=(*COLLECTION_OPTIONS, opt("--output", metavar="DIR", required=True, help="folder for <node>.json snapshots")),
)


def cmd_collect(args: argparse.Namespace) -> int:
    from conformance.collection.collect import collect_all, stderr_progress
    from conformance.run.fleet import Fleet
    from conformance.run.site_checks import SiteChecks
    from conformance.run.starts import write_snapshots

    inv = _inventory(args)
    site = SiteChecks(Fleet(inv), args.timeout)
    site.load(args.checks)  # the snapshot then holds what the site rules read
    progress = stderr_progress(args.verbose > 0)
    bundles = collect_all(inv.nodes, args.parallel, args.timeout, progress, args.retries, site.needs())
    files = write_snapshots(bundles, args.output, {n.name: dict(n.labels) for n in inv.nodes})
    bad = 0
    for b, f in zip(bundles.values(), files, strict=True):
        if b.error:
            bad += 1
            print(f"{b.node}: unreachable ({b.error_kind}): {b.error}")
        else:
            print(f"{b.node}: {len(b.records)} records in {b.duration_s:.2f} s -> {f}")
    return EXIT_REJECTED if bad else EXIT_OK


# The options `report` and `merge` share: where the reports go and how they are rendered.
RERENDER_OPTIONS = (
    opt("--output", metavar="DIR", help="output folder (default: a new timestamped folder under reports/)"),
    opt("--baseline", metavar="RESULTS_JSON", help="a previous results.json to compare with"),
    opt("--pushgateway", metavar="URL", help="also push the Prometheus metrics to this Pushgateway"),
    opt("--group-by", metavar="LABEL", help=GROUP_BY_HELP),
    opt("--select", action="append", default=[], metavar="PATTERN", help=SELECT_HELP),
    opt(
        "--items",
        choices=("auto", "result", "node"),
        default="auto",
        help="pytest items of the re-render: one per result, one per node (faster at fleet scale; the same outputs), "
        "or auto (per node above 20,000 results or 300 nodes: streamed, in memory that does not grow with the fleet)",
    ),
    opt("-v", "--verbose", action="count", default=0),
)


def _pytest_args(out: Path, verbose: int) -> list[str]:
    return [
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",  # test-only plugins cost start-up time and add nothing to an audit
        "-p",
        "no:testinfra",
        f"--results-json={out / 'results.json'}",
        f"--junit={out / 'junit.xml'}",
        f"--prometheus={out / 'results.prom'}",
        f"--html={out / 'report.html'}",
        "--self-contained-html",
        *(["-v"] * verbose if verbose else QUIET),
    ]


# Quiet by default. pytest's warnings are not shown then, so neither are the plugins that only turn
# exceptions in threads and in finalizers into warnings: per check they cost about a tenth of a run's
# CPU (measured on 5,200 checks), and Python still prints such an exception on stderr.
QUIET = [
    "-qq",
    "-o",
    "console_output_style=classic",
    "--no-header",
    "-rN",
    "--tb=no",
    "-p",
    "no:warnings",
    "-p",
    "no:unraisableexception",
    "-p",
    "no:threadexception",
]


RUN = Command(
    "run",
    help="audit nodes and write report.html, junit.xml, results.json",
    description="Collect each node's facts (one remote execution per node), run the checks and write the reports.",
    epilog=textwrap.dedent("""\
        examples:
          conformance run                                   # this machine, local transport
          conformance run --inventory nodes.yaml --profile default --output reports/acceptance
          conformance run --snapshot snapshots/ --output reports/replay
          conformance run --inventory new-nodes.yaml --measure    # node acceptance: also H2D bandwidth
          conformance run --inventory nodes.yaml -- -k KUBELET   # extra pytest arguments after --
          conformance run --inventory nodes.yaml --checks examples/site-checks   # with the site's own checks"""),
    options=(
        *COLLECTION_OPTIONS,
        opt("--profile", metavar="NAME|FILE", help="profile for every node (default: per inventory, else 'default')"),
        opt("--output", metavar="DIR", help="output folder (default: a new timestamped folder under reports/)"),
        opt("--waivers", metavar="FILE", help="waivers YAML (see inventory/waivers.example.yaml)"),
        opt("--baseline", metavar="RESULTS_JSON", help="a previous results.json to compare with"),
        opt("--pushgateway", metavar="URL", help="also push the Prometheus metrics to this Pushgateway"),
        opt("--group-by", metavar="LABEL", help=GROUP_BY_HELP),
        opt("--select", action="append", default=[], metavar="PATTERN", help=SELECT_HELP),
        opt("--snapshot", metavar="DIR", help="evaluate snapshots saved by 'conformance collect' (offline)"),
        opt(
            "--items",
            choices=("auto", "check", "node"),
            default="auto",
            help="pytest items: one per check, one per node judging all its checks (the same results and reports, "
            "less of pytest's cost per check), or auto (per node from 10 nodes on)",
        ),
        opt(
            "--measure",
            action="store_true",
            help="measure pinned H2D bandwidth per GPU and NUMA node (opens a CUDA context on each idle GPU, "
            "about 10 s per GPU; busy or MIG GPUs are skipped)",
        ),
        opt(
            "--gate",
            choices=("dry-run", "apply"),
            default=None,
            help="after the run, gate the nodes by their verdicts through the inventory's kubernetes: access (as "
            "'conformance gate' does): print the patches (dry-run) or write them (apply)",
        ),
        opt(
            "--acceptance-pod",
            action="store_true",
            help="node acceptance: create a short-lived Guaranteed GPU pod on each node (Kubernetes API), run the pod "
            "checks on it, delete it",
        ),
        opt(
            "--print-results",
            action="store_true",
            help="also print results.json to standard output between markers (in-cluster mode: the pod log carries it)",
        ),
        opt("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra arguments for pytest"),
    ),
)


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    out = Path(args.output) if args.output else _default_output()
    out.mkdir(parents=True, exist_ok=True)
    pargs = [
        str(suites_dir()),
        "--rootdir",
        str(suites_dir().parent),
        *_pytest_args(out, args.verbose),
        f"--parallel={args.parallel}",
        f"--collect-timeout={args.timeout}",
        f"--retries={args.retries}",
        f"--check-items={args.items}",
    ]
    for flag, value in (
        ("inventory", args.inventory),
        ("profile", args.profile),
        ("snapshot", args.snapshot),
        ("host-root", args.host_root),
        ("waivers", args.waivers),
        ("baseline", args.baseline),
        ("group-by", args.group_by),
    ):
        if value:
            pargs.append(f"--{flag}={value}")
    from conformance.config.site_rules import python_dirs

    load_site_checks(args.checks)  # a malformed site check is a usage error before pytest starts
    if args.select:
        from conformance.checks import unmatched

        load_registry()
        if bad := unmatched(args.select):
            raise UsageError(f"--select {', '.join(bad)}: matches no check id or family (see `conformance checks`)")
        pargs += [f"--select={s}" for s in args.select]
    pargs += [f"--checks={c}" for c in args.checks]
    pargs += python_dirs(args.checks)
    if args.measure:
        pargs.append("--measure")
    if args.acceptance_pod:
        pargs.append("--acceptance-pod")
    pargs += args.pytest_args
    with _terminate_as_interrupt():  # a cancelled CI job or a stopped pod still gets its reports, marked incomplete
        status = int(pytest.main(pargs))
    rc = _finish(status, out, args.pushgateway, args.verbose)
    if args.gate and rc in (EXIT_OK, EXIT_REJECTED) and (out / "results.json").is_file():
        if not args.inventory:
            raise UsageError("--gate needs an inventory with a kubernetes: section (the API the gate patches nodes through)")
        gate_args = argparse.Namespace(
            results=str(out / "results.json"), apply=args.gate == "apply", inventory=args.inventory, kubeconfig=None,
            context=None, in_cluster=False, taint=None, taint_effect="NoSchedule", max_age=24.0,
        )  # fmt: skip
        print()
        gated = cmd_gate(gate_args)
        rc = max(rc, gated)
    if args.print_results and (out / "results.json").is_file():
        from conformance.cluster.manifests import RESULTS_BEGIN, RESULTS_END

        # one line of JSON between markers: `conformance merge` finds it in the pod's log
        doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
        print(f"{RESULTS_BEGIN}\n{json.dumps(doc, separators=(',', ':'))}\n{RESULTS_END}", flush=True)
    return rc


MANIFESTS = Command(
    "manifests",
    help="print the Kubernetes objects that run the audit on the nodes themselves (in-cluster mode)",
    description="Namespace, ServiceAccount and one Job per node (pinned by nodeName), or a DaemonSet. Each pod "
    "audits its own node with the host's root mounted read-only at /host (hostPID, hostNetwork) and prints its "
    "results.json to its log; collect the logs and run 'conformance merge'.",
    epilog=textwrap.dedent("""\
        examples:
          conformance manifests --node gpu-a1 --node gpu-a2 --image registry.example/gnc:0.1.0 | kubectl apply -f -
          conformance manifests --nodes-from-inventory nodes.yaml --image registry.example/gnc:0.1.0 -o jobs.yaml
          conformance manifests --daemonset --image registry.example/gnc:0.1.0"""),
    options=(
        opt("--node", action="append", default=[], metavar="NAME", help="a node to audit (repeat)"),
        opt("--nodes-from-inventory", metavar="FILE", help="audit every node named in this inventory"),
        opt("--daemonset", action="store_true", help="one DaemonSet on GPU nodes instead of one Job per node"),
        opt("--namespace", default="gpu-node-conformance", metavar="NS"),
        opt("--image", default=None, metavar="IMAGE", help="the suite's image (build it from the Containerfile)"),
        opt("--profile", metavar="NAME", help="bundled profile for every node"),
        opt("--runtime-class", metavar="NAME", help="runtimeClassName for the pods (e.g. nvidia)"),
        opt("-o", "--output", metavar="FILE", help="write to FILE instead of standard output"),
    ),
)


def cmd_manifests(args: argparse.Namespace) -> int:
    from conformance.cluster.manifests import DEFAULT_IMAGE, build, to_yaml

    nodes = list(args.node)
    if args.nodes_from_inventory:
        from conformance.config.inventory import load_inventory

        nodes += [n.name for n in load_inventory(args.nodes_from_inventory).nodes]
    if not nodes and not args.daemonset:
        raise UsageError("name the nodes to audit (--node, --nodes-from-inventory) or use --daemonset")
    objects = build(
        nodes,
        daemonset=args.daemonset,
        namespace=args.namespace,
        image=args.image or DEFAULT_IMAGE,
        profile=args.profile,
        runtime_class=args.runtime_class,
    )
    text = to_yaml(objects)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {len(objects)} objects to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if not args.image:
        print(f"note: image {DEFAULT_IMAGE} is a local name; build the Containerfile and pass --image", file=sys.stderr)
    return EXIT_OK


MERGE = Command(
    "merge",
    help="combine per-node results (results.json files, folders, pod logs) into one report set",
    description="Reads results.json files, folders of them, and pod logs holding framed results (in-cluster "
    "mode). Reruns of a node are deduplicated (the latest run wins); nodes named with --expect that sent "
    "nothing are marked incomplete.",
    epilog=textwrap.dedent("""\
        examples:
          kubectl -n gpu-node-conformance logs -l app.kubernetes.io/name=gpu-node-conformance --tail=-1 \\
              --prefix=false > logs/all.log
          conformance merge logs/ --expect @nodes.txt --output reports/fleet
          conformance merge runs/monday/ runs/rerun-gpu-a7/results.json --output reports/merged"""),
    options=(
        opt("sources", nargs="+", metavar="FILE|DIR"),
        opt("--expect", action="append", default=[], metavar="NODES", help="node names, comma lists or @FILE"),
        *RERENDER_OPTIONS,
    ),
)


def cmd_merge(args: argparse.Namespace) -> int:
    from conformance.outputs.merge import expected_from

    expected = expected_from(args.expect)  # read here for a clear usage error; the session reads them again
    for src in args.sources:
        if not Path(src).exists():
            raise UsageError(f"{src}: no such file or folder")
    expecting = f", expecting {len(expected)} nodes" if expected else ""
    print(f"merging the results documents in {', '.join(args.sources)}{expecting}", flush=True)
    args.results = list(args.sources)
    return _render(args, args.expect)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job cancelled, a pod stopped) unwinds like Ctrl-C, so that `with` blocks clean up."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        before = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave the signal as it is
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


REPORT = Command(
    "report",
    help="re-render reports from results.json files (several files merge, the latest run per node wins)",
    epilog="examples:\n  conformance report reports/20261202T101500Z/results.json --output reports/rerendered\n"
    "  conformance report node-a/results.json node-b/results.json --output reports/merged",
    options=(opt("results", nargs="+", metavar="RESULTS_JSON"), *RERENDER_OPTIONS),
)


def cmd_report(args: argparse.Namespace) -> int:
    from conformance.outputs.documents import parts_of_file

    for f in args.results:
        if Path(f).is_dir():
            raise UsageError(f"{f}: a folder; name the results.json in it, or merge the folder with 'conformance merge'")
        next(parts_of_file(Path(f)))  # a clear usage error before pytest starts (its head only: it may hold 50,000 nodes)
    return _render(args)


def _render(args: argparse.Namespace, expected: list[str] | None = None) -> int:
    """The report session over checked results documents (`args.results`)."""
    import pytest

    out = Path(args.output) if args.output else _default_output()
    out.mkdir(parents=True, exist_ok=True)
    pargs = ["--rootdir", str(out), "-c", "/dev/null", *_pytest_args(out, args.verbose)]
    pargs += [f"--replay={f}" for f in args.results]
    pargs += [f"--replay-expect={v}" for v in expected or []]  # as given: @FILE stays one argument
    pargs.append(f"--replay-items={args.items}")
    if args.baseline:
        pargs.append(f"--baseline={args.baseline}")
    if args.group_by:
        pargs.append(f"--group-by={args.group_by}")
    pargs += [f"--select={s}" for s in args.select]
    # the report session reads the sources itself, node by node (conformance.run.node_spool): what it keeps of
    # them lies in unlinked temporary files, gone with the process however it ends (an error, Ctrl-C, SIGTERM)
    with _terminate_as_interrupt():
        status = int(pytest.main(pargs))
    return _finish(status, out, args.pushgateway, args.verbose)


# Above this many nodes the terminal gets the verdict counts and the nodes not accepted (at most
# LISTED_MAX of them) instead of a line per node; -v lists every node; the report has them all.
SUMMARY_NODES = 50
LISTED_MAX = 100


ROLLUP_SHOWN = 10


def rollup(not_accepted: list[dict[str, Any]], total: int) -> list[str]:
    """Many nodes failing alike, one line per cause: the checks that block most of the nodes where they were
    judged, and the nodes not reached, each once, under its cause without its own name or address (of the nodes
    the summary holds: all, or a merge's first ones)."""
    from conformance.config.verdict import cause, not_reached

    checks = Counter(c for n in not_accepted if not not_reached(n) for c in n.get("blocking") or [])
    reasons = Counter(cause(n) for n in not_accepted if not_reached(n))
    narrowed = sum(1 for n in not_accepted if n["verdict"] == "incomplete" and not not_reached(n))
    of = "" if len(not_accepted) == total else f" (of the first {len(not_accepted)} nodes not accepted)"
    lines = [f"blocking checks by nodes affected{of}:"] if checks else []
    lines += [f"  {check:<34} {k} node(s)" for check, k in checks.most_common(ROLLUP_SHOWN)]
    if len(checks) > ROLLUP_SHOWN:
        lines.append(f"  and {len(checks) - ROLLUP_SHOWN} more check(s): report.html ranks them all")
    if reasons:
        lines.append(f"not reached, by cause{of}:")
        lines += [f"  {k:>6} node(s): {why}" for why, k in reasons.most_common(ROLLUP_SHOWN)]
        if len(reasons) > ROLLUP_SHOWN:
            lines.append(f"  and {len(reasons) - ROLLUP_SHOWN} more cause(s): results.json names each node's")
    if narrowed:
        lines.append(f"  {narrowed:>6} node(s) reached but not judged on every check that blocks")
    return lines


def _finish(rc: int, out: Path, pushgateway: str | None, verbose: int = 0) -> int:
    """Print the verdicts, the diff and where the reports are; map to the exit codes."""
    import pytest

    results = out / "results.json"
    if rc == pytest.ExitCode.USAGE_ERROR:
        return EXIT_USAGE
    if not results.is_file():
        print(f"error: pytest ended with exit code {rc} and wrote no results", file=sys.stderr)
        return EXIT_INTERRUPTED if rc == pytest.ExitCode.INTERRUPTED else EXIT_USAGE
    from conformance.config.verdict import attention_key, verdict_counts, why_not_accepted
    from conformance.plugin import written_summary

    doc = written_summary(results) or _read_summary(results)
    print()
    listed = doc["nodes"]
    counts: dict[str, int] = doc.get("verdicts") or dict(Counter(n["verdict"] for n in listed))
    total = doc.get("node_count", len(listed))
    if verbose and len(listed) < total:  # a streamed merge keeps only its first nodes; -v lists every node
        listed = list(_nodes_of(results))
    if total > SUMMARY_NODES and not verbose:
        print(f"{total} nodes: {verdict_counts(counts)}")
        not_accepted = sum(v for k, v in counts.items() if k != "accepted")
        listed = sorted((n for n in listed if n["verdict"] != "accepted"), key=attention_key)
        for line in rollup(listed, not_accepted):
            print(line)
        if not_accepted > LISTED_MAX:
            print(f"the first {LISTED_MAX} of {not_accepted} nodes not accepted (report.html counts all, results.json lists "
                  "all; -v lists every node):")  # fmt: skip
            listed = listed[:LISTED_MAX]
    for n in sorted(listed, key=attention_key):
        c = n["counts"]
        badge = _coloured(n["verdict"], f"{n['verdict'].upper():<11}")
        line = (
            f"{n['name']:<24} {badge} {c['passed']} passed, {c['failed']} failed, "
            f"{c['error']} errors, {c['skipped']} skipped, {c['waived']} waived (profile {n['profile']})"
        )
        reason = why_not_accepted(n, 5).removeprefix("failed or errored: ")
        print(line + (f"  - {reason}" if n["verdict"] != "accepted" and reason else ""))
        for note in (n.get("collection") or {}).get("notes", []):
            print(f"{'':<24} note: {note}")
    if doc.get("waivers") and doc["waivers"]["unused"]:
        unused = ", ".join(f"#{w['index']} ({w['check']} on {w['nodes']})" for w in doc["waivers"]["unused"])
        print(f"waivers matching nothing: {unused}")
    if doc.get("diff"):
        print()
        print("\n".join(diff_lines(doc["diff"])))
    # one count, stated once: the nodes' verdicts and their results as results.json counts them (pytest's own
    # line is not printed: a live run's item holds a node's checks, so its numbers are not the results')
    shown = verdict_counts(counts)
    line = f"\n{total} node(s): {shown or 'none'}"
    if len(doc["nodes"]) == total:
        sums = Counter[str]()
        for n in doc["nodes"]:
            sums.update(n["counts"])
        words = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped", "waived": "waived"}
        line += "; results: " + ", ".join(f"{sums[k]} {w}" for k, w in words.items())
    print(line + ("" if doc.get("complete", True) else "; the run was interrupted: what was not collected is incomplete"))
    from conformance.outputs.markdown_summary import write_summary

    summary = write_summary(results, out)
    print(
        f"\nreport:     {_shown_path(out / 'report.html')}\nresults:    {_shown_path(results)}"
        f"\njunit:      {_shown_path(out / 'junit.xml')}\nprometheus: {_shown_path(out / 'results.prom')}"
        f"\nsummary:    {_shown_path(summary)} (Markdown: a CI job summary)"
    )
    if pushgateway:
        try:
            push_to_gateway(pushgateway, (out / "results.prom").read_text(encoding="utf-8"))
            print(f"pushed to {pushgateway}")
        except OSError as e:
            print(f"error: {e}", file=sys.stderr)
    if rc == pytest.ExitCode.INTERRUPTED or not doc.get("complete", True):
        return EXIT_INTERRUPTED
    if not total or any(v for k, v in counts.items() if k != "accepted"):
        return EXIT_REJECTED
    return EXIT_OK


_ANSI = {"accepted": "32", "rejected": "31;1", "unreachable": "33;1", "incomplete": "33"}


def _coloured(verdict: str, text: str) -> str:
    """The verdict in colour on a terminal (never in a pipe or a CI log file, nor with NO_COLOR set)."""
    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():
        return text
    return f"\033[{_ANSI.get(verdict, '0')}m{text}\033[0m"


def _shown_path(p: Path) -> str:
    """A path as the user would type it from where they stand: relative below the working folder, else absolute."""
    full = p.resolve()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def _read_summary(results: Path) -> dict[str, Any]:
    """The summary keys of a results.json written by another process, read part by part."""
    from conformance.outputs.documents import parts_of_file

    doc: dict[str, Any] = {"nodes": []}
    for kind, value in parts_of_file(results):
        if kind == "meta":
            doc.update(value)
        elif kind == "node":
            doc["nodes"].append(value)
        else:
            break  # the summary keys come before the results
    return doc


def _nodes_of(results: Path) -> Iterator[dict[str, Any]]:
    from conformance.outputs.documents import parts_of_file

    for kind, value in parts_of_file(results):
        if kind == "result":
            return
        if kind == "node":
            yield value


# The commands in the order `conformance --help` lists them; each one's table sits with its function above.
COMMANDS = (RUN, COLLECT, REPORT, DIFF, WAIVERS, PROFILES, MANIFESTS, MERGE, GATE, CHECKS)


def main(argv: list[str] | None = None) -> int:
    rc = _main(argv)
    if argv is None:
        # The command is over and its objects die with the process: spare the interpreter its last full
        # garbage collection over them (a second of a 100-node run's 4 s of CPU). Outputs are closed by
        # now, and temporary files are removed by their atexit finalizers, which still run.
        gc.freeze()
    return rc


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        commands = {
            "run": cmd_run,
            "collect": cmd_collect,
            "checks": cmd_checks,
            "report": cmd_report,
            "profiles": cmd_profiles,
            "diff": cmd_diff,
            "waivers": cmd_waivers,
            "manifests": cmd_manifests,
            "merge": cmd_merge,
            "gate": cmd_gate,
        }
        return commands[args.command](args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
