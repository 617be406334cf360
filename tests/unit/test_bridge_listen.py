"""subscriptions/listen from a 2025-era server: what is honored, what is delivered, and how."""

from __future__ import annotations

from mcp_edge.upstream.legacy import subscriptions as subs
from mcp_edge.upstream.legacy.wire import Notification

EVERYTHING = {  # the npm server-everything's capabilities
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
}
FASTMCP_1 = {  # mcp 1.x FastMCP: nothing it can push
    "prompts": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
    "tools": {"listChanged": False},
}


def test_offered_only_what_the_server_says_it_sends():
    assert subs.offered(EVERYTHING)
    assert not subs.offered(FASTMCP_1) and not subs.offered({})
    assert subs.offered({"resources": {"subscribe": True}})


def test_honored_is_what_was_asked_and_can_come():
    wanted = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourcesListChanged": "yes",
        "resourceSubscriptions": ["a://1", "a://1", 5, "", "a://2"],
    }
    flags, uris = subs.honored(wanted, EVERYTHING)
    assert flags == {"toolsListChanged": True} and uris == ["a://1", "a://2"]
    flags, uris = subs.honored(wanted, {"tools": {"listChanged": True}})
    assert flags == {"toolsListChanged": True} and uris == []  # no subscribe: no URIs
    many = {"resourceSubscriptions": [f"a://{i}" for i in range(500)]}
    assert len(subs.honored(many, EVERYTHING)[1]) == subs.MAX_URIS
    assert subs.requested({"notifications": "x"}) == {}


def test_acknowledgement_names_the_honored_subset_and_the_subscription():
    ack = subs.acknowledgement({"toolsListChanged": True}, ["a://1"], 42)
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["a://1"]},
            "_meta": {"io.modelcontextprotocol/subscriptionId": 42},
        },
    }


def test_only_what_the_client_asked_for_is_delivered_tagged():
    flags, uris = {"promptsListChanged": True}, ["a://1"]
    tools = Notification("notifications/tools/list_changed", {})
    prompts = Notification("notifications/prompts/list_changed", {"_meta": {"x": 1}})
    updated = Notification("notifications/resources/updated", {"uri": "a://1", "title": "t"})
    other = Notification("notifications/resources/updated", {"uri": "a://2"})
    log = Notification("notifications/message", {"level": "info", "data": "hi"})
    assert subs.event(tools, flags, uris, "s") is None  # filtered out
    assert subs.event(other, flags, uris, "s") is None and subs.event(log, flags, uris, "s") is None
    assert subs.event(prompts, flags, uris, "s") == {
        "jsonrpc": "2.0",
        "method": "notifications/prompts/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "s"}},
    }
    assert subs.event(updated, flags, uris, "s")["params"] == {
        "uri": "a://1",
        "_meta": {"io.modelcontextprotocol/subscriptionId": "s"},
    }
    assert subs.closing("s", {"name": "n", "version": "1"}) == {
        "resultType": "complete",
        "_meta": {
            "io.modelcontextprotocol/subscriptionId": "s",
            "io.modelcontextprotocol/serverInfo": {"name": "n", "version": "1"},
        },
    }
