"""`conformance merge`: one report of many runs' results documents."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from conformance.commands.common import RERENDER_OPTIONS, Command, opt
from conformance.commands.report import render
from conformance.errors import UsageError

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
    return render(args, args.expect)
