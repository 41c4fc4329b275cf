"""`conformance collect`: the nodes' raw facts as snapshots, without judging."""

from __future__ import annotations

import argparse

from conformance.commands.common import COLLECTION_OPTIONS, EXIT_OK, EXIT_REJECTED, Command, inventory_of, opt

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

    inv = inventory_of(args)
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
