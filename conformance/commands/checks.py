"""`conformance checks`: every check (text, JSON, or the documentation's check reference)."""

from __future__ import annotations

import argparse
import json
import sys

from conformance.commands.common import CHECKS_OPTION, EXIT_OK, Command, load_site_checks, opt

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
