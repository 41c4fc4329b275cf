"""The operator's declarative site checks (YAML rule files given with --checks, in the inventory or in
a profile): each rule is judged on the records the node's single collection brought back for it."""

from __future__ import annotations

from conformance.checks.site_judges import judge


def test_site_rule(node, site_rule, site_params, facts, evidence):
    facts.require_reachable()
    evidence.source = site_rule.spec.source
    problems, lines = judge(site_rule, facts.bundle, site_params)
    evidence.add(*lines)
    assert not problems, "; ".join(problems)
    evidence.add(f"verified: {site_rule.kind} rule from {site_rule.origin}")
