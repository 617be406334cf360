"""Configuration of a route's ``policy:``: ordered CEL rules over the caller and the request, the
default decision, the gateway's own approval question, and tool definition pinning.

A rule that does not compile is a configuration error naming the rule's path (e.g.
``routes.0.policy.rules.2.when: ...``), so a bad rule stops the gateway at start and fails
``mcp-edge check-config``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from mcp_edge.policy.cel import VARIABLES, compile_rule

#: ``sha256:`` and 64 hex digits: the digest ``mcp-edge tools digests`` prints for a definition.
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicyRule(_Model):
    """One rule: when ``when`` is true for a request, ``action`` is the decision."""

    #: A label for logs and metrics (default ``rules[<index>]``). Never shown to callers.
    name: str | None = Field(None, max_length=64)
    #: A CEL expression over ``claims``, ``principal``, ``method``, ``name``, ``uri`` and
    #: ``arguments`` that yields a bool.
    when: str = Field(min_length=1, max_length=4096)
    action: Literal["allow", "deny", "approve"]
    #: Shown to the caller: with a denial (instead of the generic text), and in the approval
    #: question. Never the rule itself.
    message: str | None = Field(None, max_length=500)

    _program: Any = PrivateAttr(default=None)

    @field_validator("when")
    @classmethod
    def _compiles(cls, v: str) -> str:
        compile_rule(v)  # raises ValueError naming the problem
        return v

    @field_validator("name")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not all(c.isalnum() or c in "-_.:" for c in v):
            raise ValueError(
                "must be letters, digits, '-', '_', '.' or ':' (it becomes a metrics label)"
            )
        return v

    def model_post_init(self, __context: Any) -> None:
        self._program = compile_rule(self.when)

    @property
    def program(self) -> Any:
        return self._program


class ApprovalSettings(_Model):
    """The gateway's own approval question (rules with ``action: approve``)."""

    #: Each approval is accepted once: the approval round's state and every later round of the
    #: approved call are spent in the store (``store.type: redis`` across replicas; the memory
    #: store holds for one process only).
    single_use: bool = True
    #: Longest question: the whole call (target and arguments as JSON) and the rule's message
    #: must fit, or the call is ``too_long``. Never cut: a cut value hides what would run.
    max_message_chars: int = Field(4000, ge=1500, le=100_000)
    #: A call too long to show in full: ``refuse`` it (``-32602``, ``approval_too_long``;
    #: nothing runs, nobody is asked) or ask with a question marked as not showing it, with its
    #: length and the digest the approval is bound to (``digest``).
    too_long: Literal["refuse", "digest"] = "refuse"


class RoutePolicyConfig(_Model):
    """A route's ``policy:``. Without rules, ``default: allow`` and no pinning, nothing changes
    (and nothing is parsed) on the route."""

    #: The decision when no rule matches: ``allow`` (the back-compatible default) or ``deny``.
    default: Literal["allow", "deny"] = "allow"
    #: Requests whose method is not a 2026-07-28 request the policy knows (an extension's, a
    #: vendor's, a removed one such as ``initialize``): ``deny`` (``-32601``, HTTP 404) or ``allow``
    #: (forwarded undecided). Rules decide only the methods they know.
    unknown_methods: Literal["deny", "allow"] = "deny"
    #: Evaluated in order for ``tools/call``, ``prompts/get`` and ``resources/read``; the first
    #: rule whose ``when`` is true decides. List results show what the caller may use.
    rules: list[PolicyRule] = Field(default_factory=list, max_length=1000)
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings)
    #: Remember each tool's definition (name, description, schemas) from the first ``tools/list``
    #: seen; a changed definition is hidden (and its calls refused) until an operator accepts it.
    pin_tools: bool = False
    #: Digests an operator accepted, per tool (``mcp-edge tools digests`` prints them); a listed
    #: digest is always accepted, whatever the store remembers.
    accepted_tools: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("accepted_tools")
    @classmethod
    def _digests(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for tool, digests in v.items():
            for d in digests:
                if not DIGEST.fullmatch(d):
                    raise ValueError(f"{tool}: {d!r} is not a digest (sha256: and 64 hex digits)")
        return v

    @model_validator(mode="after")
    def _labels(self) -> RoutePolicyConfig:
        names = [r.name for r in self.rules if r.name]
        if len(set(names)) != len(names):
            raise ValueError("rule names must be unique within a route")
        if self.accepted_tools and not self.pin_tools:
            raise ValueError("accepted_tools: only meaningful with pin_tools: true")
        return self

    @property
    def enabled(self) -> bool:
        explicit = "unknown_methods" in self.model_fields_set and self.unknown_methods == "deny"
        return bool(self.rules) or self.default == "deny" or self.pin_tools or explicit

    @property
    def has_rules(self) -> bool:
        return bool(self.rules) or self.default == "deny"

    @property
    def asks_approval(self) -> bool:
        return any(r.action == "approve" for r in self.rules)

    def label(self, index: int) -> str:
        return self.rules[index].name or f"rules[{index}]"


__all__ = ["VARIABLES", "ApprovalSettings", "PolicyRule", "RoutePolicyConfig"]
