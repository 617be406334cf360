"""The legacy wire as the bridge speaks it: pure functions, tested directly."""

from __future__ import annotations

import pytest

from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.continuation import Continuation, Pending


@pytest.mark.parametrize(
    "declared,expected",
    [
        ({}, {}),
        ({"elicitation": {}}, {"elicitation": {"form": {}}}),
        ({"elicitation": {"form": {}}}, {"elicitation": {"form": {}}}),
        ({"elicitation": {"url": {}}}, {"elicitation": {"url": {}}}),
        ({"elicitation": {"form": {}, "url": {}}}, {"elicitation": {"form": {}, "url": {}}}),
        ({"sampling": {}}, {"sampling": {}}),
        (
            {"sampling": {"tools": {}, "context": {}, "x": 1}},
            {"sampling": {"tools": {}, "context": {}}},
        ),
        ({"roots": {"listChanged": True}}, {"roots": {}}),
        ({"extensions": {"io.modelcontextprotocol/tasks": {}}, "experimental": {"a": {}}}, {}),
        ({"elicitation": "yes", "sampling": None, "roots": []}, {}),
    ],
)
def test_session_capabilities_never_exceed_the_declared(declared, expected):
    assert wire.session_capabilities(declared) == expected


def test_upstream_params_drop_the_envelope_and_retry_fields():
    params = {
        "name": "t",
        "arguments": {"a": 1},
        "requestState": "s",
        "inputResponses": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "c"},
            "io.modelcontextprotocol/logLevel": "info",
            "progressToken": 7,
            "traceparent": "00-ab",
        },
    }
    assert wire.upstream_params(params) == {
        "name": "t",
        "arguments": {"a": 1},
        "_meta": {"progressToken": 7, "traceparent": "00-ab"},
    }
    assert "_meta" not in wire.upstream_params(
        {"name": "t", "_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}
    )


def test_client_info_and_envelope_fields():
    meta = {
        "_meta": {
            "io.modelcontextprotocol/clientInfo": {"name": "app", "version": 3},
            "io.modelcontextprotocol/logLevel": "debug",
            "progressToken": "p",
        }
    }
    assert wire.client_info(meta) == {"name": "app", "version": "3"}
    assert wire.client_info({})["name"] == "mcp-edge-bridge"
    assert wire.log_level(meta) == "debug" and wire.log_level({}) is None
    assert wire.progress_token(meta) == "p"
    assert wire.progress_token({"_meta": {"progressToken": True}}) is None


def test_upstream_ids_are_unique_strings():
    ids = {wire.new_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.startswith("mcpe-") for i in ids)


def test_classify():
    assert wire.classify(
        {"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"a": 1}}
    ) == (wire.ServerRequest(0, "elicitation/create", {"a": 1}))
    assert wire.classify(
        {"jsonrpc": "2.0", "method": "notifications/progress"}
    ) == wire.Notification("notifications/progress", {})
    assert wire.classify({"jsonrpc": "2.0", "id": "x", "result": {"ok": 1}}) == wire.Response(
        "x", {"ok": 1}, None
    )
    err = wire.classify({"jsonrpc": "2.0", "id": "x", "error": {"code": -1, "message": "m"}})
    assert (
        isinstance(err, wire.Response)
        and err.error == {"code": -1, "message": "m"}
        and err.result is None
    )
    odd = wire.classify({"jsonrpc": "2.0", "id": "x", "result": [1]})
    assert odd == wire.Response("x", None, {"code": -32603, "message": "malformed response"})
    assert wire.classify("text") is None and wire.classify({"jsonrpc": "2.0"}) is None


def test_input_request_drops_what_2026_removed():
    request = wire.ServerRequest(
        3,
        "elicitation/create",
        {
            "mode": "url",
            "url": "https://x",
            "message": "m",
            "elicitationId": "e1",
            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t"}},
        },
    )
    assert wire.input_request(request) == {
        "method": "elicitation/create",
        "params": {"mode": "url", "url": "https://x", "message": "m"},
    }
    kept = wire.input_request(
        wire.ServerRequest(4, "sampling/createMessage", {"messages": [], "_meta": {"k": 1}})
    )
    assert kept["params"]["_meta"] == {"k": 1}
    assert wire.input_request(wire.ServerRequest(5, "roots/list", {})) == {"method": "roots/list"}


def test_fingerprint_tells_questions_apart():
    a = {
        "method": "elicitation/create",
        "params": {"message": "How many?", "requestedSchema": {"type": "object"}},
    }
    b = {
        "method": "elicitation/create",
        "params": {"requestedSchema": {"type": "object"}, "message": "How many?"},
    }
    c = {
        "method": "elicitation/create",
        "params": {"message": "How many now?", "requestedSchema": {"type": "object"}},
    }
    assert wire.fingerprint(a) == wire.fingerprint(b) != wire.fingerprint(c)


@pytest.mark.parametrize(
    "method,answer,ok",
    [
        ("elicitation/create", {"action": "accept", "content": {"n": 1}}, True),
        ("elicitation/create", {"action": "decline"}, True),
        ("elicitation/create", {"action": "cancel", "content": None}, True),
        ("elicitation/create", {"action": "accept", "content": [1]}, False),
        ("elicitation/create", {"action": "maybe"}, False),
        ("elicitation/create", 12345, False),
        ("elicitation/create", None, False),
        (
            "sampling/createMessage",
            {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"},
            True,
        ),
        ("sampling/createMessage", {"content": {}}, False),
        ("roots/list", {"roots": [{"uri": "file:///a"}]}, True),
        ("roots/list", {"roots": "x"}, False),
        ("tools/list", {}, False),
    ],
)
def test_answer_shapes(method, answer, ok):
    assert wire.answer_is_valid(method, answer) is ok


def test_legacy_answer_drops_result_type():
    assert wire.legacy_answer({"action": "accept", "resultType": "complete"}) == {
        "action": "accept"
    }


def test_complete_result_stamps_2026_fields():
    info = {"name": "old", "version": "1"}
    out = wire.complete_result("tools/list", {"tools": []}, info)
    assert out == {
        "tools": [],
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": info},
    }
    call = wire.complete_result("tools/call", {"content": [], "_meta": {"k": 1}}, None)
    assert call == {"content": [], "_meta": {"k": 1}, "resultType": "complete"}


def test_modern_error_maps_resource_not_found():
    assert wire.modern_error({"code": -32002, "message": "nope", "data": {"uri": "u"}}) == (
        -32602,
        "nope",
        {"uri": "u"},
    )
    assert wire.modern_error({"code": -32603, "message": "boom"}) == (-32603, "boom", None)
    assert wire.modern_error({"code": "x"})[0] == -32603


def test_discover_result_from_initialize():
    init = {
        "protocolVersion": "2025-11-25",
        "instructions": "be nice",
        "capabilities": {
            "tools": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "logging": {},
            "experimental": {},
            "completions": {},
            # The 2025 tasks (the npm server-everything has them): never served by the bridge.
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        },
        "serverInfo": {"name": "old", "version": "2"},
    }
    out = wire.discover_result(init)
    assert out["supportedVersions"] == ["2026-07-28"]
    assert out["capabilities"] == {
        "tools": {"listChanged": True},  # served: subscriptions/listen
        "resources": {"subscribe": True, "listChanged": True},
        "completions": {},
    }
    assert out["instructions"] == "be nice" and out["resultType"] == "complete"
    assert out["ttlMs"] == 0 and out["cacheScope"] == "private"
    assert out["_meta"]["io.modelcontextprotocol/serverInfo"] == {"name": "old", "version": "2"}


def test_negotiated_version():
    assert wire.negotiated_version({"protocolVersion": "2025-06-18"}) == "2025-06-18"
    assert wire.negotiated_version({"protocolVersion": "2026-07-28"}) is None


def test_url_elicitations_from_a_legacy_error():
    error = {
        "code": -32042,
        "message": "auth",
        "data": {
            "elicitations": [
                {"mode": "url", "url": "https://a", "message": "sign in", "elicitationId": "e"}
            ]
        },
    }
    assert wire.url_elicitations(error) == [
        {
            "method": "elicitation/create",
            "params": {"mode": "url", "url": "https://a", "message": "sign in"},
        }
    ]
    assert wire.url_elicitations({"code": -32042, "data": {"elicitations": [{"x": 1}]}}) is None
    assert wire.url_elicitations({"code": -32603}) is None


def test_continuation_round_trip_and_junk():
    cont = Continuation(
        strategy="resume",
        questions={"roots-1": {"method": "roots/list"}},
        pending=[Pending("roots-1", 0, "fp", side=True)],
        endpoint="http://u/mcp",
        fallback=True,
        session_id="s",
        version="2025-11-25",
        call_id="mcpe-1",
        last_event_id="ev",
        side_event_id="sev",
        answers=[["fp0", {"action": "decline"}]],
        asked=2,
        answered=["0", '"mcpe-x"'],
    )
    assert Continuation.decode(cont.encode()) == cont
    park = Continuation(
        strategy="park",
        questions={"k": {"method": "roots/list"}},
        pending=[Pending("k", "r", "f")],
        endpoint="e",
        owner="http://r:1",
        ticket="t",
    )
    assert Continuation.decode(park.encode()) == park
    for junk in (
        None,
        5,
        "",
        "not json",
        "[]",
        '{"v": 1}',
        '{"v": 2, "st": "teleport", "q": {}, "p": [], "ep": "e"}',
        '{"v": 2, "st": "park"}',
        '{"v": 2, "st": "park", "q": {}, "p": [["k", 1, "f", 0]], "ep": "e"}',
        '{"v": 2, "st": "park", "q": {"k": {}}, "p": [["k", 1]], "ep": "e"}',
    ):
        assert Continuation.decode(junk) is None


def test_the_upstream_progress_token_is_the_bridges_own():
    params = {"name": "t", "_meta": {"progressToken": "client-7", "traceparent": "00-x"}}
    out = wire.upstream_params_with_token(params, "mcpe-call")
    assert out["_meta"] == {"progressToken": "mcpe-call", "traceparent": "00-x"}
    assert params["_meta"]["progressToken"] == "client-7"  # the client's request is untouched
    assert "_meta" not in wire.upstream_params_with_token({"name": "t"}, "mcpe-call")
    assert wire.upstream_params_with_token(params, None)["_meta"]["progressToken"] == "client-7"


def test_unsolicited_requests_get_the_bridges_truthful_answer():
    def answer(method: str, caps: dict, roots: dict | None = None) -> dict:
        return wire.unsolicited_answer(wire.ServerRequest(3, method, {}), caps, roots)

    assert answer("ping", {}) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    given = {"roots": [{"uri": "file:///a"}], "resultType": "complete"}
    assert answer("roots/list", {"roots": {}}, given)["result"] == {"roots": [{"uri": "file:///a"}]}
    # Not declared: the client does not support it (the 2025 spec's -32601).
    assert answer("roots/list", {})["error"]["code"] == -32601
    assert answer("sampling/createMessage", {"roots": {}})["error"]["code"] == -32601
    # Declared, but no call can carry the question: refused, never a made-up answer.
    refused = answer("roots/list", {"roots": {}})["error"]
    assert refused["code"] == -32603 and "own stream" in refused["message"]
    assert answer("elicitation/create", {"elicitation": {"form": {}}})["error"]["code"] == -32603
    assert answer("tasks/get", {"roots": {}})["error"]["code"] == -32601


def test_roots_given_in_the_call_are_found_in_its_history():
    roots = {"roots": [{"uri": "file:///a"}]}
    history = [["other", {"action": "decline"}], [wire.ROOTS_QUESTION, roots]]
    assert (
        wire.fingerprint(wire.input_request(wire.ServerRequest(0, "roots/list", {})))
        == wire.ROOTS_QUESTION
    )
    assert wire.roots_given(history) == roots
    assert wire.roots_given([[wire.ROOTS_QUESTION, {"roots": "junk"}]]) is None
    assert wire.roots_given([]) is None
