"""The error table and the header rules."""

import orjson

from mcp_edge.core import headers as h
from mcp_edge.core.errors import RpcError, state_error


def test_error_status_table():
    assert RpcError(-32700, "x").http_status == 400
    assert RpcError(-32601, "x").http_status == 404
    assert RpcError(-32603, "x").http_status == 200
    assert RpcError(-32603, "x", status=502).http_status == 502


def test_error_body_echoes_id():
    body = orjson.loads(RpcError(-32021, "m", {"requiredCapabilities": {"roots": {}}}).body("abc"))
    assert body == {
        "jsonrpc": "2.0",
        "id": "abc",
        "error": {"code": -32021, "message": "m", "data": {"requiredCapabilities": {"roots": {}}}},
    }


def test_state_error_shape():
    err = state_error("expired")
    assert (err.code, err.message, err.data, err.http_status) == (
        -32602,
        "Invalid or expired requestState",
        {"reason": "expired"},
        400,
    )


def test_upstream_headers_rewrite_host_and_drop_sensitive_ones():
    raw = [
        (b"host", b"gateway.example"),
        (b"origin", b"http://localhost"),
        (b"authorization", b"Bearer t"),
        (b"connection", b"keep-alive, x-secret"),
        (b"x-secret", b"1"),
        (b"keep-alive", b"5"),
        (b"content-length", b"10"),
        (b"accept-encoding", b"gzip"),
        (b"transfer-encoding", b"chunked"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"x"),
        (b"mcp-param-region", b"eu"),
        (b"traceparent", b"00-abc-def-01"),
        (b"x-user", b"alice"),
    ]
    out = dict(h.upstream_request_headers(raw, upstream_host="127.0.0.1:3001", drop=["X-User"]))
    assert out[b"host"] == b"127.0.0.1:3001"
    for gone in (
        b"origin",
        b"authorization",
        b"connection",
        b"x-secret",
        b"keep-alive",
        b"content-length",
        b"accept-encoding",
        b"transfer-encoding",
        b"x-user",
    ):
        assert gone not in out
    for kept in (
        b"mcp-protocol-version",
        b"mcp-method",
        b"mcp-name",
        b"mcp-param-region",
        b"traceparent",
    ):
        assert kept in out


def test_connection_never_strips_end_to_end_headers():
    """``Connection`` may nominate hop-by-hop headers, never what the edge checked against the body
    or what says how to read it: the upstream would get another request than the one verified."""
    raw = [
        (
            b"connection",
            b"Mcp-Name, MCP-Protocol-Version, Content-Type, Mcp-Method, Accept, Mcp-Param-Region, "
            b"traceparent, Last-Event-ID, x-hop",
        ),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"x"),
        (b"mcp-param-region", b"eu"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json"),
        (b"traceparent", b"00-abc-def-01"),
        (b"last-event-id", b"7"),
        (b"x-hop", b"1"),
    ]
    out = dict(h.upstream_request_headers(raw, upstream_host="u:1"))
    for kept in (
        b"mcp-protocol-version",
        b"mcp-method",
        b"mcp-name",
        b"mcp-param-region",
        b"content-type",
        b"accept",
        b"traceparent",
        b"last-event-id",
    ):
        assert kept in out, kept
    assert b"x-hop" not in out and b"connection" not in out


def test_modern_requests_carry_no_session_upstream():
    raw = [
        (b"mcp-session-id", b"raw-upstream-session"),
        (b"last-event-id", b"3"),
        (b"mcp-method", b"tools/list"),
    ]
    modern = dict(h.upstream_request_headers(raw, upstream_host="u:1", modern=True))
    assert (
        b"mcp-session-id" not in modern
        and b"last-event-id" not in modern
        and b"mcp-method" in modern
    )
    legacy = dict(h.upstream_request_headers(raw, upstream_host="u:1"))
    assert legacy[b"mcp-session-id"] == b"raw-upstream-session" and legacy[b"last-event-id"] == b"3"


def test_other_spellings_of_guarded_headers_are_dropped():
    """Many upstream frameworks read ``X_Forwarded_User`` and ``X-Forwarded-User`` as one
    variable: a client header that could pass for one the gateway consumed, sets or verified is
    dropped, so only the gateway's own value reaches the upstream."""
    raw = [
        (b"x_forwarded_user", b"root"),
        (b"x-forwarded_user", b"root"),
        (b"x_mcp_principal", b"root"),
        (b"mcp_session_id", b"raw"),
        (b"mcp_method", b"tools/call"),
        (b"mcp_name", b"other"),
        (b"mcp_protocol_version", b"2025-11-25"),
        (b"content_length", b"1"),
        (b"content_type", b"text/plain"),
        (b"transfer_encoding", b"chunked"),
        (b"x_api_key", b"client's"),
        (b"proxy_authorization", b"Basic x"),
        (b"x_custom_thing", b"kept"),
        (b"mcp-param-user_id", b"kept"),
        (b"x-other", b"kept"),
    ]
    drop = ["X-Forwarded-User", "X-MCP-Principal", "X-Api-Key"]
    extra = [("x-mcp-principal", "alice"), ("x-api-key", "gateway's")]
    out = h.upstream_request_headers(raw, upstream_host="u:1", drop=drop, extra=extra)
    names = [k for k, _ in out]
    assert sorted(names) == sorted(
        [
            b"x_custom_thing",
            b"mcp-param-user_id",
            b"x-other",
            b"host",
            b"x-mcp-principal",
            b"x-api-key",
        ]
    )
    assert dict(out)[b"x-mcp-principal"] == b"alice" and dict(out)[b"x-api-key"] == b"gateway's"
    assert [
        h.upstream_request_headers(
            [(b"x_forwarded_user", b"root")], upstream_host="u:1", drop=["x_forwarded_user"]
        )
    ] == [[(b"host", b"u:1")]]


def test_response_headers_keep_length_only_when_unchanged():
    raw = [(b"content-length", b"5"), (b"connection", b"close"), (b"mcp-x", b"1")]
    assert h.client_response_headers(raw, keep_length=True) == [
        (b"content-length", b"5"),
        (b"mcp-x", b"1"),
    ]
    assert h.client_response_headers(raw, keep_length=False) == [(b"mcp-x", b"1")]


def test_host_and_origin_allow_lists():
    assert h.host_allowed("localhost:8080", ["localhost:*"])
    assert h.host_allowed("localhost", ["localhost"])
    assert h.host_allowed("localhost:9", ["localhost"])
    assert not h.host_allowed("evil.example:80", ["localhost:*", "127.0.0.1:*"])
    assert not h.host_allowed(None, ["*"])
    assert h.origin_allowed("http://localhost:3000", ["http://localhost:*"])
    assert not h.origin_allowed("http://evil.example", ["http://localhost:*"])
    assert h.origin_allowed("https://app.example/", ["https://app.example"])


def test_decode_header_value():
    assert h.decode_header_value("plain") == "plain"
    assert h.decode_header_value("=?base64?w6k=?=") == "é"
    assert h.decode_header_value("é") is None
    assert h.decode_header_value("=?base64?***?=") is None
