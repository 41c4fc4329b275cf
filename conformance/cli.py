"""The `conformance` command: run, collect, checks.

Exit codes, the same for every command: 0 every node accepted (or the command succeeded),
1 a node rejected or unreachable, 2 interrupted, 4 usage, inventory or profile error."""

from __future__ import annotations

import argparse
import gc
import sys
import textwrap
from typing import Any

from conformance import __version__
from conformance.commands.checks import CHECKS, cmd_checks
from conformance.commands.collect import COLLECT, cmd_collect
from conformance.commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, Command, Formatter
from conformance.commands.diff import DIFF, cmd_diff
from conformance.commands.gate import GATE, cmd_gate
from conformance.commands.manifests import MANIFESTS, cmd_manifests
from conformance.commands.merge import MERGE, cmd_merge
from conformance.commands.profiles import PROFILES, cmd_profiles
from conformance.commands.report import REPORT, cmd_report
from conformance.commands.run import RUN, cmd_run
from conformance.commands.waivers import WAIVERS, cmd_waivers
from conformance.errors import UsageError

__all__ = ["EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REJECTED", "EXIT_USAGE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="conformance",
        formatter_class=Formatter,
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
    cp = sub.add_parser(c.name, formatter_class=Formatter, help=c.help, description=c.description, epilog=c.epilog)
    for o in c.options:
        cp.add_argument(*o.flags, **o.kw)
    if c.actions:
        actions = cp.add_subparsers(dest=c.action_dest, metavar="ACTION", required=True)
        for a in c.actions:
            _add_command(actions, a)


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
