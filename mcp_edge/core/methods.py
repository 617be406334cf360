"""MCP method names, matched exactly.

The edge decides on method names (the MRTR rules, policy, rate limits, the cache) by exact
comparison. An upstream that matched them loosely (case-insensitively, trimming blanks) would run
``Tools/Call`` as ``tools/call`` after the edge had waved it through as some unknown method. So a
name that is not a known method but reads as one once case, blanks and compatibility forms are
folded away is refused, as is any name holding blanks or control characters: no MCP method has
them. Other unknown names pass (the upstream answers ``-32601``, or a route's policy refuses them).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from mcp_edge.core.errors import INVALID_REQUEST, METHOD_NOT_FOUND, RpcError

#: 2026-07-28 requests a client sends over HTTP: the core protocol and the tasks extension.
MODERN_REQUESTS = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)

#: Every method name of every revision (2024-11-05 to 2026-07-28, and the tasks extensions), in
#: either direction, requests and notifications.
KNOWN = MODERN_REQUESTS | frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/list",
        "tasks/result",
        "elicitation/create",
        "sampling/createMessage",
        "roots/list",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/roots/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/subscriptions/acknowledged",
        "notifications/elicitation/complete",
        "notifications/tasks",
        "notifications/tasks/status",
    }
)

NOTIFICATION_PREFIX = "notifications/"


def _fold(name: str) -> str:
    """The name as a loose matcher might read it: compatibility forms (full-width letters and
    solidus), case, and blanks, control and format characters removed."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return "".join(
        ch for ch in folded if not ch.isspace() and unicodedata.category(ch)[0] not in "CZ"
    )


_FOLDED: dict[str, str] = {_fold(name): name for name in KNOWN}


def misspelt(method: str) -> str | None:
    """Why a method name is refused, or None when it may pass (a known name, or an unknown one
    spelt plainly)."""
    if method in KNOWN:
        return None
    if any(ch.isspace() or unicodedata.category(ch)[0] in "CZ" for ch in method):
        return "blanks or control characters in the name"
    known = _FOLDED.get(_fold(method))
    if known is not None:
        return f"method names are case-sensitive: the method is '{known}'"
    return None


def spelling_error(method: str, why: str, *, status: int = 404) -> RpcError:
    """``-32601`` (HTTP 404 on the 2026-07-28 wire, as for any method a server does not have)."""
    return RpcError(
        METHOD_NOT_FOUND, f"Method not found ({why})", {"reason": "method_spelling"}, status=status
    )


def check_spelling(method: str, *, status: int = 404) -> None:
    why = misspelt(method)
    if why is not None:
        raise spelling_error(method, why, status=status)


def id_less_request(method: str) -> bool:
    """A message without an id whose method is not a notification's: never valid MCP (a request
    needs an id to be answered), and never forwarded as a notification."""
    return not method.startswith(NOTIFICATION_PREFIX)


def notification_refused() -> RpcError:
    """A 2026-07-28 POST without an id: this revision defines no client-to-server notifications
    over Streamable HTTP (``notifications/cancelled`` is stdio-only; closing the stream cancels)."""
    return RpcError(
        INVALID_REQUEST,
        "Invalid Request: MCP 2026-07-28 has no client notifications over HTTP; a request needs an id",
        {"reason": "notification"},
        status=400,
    )


def legacy_refusal(doc: Any) -> RpcError | None:
    """What a 2025-era body (a message or a batch) is refused for, or None: a message without an
    id whose method is a request's (an upstream might run it as one, past the limits that count
    requests), or a method name spelt loosely (see :func:`misspelt`). HTTP 400: in this era 404
    means an unknown session."""
    for message in doc if isinstance(doc, list) else [doc]:
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        if not isinstance(method, str):
            continue  # a response to the server's request
        why = misspelt(method)
        if why is not None:
            return spelling_error(method, why, status=400)
        if "id" not in message and id_less_request(method):
            return RpcError(
                INVALID_REQUEST,
                f"Invalid Request: {method} needs an id (only notifications/* go without)",
                {"reason": "request_without_id"},
                status=400,
            )
    return None
