"""The error table and the header rules."""

import orjson

from gateway.core import headers as h
from gateway.core.errors import RpcError, state_error


def test_error_status_table():
    assert RpcError(-32700, "x").http_status == 400
    assert RpcError(-32601, "x").http_status == 404
    assert RpcError(-32603, "x").http_status == 200
    assert RpcError(-32603, "x", status=502).http_status == 502


def test_error_body_echoes_id():
    body = orjson.loads(RpcError(-32021, "m", {"requiredCapabilities": {"roots": {}}}).body("abc"))
    assert body == {"jsonrpc": "2.0", "id": "abc", "error": {"code": -32021, "message": "m",
                    "data": {"requiredCapabilities": {"roots": {}}}}}


def test_state_error_shape():
    err = state_error("expired")
    assert (err.code, err.message, err.data, err.http_status) == (
        -32602, "Invalid or expired requestState", {"reason": "expired"}, 400)


def test_upstream_headers_rewrite_host_and_drop_sensitive_ones():
    raw = [
        (b"host", b"gateway.example"), (b"origin", b"http://localhost"), (b"authorization", b"Bearer t"),
        (b"connection", b"keep-alive, x-secret"), (b"x-secret", b"1"), (b"keep-alive", b"5"),
        (b"content-length", b"10"), (b"accept-encoding", b"gzip"), (b"transfer-encoding", b"chunked"),
        (b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"tools/call"), (b"mcp-name", b"x"),
        (b"mcp-param-region", b"eu"), (b"traceparent", b"00-abc-def-01"), (b"x-user", b"alice"),
    ]
    out = dict(h.upstream_request_headers(raw, upstream_host="127.0.0.1:3001", drop=["X-User"]))
    assert out[b"host"] == b"127.0.0.1:3001"
    for gone in (b"origin", b"authorization", b"connection", b"x-secret", b"keep-alive",
                 b"content-length", b"accept-encoding", b"transfer-encoding", b"x-user"):
        assert gone not in out
    for kept in (b"mcp-protocol-version", b"mcp-method", b"mcp-name", b"mcp-param-region", b"traceparent"):
        assert kept in out


def test_response_headers_keep_length_only_when_unchanged():
    raw = [(b"content-length", b"5"), (b"connection", b"close"), (b"mcp-x", b"1")]
    assert h.client_response_headers(raw, keep_length=True) == [(b"content-length", b"5"), (b"mcp-x", b"1")]
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
