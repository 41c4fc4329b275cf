"""What the commands share: option declarations, the exit codes, the site checks and inventory loaders, the
pytest arguments of a run, and Ctrl-C/SIGTERM handling."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.errors import UsageError

EXIT_OK, EXIT_REJECTED, EXIT_INTERRUPTED, EXIT_USAGE = 0, 1, 2, 4

GROUP_BY_HELP = "node label that groups nodes in the report's fleet view (default: a node-pool label)"
SELECT_HELP = (
    "judge only these checks: globs over check ids and family names, e.g. 'KUBELET-CPU-*', gpu_health, "
    "FLEET-CONSISTENT (repeat; `conformance checks` lists ids and families)"
)


def suites_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "suites"  # beside the conformance package
    if not (here / "__init__.py").is_file():
        raise UsageError(f"the check suites were not found at {here}; reinstall gpu-node-conformance")
    return here


def default_output() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("reports") / stamp


class Formatter(argparse.RawDescriptionHelpFormatter):
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


def load_registry() -> dict:
    from conformance.checks import load_builtin

    suites_dir()
    return load_builtin()


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


def inventory_of(args: argparse.Namespace):
    from conformance.config.inventory import load_inventory, local_inventory

    return load_inventory(args.inventory) if args.inventory else local_inventory(args.host_root)


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


def pytest_args(out: Path, verbose: int) -> list[str]:
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


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
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
