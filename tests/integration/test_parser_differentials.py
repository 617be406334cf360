"""Parser differentials: bodies the edge and the upstream might read differently never reach the
upstream.

What the edge checks and binds a sealed state to (method, tool name, arguments, the state itself)
must be exactly what the upstream acts on. The edge reads bodies with orjson; the upstream here is
a real ``mcp`` 2.x server (``tests/servers/plaintext_state.py``), which reads them with the
standard library's ``json`` (and ``pydantic_core`` on its legacy leg). Each hostile body below is
answered at the edge with a JSON-RPC error carrying the request's id where one can be found, and
the upstream's own request log shows it never arrived. Positive controls show the same requests,
written plainly, do arrive.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import start_gateway, start_upstream
from tests.support.raw_http import META, UpstreamLog, exchange, marked, new_marker, rpc
from tests.support.raw_http import request as raw_request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

M = json.dumps(META).encode()


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    log = module_tmp / "upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "plaintext_state.py", module_tmp, "--log", str(log))
        gateway = start_gateway(stack, module_tmp, upstream=upstream.url, keys=state_key)
        yield {"gateway": gateway, "log": UpstreamLog(log)}


def call(params: bytes, request_id: bytes = b"5", method: bytes = b"tools/call") -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":'
        + request_id
        + b',"method":"'
        + method
        + b'","params":'
        + params
        + b"}"
    )


def tool_params(inner: bytes) -> bytes:
    """params of a whoami_state call with ``inner`` spliced in before _meta."""
    return b'{"name":"whoami_state",' + inner + b',"_meta":' + M + b"}"


ARGS = b'"arguments":{"ask":false}'

# (case, body, method header, name header, expected JSON-RPC code, expected id, expected data.reason)
CASES = [
    (
        "duplicate name",
        call(tool_params(b'"name":"ask_name",' + ARGS)),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate method",
        b'{"jsonrpc":"2.0","id":5,"method":"tools/list","method":"tools/call","params":'
        + tool_params(ARGS)
        + b"}",
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate _meta",
        call(b'{"name":"whoami_state",' + ARGS + b',"_meta":{},"_meta":' + M + b"}"),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate requestState",
        call(tool_params(ARGS + b',"requestState":"mcpe1.a.b","requestState":"forged"')),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate arguments",
        call(tool_params(ARGS + b',"arguments":{"ask":true}')),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate inside arguments",
        call(tool_params(b'"arguments":{"ask":false,"ask":true}')),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate inside inputResponses",
        call(tool_params(ARGS + b',"inputResponses":{"c":{"action":"accept","action":"decline"}}')),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate inside _meta",
        call(
            b'{"name":"whoami_state",'
            + ARGS
            + b',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            b'"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}'
        ),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "unicode-escaped duplicate name",
        call(tool_params(b'"\\u006eame":"ask_name",' + ARGS)),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate id",
        b'{"jsonrpc":"2.0","id":5,"id":6,"method":"tools/call","params":'
        + tool_params(ARGS)
        + b"}",
        "tools/call",
        "whoami_state",
        -32700,
        None,
        "duplicate_key",
    ),
    (
        "duplicate on tools/list",
        call(b'{"cursor":"a","cursor":"b","_meta":' + M + b"}", method=b"tools/list"),
        "tools/list",
        None,
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "duplicate, legacy era (no version header)",
        call(tool_params(b'"name":"ask_name",' + ARGS)),
        None,
        None,
        -32700,
        5,
        "duplicate_key",
    ),
    (
        "integer beyond 64 bits in arguments",
        call(tool_params(b'"arguments":{"ask":false,"n":99999999999999999999999}')),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "number_out_of_range",
    ),
    (
        "integer beyond 64 bits as id",
        call(tool_params(ARGS), request_id=b"18446744073709551616"),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        "number_out_of_range",
    ),
    (
        "nesting 65 levels",
        call(tool_params(b'"arguments":{"ask":false,"x":' + b"[" * 63 + b"]" * 63 + b"}")),
        "tools/call",
        "whoami_state",
        -32700,
        5,
        "too_deep",
    ),
    (
        "nesting 300 levels on a non-MRTR method with retry fields",  # re-encoded by the edge: orjson writes 254 at most
        call(
            b'{"x":' + b"[" * 300 + b"]" * 300 + b',"requestState":"x","_meta":' + M + b"}",
            method=b"tools/list",
        ),
        "tools/list",
        None,
        -32700,
        5,
        "too_deep",
    ),
    (
        "nesting 10^5 levels",
        call(tool_params(b'"arguments":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "NaN",
        call(tool_params(b'"arguments":{"ask":false,"n":NaN}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "Infinity",
        call(tool_params(b'"arguments":{"ask":false,"n":Infinity}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "-Infinity",
        call(tool_params(b'"arguments":{"ask":false,"n":-Infinity}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "1e400",
        call(tool_params(b'"arguments":{"ask":false,"n":1e400}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "lone surrogate (escaped)",
        call(tool_params(b'"arguments":{"ask":false,"s":"\\ud800"}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "lone surrogate (raw bytes)",
        call(tool_params(b'"arguments":{"ask":false,"s":"\xed\xa0\x80"}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "invalid UTF-8",
        call(tool_params(b'"arguments":{"ask":false,"s":"\xff"}')),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "byte order mark",
        b"\xef\xbb\xbf" + call(tool_params(ARGS)),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "UTF-16 body",
        call(tool_params(ARGS)).decode().encode("utf-16"),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "trailing garbage",
        call(tool_params(ARGS)) + b" x",
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "a second document",
        call(tool_params(ARGS)) + call(tool_params(ARGS)),
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "trailing NUL",
        call(tool_params(ARGS)) + b"\x00",
        "tools/call",
        "whoami_state",
        -32700,
        None,
        None,
    ),
    (
        "float id",
        call(tool_params(ARGS), request_id=b"5.0"),
        "tools/call",
        "whoami_state",
        -32600,
        None,
        None,
    ),
    (
        "boolean id",
        call(tool_params(ARGS), request_id=b"true"),
        "tools/call",
        "whoami_state",
        -32600,
        None,
        None,
    ),
    (
        "null id",
        call(tool_params(ARGS), request_id=b"null"),
        "tools/call",
        "whoami_state",
        -32600,
        None,
        None,
    ),
    (
        "object id",
        call(tool_params(ARGS), request_id=b'{"a":1}'),
        "tools/call",
        "whoami_state",
        -32600,
        None,
        None,
    ),
    (
        "array id",
        call(tool_params(ARGS), request_id=b"[5]"),
        "tools/call",
        "whoami_state",
        -32600,
        None,
        None,
    ),
]


def post(env, body: bytes, method: str | None, name: str | None, marker: str):
    data = raw_request(
        body, method or "tools/call", name=name, modern=method is not None, extra=[marked(marker)]
    )
    return exchange(env["gateway"].port, data)


#: What the upstream's legacy leg answers a call without a session (it did reach the upstream).
MISSING_SESSION = 400


def control(env, method: str | None):
    """The positive control: a plain call the way the refused one was sent (same era)."""

    def send(marker: str) -> None:
        r = post(
            env, call(tool_params(ARGS)), method and "tools/call", method and "whoami_state", marker
        )
        assert r.status == (200 if method else MISSING_SESSION), r.body[:300]

    return send


@pytest.mark.parametrize(
    "case,body,method,name,code,request_id,reason", CASES, ids=[c[0] for c in CASES]
)
def test_hostile_bodies_are_refused_at_the_edge(
    env, case, body, method, name, code, request_id, reason
):
    marker = new_marker("hostile")
    r = post(env, body, method, name, marker)
    assert r.status == 400, (case, r.status, r.body[:300])
    doc = r.json()
    assert doc["jsonrpc"] == "2.0" and doc["id"] == request_id, doc
    assert doc["error"]["code"] == code, doc
    if reason is not None:
        assert doc["error"]["data"]["reason"] == reason, doc
    env["log"].assert_never_arrived(marker, control(env, method))


@pytest.mark.parametrize(
    "body,method,name",
    [
        (call(tool_params(ARGS)), "tools/call", "whoami_state"),
        # The same name in different objects, ':' inside strings, escapes that are not names.
        (
            call(
                tool_params(
                    b'"arguments":{"ask":false,"name":"x","nested":{"name":"y"},"url":"http://a:1/b","s":"\\u003a"}'
                )
            ),
            "tools/call",
            "whoami_state",
        ),
        (
            call(
                tool_params(
                    b'"arguments":{"ask":false,"n":18446744073709551615,"m":-9223372036854775808,"f":1.5e300}'
                )
            ),
            "tools/call",
            "whoami_state",
        ),
        (
            call(tool_params(b'"arguments":{"ask":false,"x":' + b"[" * 60 + b"]" * 60 + b"}")),
            "tools/call",
            "whoami_state",
        ),
        (call(tool_params(ARGS), request_id=b'"a-string-id"'), "tools/call", "whoami_state"),
        (
            call(tool_params(ARGS)),
            None,
            None,
        ),  # legacy era: passes through to the upstream's legacy leg
    ],
    ids=[
        "plain",
        "look-alikes",
        "64-bit integers and big floats",
        "60 levels",
        "string id",
        "legacy era",
    ],
)
def test_positive_controls_reach_the_upstream(env, body, method, name):
    marker = new_marker("plain")
    r = post(env, body, method, name, marker)
    if method is None:  # the upstream's own answer to a legacy call without a session
        assert (r.status, r.json()["error"]["message"]) == (
            MISSING_SESSION,
            "Bad Request: Missing session ID",
        ), r.body
    else:
        assert r.status == 200, r.body[:300]
    (arrived,) = env["log"].wait_for(marker)
    assert (arrived["method"], arrived["name"], arrived["id"]) == (
        "tools/call",
        "whoami_state",
        json.loads(body)["id"],
    )


def test_what_the_edge_binds_is_what_the_upstream_acts_on(env):
    """A retry whose arguments repeat a name cannot reuse a state bound to one reading of them:
    it is refused before the state is even opened, and the upstream sees neither round twice."""
    gw = env["gateway"]
    first = rpc(1, "tools/call", name="whoami_state", arguments={"state": "s1"})
    r = exchange(gw.port, raw_request(first, "tools/call", name="whoami_state"))
    assert r.status == 200
    sealed = r.json()["result"]["requestState"]
    marker = new_marker("twice-arguments")
    retry = call(
        tool_params(
            b'"arguments":{"state":"evil"},"arguments":{"state":"s1"},'
            b'"inputResponses":{"confirm":{"action":"accept","content":{"ok":true}}},'
            b'"requestState":"' + sealed.encode() + b'"'
        ),
        request_id=b"2",
    )
    r = exchange(
        gw.port, raw_request(retry, "tools/call", name="whoami_state", extra=[marked(marker)])
    )
    assert r.status == 400 and r.json()["error"]["data"] == {
        "reason": "duplicate_key",
        "key": "arguments",
    }

    def plain_retry(control: str) -> None:  # still completes: the refusal spent nothing
        plain = rpc(
            3,
            "tools/call",
            name="whoami_state",
            arguments={"state": "s1"},
            inputResponses={"confirm": {"action": "accept", "content": {"ok": True}}},
            requestState=sealed,
        )
        r = exchange(
            gw.port, raw_request(plain, "tools/call", name="whoami_state", extra=[marked(control)])
        )
        assert r.status == 200 and r.json()["result"]["structuredContent"]["requestState"] == "s1"

    env["log"].assert_never_arrived(marker, plain_retry)
