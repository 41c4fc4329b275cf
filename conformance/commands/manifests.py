"""`conformance manifests`: the in-cluster Job, its RBAC and the acceptance pod's manifests."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from conformance.commands.common import EXIT_OK, Command, opt
from conformance.errors import UsageError

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
