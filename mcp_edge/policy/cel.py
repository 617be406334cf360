"""Compiling a rule's CEL expression (once, when the configuration is read), and the variables a
rule sees (see :mod:`mcp_edge.policy.rules`).

The CEL package is the ``cel`` extra, imported by the first rule compiled: a route without rules
loads none of it.
"""

from __future__ import annotations

from typing import Any

from mcp_edge import extras

#: ``member`` and ``original``: which upstream serves the call, and its own name (or URI) for it
#: (on a route with ``members:``; a single-upstream route's one member is named after the route).
#: ``grant``: whether the caller holds its own grant for that member (``upstream_auth.oauth``).
VARIABLES = (
    "claims",
    "principal",
    "method",
    "name",
    "uri",
    "arguments",
    "member",
    "original",
    "grant",
)


def compile_rule(source: str) -> Any:
    """Compile one CEL expression; ValueError (naming the problem) if it does not compile, or
    :class:`mcp_edge.extras.MissingExtra` without the CEL package."""
    extras.require("cel", "a policy rule (a CEL expression)")
    import cel

    try:
        return cel.compile(source)
    except (ValueError, RuntimeError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # The parser quotes the expression back; keep the position and what it expected.
        raise ValueError(f"does not compile as CEL: {first}") from None
