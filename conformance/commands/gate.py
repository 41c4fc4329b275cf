"""`conformance gate`: the verdict a pipeline acts on, decided again from a results document's own rows."""

from __future__ import annotations

import argparse
import textwrap

from conformance.commands.common import EXIT_OK, EXIT_REJECTED, Command, opt
from conformance.errors import UsageError
from conformance.outputs import load_results

GATE = Command(
    "gate",
    help="turn a results document's verdicts into node labels, annotations and taints (dry run unless --apply)",
    description="Accepted nodes get the label gpu-conformance.io/accepted=<profile> and lose the startup taint; "
    "rejected, unreachable and incomplete nodes keep or get it. Every node gets the annotation "
    "gpu-conformance.io/verdict. Nothing else on a node is touched. Without --apply the patches are printed "
    "and nothing is written. Needs 'get' and 'patch' on nodes: the ClusterRole in deploy/gate-rbac.yaml.",
    epilog=textwrap.dedent("""\
        examples:
          conformance gate reports/today/results.json                  # print the patches, write nothing
          conformance gate reports/today/results.json --apply --context prod
          conformance gate merged/results.json --in-cluster --apply --taint example.com/unverified
        exit code 1 when a node was refused (stale or mismatched results, no permission)"""),
    options=(
        opt("results", metavar="RESULTS_JSON"),
        opt("--apply", action="store_true", help="write the patches (default: print them and write nothing)"),
        opt("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)"),
        opt("--context", metavar="NAME", help="kubeconfig context"),
        opt("--in-cluster", action="store_true", help="use the pod's ServiceAccount"),
        opt("--inventory", metavar="FILE", help="take the API access from this inventory's kubernetes: section"),
        opt("--taint", default=None, metavar="KEY", help="the startup taint's key (default gpu-conformance.io/unverified)"),
        opt(
            "--taint-effect",
            default="NoSchedule",
            choices=("NoSchedule", "NoExecute"),
            help="NoExecute also evicts running pods: only where that is wanted",
        ),
        opt("--max-age", type=float, default=24.0, metavar="HOURS", help="refuse acceptance to a node audited longer ago (24)"),
    ),
)


def cmd_gate(args: argparse.Namespace) -> int:
    from conformance.checks import required_of
    from conformance.cluster.api import api_client
    from conformance.cluster.gate import TAINT, DocumentRefused, GateSettings, gate
    from conformance.config.kubernetes import KubeSpec

    doc = load_results(args.results)
    if args.inventory:
        from conformance.config.inventory import load_inventory

        spec = load_inventory(args.inventory).kubernetes
        if spec is None:
            raise UsageError(f"{args.inventory}: no kubernetes: section to reach the API with")
    else:
        spec = KubeSpec(kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster)
    settings = GateSettings(taint=args.taint or TAINT, effect=args.taint_effect, max_age_s=args.max_age * 3600)
    try:
        plans = gate(api_client(spec), doc, settings, args.apply, required_of)
    except DocumentRefused as e:
        print(str(e))
        return EXIT_REJECTED
    for plan in plans:
        head = f"{plan.node:<24} {plan.verdict:<11}"
        if plan.not_judged:
            shown = ", ".join(plan.not_judged[:8]) + (f" and {len(plan.not_judged) - 8} more" if len(plan.not_judged) > 8 else "")
            print(f"{head} not judged, so not accepted: {shown}")
        if plan.patch_failed:
            print(f"{head} refused: {plan.refused}")
            continue
        if plan.refused:
            print(f"{head} acceptance refused: {plan.refused}")
        if plan.patch is None:
            print(f"{head} unchanged ({plan.note})")
        else:
            print(f"{head} {'patched:' if plan.applied else 'would run:'} {plan.kubectl()}")
    if not args.apply:
        print("dry run: nothing written (--apply writes these patches)")
    return EXIT_REJECTED if any(p.refused for p in plans) else EXIT_OK
