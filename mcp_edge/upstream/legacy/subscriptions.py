"""``subscriptions/listen`` served from a 2025-era server: pure functions, no I/O.

A 2025 server pushes ``notifications/*/list_changed`` and ``notifications/resources/updated``
(for the URIs a session subscribed to with ``resources/subscribe``) on a session's standalone
stream. A 2026-07-28 client asks for them with one long ``subscriptions/listen`` request whose
answer is the stream. The bridge holds a legacy session with its standalone stream for exactly
as long as that request lasts (one replica, one request: nothing to share between replicas),
and turns what comes on it into the listen stream's notifications:

* the ``notifications/subscriptions/acknowledged`` first, naming what is honored: only what the
  client asked for *and* the server said it sends (``listChanged`` per list, ``subscribe`` for
  resource subscriptions, each URI only once the server accepted its ``resources/subscribe``);
* then each notification of an honored kind, tagged with the listen request's id;
* never one the client did not ask for.
"""

from __future__ import annotations

from typing import Any

from mcp_edge.upstream.legacy.wire import META_SERVER_INFO, Notification

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
RESOURCE_UPDATED = "notifications/resources/updated"
#: The filter's list flags: the server capability that says the list can change, and the
#: notification a 2025 server sends when it does.
LIST_FLAGS = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
#: Notifications a listen stream may carry (everything else a legacy server sends on its
#: standalone stream, such as log messages, stays out of it).
LISTEN_METHODS = frozenset({*(m for _, m in LIST_FLAGS.values()), RESOURCE_UPDATED})
#: At most this many resource URIs are subscribed for one listen stream (each costs the
#: upstream a request); further ones are left out of the acknowledgement.
MAX_URIS = 64
MAX_URI_CHARS = 2048

JSON = dict[str, Any]


def _capability(capabilities: JSON, name: str, flag: str) -> bool:
    section = capabilities.get(name)
    return isinstance(section, dict) and section.get(flag) is True


def offered(capabilities: JSON) -> bool:
    """Does the server say it sends anything a listen stream carries?"""
    return any(_capability(capabilities, cap, "listChanged") for cap, _ in LIST_FLAGS.values()) or (
        _capability(capabilities, "resources", "subscribe")
    )


def requested(params: JSON) -> JSON:
    """The client's filter (``params.notifications``), or an empty one."""
    wanted = params.get("notifications")
    return wanted if isinstance(wanted, dict) else {}


def honored(wanted: JSON, capabilities: JSON) -> tuple[JSON, list[str]]:
    """What of ``wanted`` this server can deliver: the list flags it sends, and the resource
    URIs to subscribe to (the acknowledgement names only those the server then accepted)."""
    flags = {
        flag: True
        for flag, (cap, _) in LIST_FLAGS.items()
        if wanted.get(flag) is True and _capability(capabilities, cap, "listChanged")
    }
    uris: list[str] = []
    raw = wanted.get("resourceSubscriptions")
    if isinstance(raw, list) and _capability(capabilities, "resources", "subscribe"):
        for uri in raw:
            if isinstance(uri, str) and 0 < len(uri) <= MAX_URI_CHARS and uri not in uris:
                uris.append(uri)
            if len(uris) == MAX_URIS:
                break
    return flags, uris


def acknowledgement(flags: JSON, uris: list[str], subscription_id: Any) -> JSON:
    notifications: JSON = dict(flags)
    if uris:
        notifications["resourceSubscriptions"] = list(uris)
    return {
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {"notifications": notifications, "_meta": {SUBSCRIPTION_ID: subscription_id}},
    }


def delivers(flags: JSON, uris: list[str]) -> bool:
    return bool(flags or uris)


def event(note: Notification, flags: JSON, uris: list[str], subscription_id: Any) -> JSON | None:
    """The listen-stream notification for what the server sent, or None when it is not one the
    client asked for (or not a listen notification at all)."""
    meta = {SUBSCRIPTION_ID: subscription_id}
    if note.method == RESOURCE_UPDATED:
        uri = note.params.get("uri")
        if not isinstance(uri, str) or uri not in uris:
            return None
        return {"jsonrpc": "2.0", "method": note.method, "params": {"uri": uri, "_meta": meta}}
    for flag, (_, method) in LIST_FLAGS.items():
        if note.method == method and flags.get(flag) is True:
            return {"jsonrpc": "2.0", "method": method, "params": {"_meta": meta}}
    return None


def closing(subscription_id: Any, server_info: JSON | None) -> JSON:
    """The result that ends a listen stream gracefully (nothing more will come on it)."""
    meta: JSON = {SUBSCRIPTION_ID: subscription_id}
    if server_info is not None:
        meta[META_SERVER_INFO] = server_info
    return {"resultType": "complete", "_meta": meta}
