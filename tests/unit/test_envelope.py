"""The 2026-07-28 envelope checks, in the order the spec expects."""

import base64

import pytest

from mcp_edge.core import envelope
from mcp_edge.core.errors import RpcError
from mcp_edge.core.jsonrpc import parse_single_request

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def req(method="tools/call", params=None, **extra):
    p = {"name": "echo", "arguments": {"x": 1}, "_meta": dict(META)} if params is None else params
    return parse_single_request({"jsonrpc": "2.0", "id": 7, "method": method, "params": p, **extra})


def hdrs(version=V, method="tools/call", name="echo", **more):
    out = []
    if version is not None:
        out.append((b"mcp-protocol-version", version.encode()))
    if method is not None:
        out.append((b"mcp-method", method.encode()))
    if name is not None:
        out.append((b"mcp-name", name.encode()))
    for k, v in more.items():
        out.append((k.replace("_", "-").encode(), v.encode()))
    return out


def code_of(fn):
    with pytest.raises(RpcError) as info:
        fn()
    return info.value


def test_valid_request_passes():
    assert envelope.check_request(req(), hdrs()) == V


@pytest.mark.parametrize(
    "headers,modern",
    [
        ([], False),
        ([(b"mcp-protocol-version", b"2025-11-25")], False),
        ([(b"mcp-protocol-version", b"2025-06-18")], False),
        ([(b"mcp-protocol-version", b"2026-07-28")], True),
        ([(b"mcp-protocol-version", b"2099-01-01")], True),
        (
            [(b"mcp-protocol-version", b"2025-11-25"), (b"mcp-protocol-version", b"2025-11-25")],
            True,
        ),
    ],
)
def test_era_is_told_by_the_header(headers, modern):
    assert envelope.is_modern(headers) is modern


def test_missing_meta_is_invalid_params():
    err = code_of(lambda: envelope.check_request(req(params={"name": "echo"}), hdrs()))
    assert (err.code, err.http_status) == (-32602, 400)


@pytest.mark.parametrize(
    "drop",
    ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"],
)
def test_missing_meta_key_is_invalid_params(drop):
    meta = {k: v for k, v in META.items() if k != drop}
    err = code_of(
        lambda: envelope.check_request(req(params={"name": "echo", "_meta": meta}), hdrs())
    )
    assert err.code == -32602 and drop in err.message


def test_meta_check_comes_before_header_check():
    err = code_of(
        lambda: envelope.check_request(req(params={"name": "echo"}), hdrs(method="wrong"))
    )
    assert err.code == -32602


@pytest.mark.parametrize(
    "headers",
    [
        hdrs(method="tools/list"),
        hdrs(method=None),
        hdrs(name="other"),
        hdrs(name=None),
        hdrs(version="2025-11-25"),
        hdrs() + [(b"mcp-method", b"tools/call")],
    ],
)
def test_header_mismatch(headers):
    err = code_of(lambda: envelope.check_request(req(), headers))
    assert (err.code, err.http_status) == (-32020, 400)


def test_header_mismatch_comes_before_version_check():
    params = {"name": "echo", "_meta": {**META, "io.modelcontextprotocol/protocolVersion": "v999"}}
    err = code_of(lambda: envelope.check_request(req(params=params), hdrs()))
    assert err.code == -32020


def test_unsupported_version():
    params = {
        "name": "echo",
        "_meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"},
    }
    err = code_of(lambda: envelope.check_request(req(params=params), hdrs(version="2099-01-01")))
    assert (err.code, err.http_status) == (-32022, 400)
    assert err.data == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


def test_base64_name_header_is_decoded():
    name = "résumé tool"
    encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
    params = {"name": name, "_meta": META}
    assert envelope.check_request(req(params=params), hdrs(name=encoded)) == V
    err = code_of(lambda: envelope.check_request(req(params=params), hdrs(name="=?base64?!!!?=")))
    assert err.code == -32020


def test_resources_read_name_is_the_uri():
    params = {"uri": "test://x", "_meta": META}
    assert envelope.check_request(
        req("resources/read", params), hdrs(method="resources/read", name="test://x")
    )
    err = code_of(
        lambda: envelope.check_request(
            req("resources/read", params), hdrs(method="resources/read", name="x")
        )
    )
    assert err.code == -32020


def test_methods_without_a_name_ignore_mcp_name_absence():
    params = {"_meta": META}
    assert (
        envelope.check_request(req("tools/list", params), hdrs(method="tools/list", name=None)) == V
    )


@pytest.mark.parametrize(
    "doc,fragment",
    [
        ([{"jsonrpc": "2.0", "id": 1, "method": "x"}], "Batches"),
        ("x", "single"),
        ({"jsonrpc": "1.0", "id": 1, "method": "x"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, "responses"),
        ({"jsonrpc": "2.0", "id": True, "method": "x"}, "id"),
        ({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]}, "params"),
    ],
)
def test_bad_messages(doc, fragment):
    err = code_of(lambda: parse_single_request(doc))
    assert err.code == -32600 and fragment in err.message and err.http_status == 400
