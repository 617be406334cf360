"""Which client capability each input request needs, checked against the request's own
``clientCapabilities`` (capabilities are declared per request and never inferred)."""

from __future__ import annotations

from typing import Any

Capabilities = dict[str, Any]


def required_for(method: str, params: dict[str, Any]) -> Capabilities:
    """The ClientCapabilities fragment an input request needs."""
    if method == "elicitation/create":
        mode = params.get("mode", "form")
        return {"elicitation": {"url": {}}} if mode == "url" else {"elicitation": {"form": {}}}
    if method == "sampling/createMessage":
        if params.get("tools") is not None or params.get("toolChoice") is not None:
            return {"sampling": {"tools": {}}}
        return {"sampling": {}}
    if method == "roots/list":
        return {"roots": {}}
    raise ValueError(f"not an input request method: {method}")


def covers(declared: Capabilities, required: Capabilities) -> bool:
    """Does what the client declared cover one requirement from :func:`required_for`?"""
    if "elicitation" in required:
        elicitation = declared.get("elicitation")
        if not isinstance(elicitation, dict):
            return False
        if "url" in required["elicitation"]:
            return isinstance(elicitation.get("url"), dict)
        # `elicitation: {}` predates modes and means form only.
        return isinstance(elicitation.get("form"), dict) or "url" not in elicitation
    if "sampling" in required:
        sampling = declared.get("sampling")
        if not isinstance(sampling, dict):
            return False
        return "tools" not in required["sampling"] or isinstance(sampling.get("tools"), dict)
    if "roots" in required:
        return isinstance(declared.get("roots"), dict)
    return False


def merge(into: Capabilities, extra: Capabilities) -> Capabilities:
    """Deep-merge two capability fragments (for ``data.requiredCapabilities``)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into
