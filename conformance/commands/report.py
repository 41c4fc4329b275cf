"""`conformance report`: re-render a results document (and the rendering merge shares)."""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.commands.common import RERENDER_OPTIONS, Command, default_output, opt, pytest_args, terminate_as_interrupt
from conformance.commands.summary import finish
from conformance.errors import UsageError

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
    return render(args)


def render(args: argparse.Namespace, expected: list[str] | None = None) -> int:
    """The report session over checked results documents (`args.results`)."""
    import pytest

    out = Path(args.output) if args.output else default_output()
    out.mkdir(parents=True, exist_ok=True)
    pargs = ["--rootdir", str(out), "-c", "/dev/null", *pytest_args(out, args.verbose)]
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
    with terminate_as_interrupt():
        status = int(pytest.main(pargs))
    return finish(status, out, args.pushgateway, args.verbose)


# Above this many nodes the terminal gets the verdict counts and the nodes not accepted (at most
# LISTED_MAX of them) instead of a line per node; -v lists every node; the report has them all.
