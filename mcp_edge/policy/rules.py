"""Policy rules: CEL expressions compiled once, evaluated in order against one request.

Sans-I/O: no ASGI, no clock, no store. What a rule sees (its CEL variables):

``claims``      the caller's verified claims (a JWT's payload; ``sub``/``scope`` in trusted-header
                mode; ``{}`` for anonymous callers)
``principal``   ``{"id", "subject", "scopes": [...]}``
``method``      ``tools/call``, ``prompts/get`` or ``resources/read``
``name``        the tool or prompt name (``""`` for resources)
``uri``         the resource URI (``""`` otherwise); for ``resources/templates/list`` entries, the
                URI template
``arguments``   the call's arguments (``{}`` when it has none); unknown while deciding what a list
                shows, see :meth:`RouteRules.visible`
``member``, ``original``  the member serving the call and its own name or URI for it
``grant``       whether the caller holds its own grant for that member (``upstream_auth.oauth``;
                ``false`` for members without it). Looked up (by the route's policy, before the
                rules run) only when a rule reads it; unknown when the grant store cannot tell,
                so a rule reading it then fails closed

Errors: a rule that fails while evaluating (a claim that is not there, a type mismatch) fails
closed: an ``allow`` rule does not match, a ``deny`` or ``approve`` rule does. Each such failure is
reported to ``on_error`` (counted and logged by the caller; never the values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_edge.auth.base import Principal
from mcp_edge.core.memo import BoundedMemo
from mcp_edge.policy.cel import VARIABLES, compile_rule
from mcp_edge.policy.config import RoutePolicyConfig

if TYPE_CHECKING:
    import cel

__all__ = [
    "ALLOW",
    "APPROVE",
    "CALL_METHODS",
    "DENY",
    "LIST_METHODS",
    "VARIABLES",
    "Decision",
    "RouteRules",
    "compile_rule",
]

#: The requests rules decide on (the three that address one tool, prompt or resource).
CALL_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})

#: List methods whose results are filtered, and for each: the result field, the call method an
#: entry stands for, and the entry field naming it.
LIST_METHODS: dict[str, tuple[str, str, str]] = {
    "tools/list": ("tools", "tools/call", "name"),
    "prompts/list": ("prompts", "prompts/get", "name"),
    "resources/list": ("resources", "resources/read", "uri"),
    "resources/templates/list": ("resourceTemplates", "resources/read", "uriTemplate"),
}

ALLOW, DENY, APPROVE = "allow", "deny", "approve"

#: Call contexts a route keeps for reuse (see :meth:`RouteRules.context`); all are dropped when
#: it is full.
MAX_CACHED_CONTEXTS = 1024


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # allow | deny | approve
    #: The deciding rule's index and label; None when the route's default decided.
    index: int | None
    label: str
    message: str | None = None


@dataclass(frozen=True, slots=True)
class _Rule:
    program: Any
    action: str
    label: str
    index: int
    message: str | None
    #: Reads ``arguments``: while deciding what a list shows, it is evaluated three-valued.
    uses_arguments: bool


def principal_view(principal: Principal | None) -> dict[str, Any]:
    if principal is None:
        return {"id": "", "subject": "", "scopes": []}
    return {"id": principal.id, "subject": principal.display, "scopes": sorted(principal.scopes)}


def plain(value: Any) -> Any:
    """A JSON-like copy CEL can take (read-only mappings and tuples become dicts and lists)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class RouteRules:
    """One route's compiled rules and default."""

    def __init__(
        self, config: RoutePolicyConfig, *, on_error: Callable[[str], None] | None = None
    ) -> None:
        self.default = config.default
        self.rules = [
            _Rule(
                rule.program,
                rule.action,
                config.label(i),
                i,
                rule.message,
                "arguments" in rule.program.variables(),
            )
            for i, rule in enumerate(config.rules)
        ]
        self._on_error = on_error or (lambda label: None)
        #: (call method, federated name or URI) -> (member, the member's own name or URI), or
        #: None when no member has it; set by the wiring (mcp_edge.server.stack).
        self.resolve: Callable[[str, str], tuple[str, str] | None] | None = None
        self._default = Decision(self.default, None, "default")
        #: The variables some rule reads: a call's context holds those and nothing else.
        used: set[str] = set()
        for rule in self.rules:
            used.update(rule.program.variables())
        self._reads = frozenset(v for v in VARIABLES if v in used)
        self._reads_claims = "claims" in used
        self._reads_principal = "principal" in used
        self._reads_arguments = "arguments" in used
        #: Some rule reads ``grant`` (the caller's grant for the member is looked up first).
        self.reads_grant = "grant" in used
        #: Contexts of calls without arguments (no rule reads them), by what they hold: building
        #: one (converting its values for CEL) costs more than evaluating all the rules, and a
        #: caller calls the same few tools again and again.
        self._contexts: BoundedMemo[tuple[Any, ...], tuple[cel.Context, Any]] = BoundedMemo(
            MAX_CACHED_CONTEXTS
        )
        #: CEL's context type: the CEL package is loaded by a route with rules only (a route
        #: without decides by its default, and filters lists by it, without CEL).
        self._cel_context: Any = None
        if self.rules:
            import cel

            self._cel_context = cel.Context

    # ------------------------------------------------------------------ calls

    def context(
        self,
        principal: Principal | None,
        method: str,
        name: str | None,
        uri: str | None,
        arguments: Any,
        grant: bool | None = False,
    ) -> cel.Context:
        """The context of one call: the variables the route's rules read (what is read by none
        cannot change a decision). Raises ValueError, TypeError, ... for values CEL cannot hold."""
        if self._reads_arguments:
            return self._cel_context(self._values(principal, method, name, uri, arguments, grant))
        claims = principal.claims if principal is not None and self._reads_claims else None
        key = (
            principal if self._reads_principal or self._reads_claims else None,
            id(claims),
            method,
            name,
            uri,
            grant,
        )
        cached = self._contexts.get(key)
        # The entry holds the claims it was built from, so no other object can have their id
        # while it lives; the identity check only makes that explicit.
        if cached is not None and cached[1] is claims:
            return cached[0]
        ctx = self._cel_context(self._values(principal, method, name, uri, None, grant))
        self._contexts.put(key, (ctx, claims))
        return ctx

    def _values(
        self,
        principal: Principal | None,
        method: str,
        name: str | None,
        uri: str | None,
        arguments: Any,
        grant: bool | None = False,
    ) -> dict[str, Any]:
        reads = self._reads
        values: dict[str, Any] = {}
        if "claims" in reads:
            values["claims"] = plain(principal.claims) if principal is not None else {}
        if "principal" in reads:
            values["principal"] = principal_view(principal)
        if "method" in reads:
            values["method"] = method
        if "name" in reads:
            values["name"] = name or ""
        if "uri" in reads:
            values["uri"] = uri or ""
        if "arguments" in reads:
            values["arguments"] = plain(arguments) if isinstance(arguments, Mapping) else {}
        if "member" in reads or "original" in reads:
            values["member"], values["original"] = self.member_of(method, name or uri or "")
        if "grant" in reads and grant is not None:  # None: unknown (the rule then fails)
            values["grant"] = grant
        return values

    def member_of(self, method: str, target: str) -> tuple[str, str]:
        """``member`` and ``original`` of a call's target ("" and the target itself when the
        route says nothing or no member has it)."""
        found = self.resolve(method, target) if self.resolve is not None else None
        return found if found is not None else ("", target)

    def decide(
        self,
        principal: Principal | None,
        method: str,
        name: str | None,
        uri: str | None,
        arguments: Any,
        grant: bool | None = False,
    ) -> Decision:
        """The decision for one call: the first matching rule's action, else the default."""
        if not self.rules:
            return self._default
        try:
            ctx = self.context(principal, method, name, uri, arguments, grant)
        except (ValueError, TypeError, OverflowError, RuntimeError):
            # Values CEL cannot hold (integers beyond 64 bits, say): nothing can be decided on
            # them, so no rule can allow the call.
            self._on_error("context")
            return Decision(DENY, None, "context")
        for rule in self.rules:
            try:
                result = rule.program.execute(ctx)
            except Exception:  # noqa: BLE001 - as in _matches, inlined: it runs for every rule
                result = None
            if result is True or (result is not False and self._failed(rule)):
                return Decision(rule.action, rule.index, rule.label, rule.message)
        return self._default

    def _matches(self, rule: _Rule, ctx: cel.Context) -> bool:
        try:
            result = rule.program.execute(ctx)
        except Exception:  # noqa: BLE001 - any evaluation failure of an operator's rule
            return self._failed(rule)
        if result is True:
            return True
        if result is False:
            return False
        return self._failed(rule)  # not a bool: a mistake in the rule

    def _failed(self, rule: _Rule) -> bool:
        """A rule that failed to evaluate (reported): whether it matches, failing closed."""
        self._on_error(rule.label)
        return rule.action != ALLOW

    # ------------------------------------------------------------------ lists

    def visible(
        self,
        principal: Principal | None,
        method: str,
        name: str | None,
        uri: str | None,
        ctx: cel.Context | None = None,
        grant: bool | None = False,
    ) -> bool:
        """Whether a list shows an entry: some call to it could be allowed (or approved).

        Decided without a call, so ``arguments`` is unknown: each rule is evaluated with it left
        out, three-valued. A rule true whatever the arguments decides as for a call; one false
        whatever the arguments is stepped over (``name == "a" && arguments.x == 1`` for ``b``:
        CEL's ``&&`` is false when either side is, an error or unknown on the other side
        notwithstanding); one that depends on the arguments (its result is an error) may match
        or not: an ``allow`` or ``approve`` one shows the entry, a ``deny`` one is stepped over.
        """
        if not self.rules:
            return self.default != DENY
        ctx = ctx or self.list_context(principal, method, name, uri, grant)
        for rule in self.rules:
            verdict = self._verdict(rule, ctx) if rule.uses_arguments else self._matches(rule, ctx)
            if verdict is None:  # depends on the arguments
                if rule.action != DENY:
                    return True
                continue
            if verdict:
                return rule.action != DENY
        return self.default != DENY

    def list_context(
        self,
        principal: Principal | None,
        method: str,
        name: str | None,
        uri: str | None,
        grant: bool | None = False,
    ) -> cel.Context:
        """The context of a call to one list entry, without ``arguments`` (unknown)."""
        member, original = self.member_of(method, name or uri or "")
        values: dict[str, Any] = {
            "claims": plain(principal.claims) if principal is not None else {},
            "principal": principal_view(principal),
            "method": method,
            "name": name or "",
            "uri": uri or "",
            "member": member,
            "original": original,
        }
        if grant is not None:
            values["grant"] = grant
        return self._cel_context(values)

    @staticmethod
    def _verdict(rule: _Rule, ctx: cel.Context) -> bool | None:
        """A rule that reads ``arguments``, evaluated without them: True or False when that
        holds whatever the arguments are, None when it depends on them. (An error is taken
        for "depends": a failure of its own, a missing claim say, is told apart on the call.)"""
        try:
            result = rule.program.execute(ctx)
        except Exception:  # noqa: BLE001 - unknown arguments, or another failure
            return None
        return result if isinstance(result, bool) else None

    def filter_result(
        self,
        principal: Principal | None,
        list_method: str,
        result: dict[str, Any],
        grants: Mapping[str, bool | None] | None = None,
    ) -> int:
        """Drop from a list result (in place) what the caller may not use; returns how many.
        ``grants``: member -> whether the caller holds its grant (None: unknown), when a rule
        reads ``grant``."""
        field, call_method, key = LIST_METHODS[list_method]
        entries = result.get(field)
        if not isinstance(entries, list) or (not self.rules and self.default != DENY):
            return 0
        if not self.rules:  # (default deny) nothing is shown
            if entries:
                result[field] = []
            return len(entries)
        base = None
        kept = []
        for entry in entries:
            target = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(target, str):
                continue  # malformed entry: nothing to decide on, nothing shown
            if base is None:
                base = {
                    "claims": plain(principal.claims) if principal is not None else {},
                    "principal": principal_view(principal),
                    "method": call_method,
                }
            is_name = key == "name"
            member, original = self.member_of(call_method, target)
            values = {
                **base,
                "name": target if is_name else "",
                "uri": "" if is_name else target,
                "member": member,
                "original": original,
            }
            if self.reads_grant:
                known = (grants or {}).get(member, False)
                if known is not None:
                    values["grant"] = known
            ctx = self._cel_context(values)
            if self.visible(principal, call_method, None, None, ctx):
                kept.append(entry)
        removed = len(entries) - len(kept)
        if removed:
            result[field] = kept
        return removed
