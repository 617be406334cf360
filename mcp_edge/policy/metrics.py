"""Prometheus metrics of the policy layer (registered once per app, on first use)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class PolicyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "mcp_edge_policy_decisions",
            "Calls decided by a route's policy, by method and outcome: allow, deny, approval_asked, "
            "approved, approval_declined, approval_cancelled, approval_refused, approval_needs_capability, "
            "approval_too_long (a call too long to show, refused), "
            "approval_restart, approved_round (a later round of an approved call), pinned_blocked",
            ["route", "method", "decision"],
            registry=registry,
        )
        self.denied = Counter(
            "mcp_edge_policy_denied",
            "Calls refused by policy, by the rule that refused them (its name or rules[i]; default; "
            "pinned: a changed tool definition not yet accepted; context: values rules cannot read)",
            ["route", "rule"],
            registry=registry,
        )
        self.rule_errors = Counter(
            "mcp_edge_policy_rule_errors",
            "Rule evaluations that failed (a missing claim, a type mismatch); such a rule fails closed",
            ["route", "rule"],
            registry=registry,
        )
        self.list_hidden = Counter(
            "mcp_edge_policy_list_hidden",
            "Entries removed from list results (not usable by the caller, or a changed tool definition)",
            ["route", "method", "why"],
            registry=registry,
        )
        self.pin_changes = Counter(
            "mcp_edge_tool_definition_changes",
            "tools/list answers in which a tool's definition differed from its pinned digest (hidden)",
            ["route"],
            registry=registry,
        )
        self.store_unavailable = Counter(
            "mcp_edge_policy_pin_store_unavailable",
            "Pin lookups the store could not answer (the replica's last known pins were used)",
            ["route"],
            registry=registry,
        )
