"""Method names matched exactly, and messages without an id (``mcp_edge.core.methods``)."""

from __future__ import annotations

import pytest

from mcp_edge.core import methods
from mcp_edge.core.errors import RpcError


@pytest.mark.parametrize("name", sorted(methods.KNOWN))
def test_every_known_method_passes(name):
    assert methods.misspelt(name) is None
    methods.check_spelling(name)


@pytest.mark.parametrize(
    "name", ["vendor/export", "x", "no/such", "tools/call2", "acme.com/tools/run"]
)
def test_unknown_methods_spelt_plainly_pass(name):
    """Extensions and vendors' methods are the upstream's to answer (or a policy's to refuse)."""
    assert methods.misspelt(name) is None


@pytest.mark.parametrize(
    "name,canonical",
    [
        ("Tools/Call", "tools/call"),
        ("TOOLS/CALL", "tools/call"),
        ("tools/Call", "tools/call"),
        ("Resources/Read", "resources/read"),
        ("prompts/GET", "prompts/get"),
        ("SERVER/DISCOVER", "server/discover"),
        ("ｔｏｏｌｓ/ｃａｌｌ", "tools/call"),  # full-width letters
        ("tools／call", "tools/call"),  # full-width solidus
        ("Notifications/Initialized", "notifications/initialized"),
        ("sampling/createmessage", "sampling/createMessage"),
    ],
)
def test_case_and_compatibility_variants_of_known_methods_are_refused(name, canonical):
    why = methods.misspelt(name)
    assert why is not None and canonical in why
    with pytest.raises(RpcError) as info:
        methods.check_spelling(name)
    err = info.value
    assert (err.code, err.http_status, err.data) == (-32601, 404, {"reason": "method_spelling"})


@pytest.mark.parametrize(
    "name",
    [
        "tools/call ",
        " tools/call",
        "tools/ call",
        "tools/call\t",
        "tools/call\x00",
        "tools\u200b/call",
        "tools/call\n",
        "vendor/ export",
        "vendor/export\u00a0",
    ],
)
def test_blanks_and_control_characters_are_refused(name):
    assert methods.misspelt(name) == "blanks or control characters in the name"


def test_notification_refusal_is_invalid_request_with_http_400():
    err = methods.notification_refused()
    assert (err.code, err.http_status, err.data) == (-32600, 400, {"reason": "notification"})
    assert err.to_response(None)["id"] is None


@pytest.mark.parametrize(
    "doc",
    [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "result": {"action": "accept"},
        },  # an answer to the server's question
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": 6, "method": "vendor/export"},
        [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/progress"},
        ],
        "not a message",
    ],
)
def test_legacy_traffic_that_passes(doc):
    assert methods.legacy_refusal(doc) is None


@pytest.mark.parametrize(
    "doc,reason",
    [
        ({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}}, "request_without_id"),
        ({"jsonrpc": "2.0", "method": "initialize"}, "request_without_id"),
        ({"jsonrpc": "2.0", "method": "vendor/export"}, "request_without_id"),
        (
            [
                {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                {"jsonrpc": "2.0", "method": "tools/call"},
            ],
            "request_without_id",
        ),
        ({"jsonrpc": "2.0", "id": 1, "method": "Tools/Call"}, "method_spelling"),
        ({"jsonrpc": "2.0", "method": "Notifications/Initialized"}, "method_spelling"),
        ([{"jsonrpc": "2.0", "id": 1, "method": "tools/list "}], "method_spelling"),
    ],
)
def test_legacy_traffic_that_is_refused(doc, reason):
    err = methods.legacy_refusal(doc)
    assert err is not None and err.data == {"reason": reason}
    assert err.http_status == 400  # in this era 404 tells a client its session is gone
    assert err.code == (-32601 if reason == "method_spelling" else -32600)
