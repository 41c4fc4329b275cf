"""`conformance diff`: what changed between two results documents."""

from __future__ import annotations

import argparse
import json

from conformance.commands.common import EXIT_OK, EXIT_REJECTED, Command, opt
from conformance.outputs import diff, diff_lines, load_results

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
