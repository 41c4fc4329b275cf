"""`conformance run`: audit the nodes (or snapshots) and write the reports."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from conformance.commands.common import (
    COLLECTION_OPTIONS,
    EXIT_OK,
    EXIT_REJECTED,
    GROUP_BY_HELP,
    SELECT_HELP,
    Command,
    default_output,
    load_registry,
    load_site_checks,
    opt,
    pytest_args,
    suites_dir,
    terminate_as_interrupt,
)
from conformance.commands.gate import cmd_gate
from conformance.commands.summary import finish
from conformance.errors import UsageError

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

    out = Path(args.output) if args.output else default_output()
    out.mkdir(parents=True, exist_ok=True)
    pargs = [
        str(suites_dir()),
        "--rootdir",
        str(suites_dir().parent),
        # no pytest configuration file of the places above the suites (a source checkout's pyproject.toml, the project
        # a virtual environment sits in) changes how an audit runs: only these arguments do
        "-c",
        "/dev/null",
        *pytest_args(out, args.verbose),
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
    with terminate_as_interrupt():  # a cancelled CI job or a stopped pod still gets its reports, marked incomplete
        status = int(pytest.main(pargs))
    rc = finish(status, out, args.pushgateway, args.verbose)
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
