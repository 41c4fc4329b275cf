"""`conformance waivers`: check a waivers file."""

from __future__ import annotations

import argparse

from conformance.commands.common import CHECKS_OPTION, EXIT_OK, EXIT_REJECTED, Command, load_site_checks, opt

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
