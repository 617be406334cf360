"""Generated requests and upstream answers for fuzzing the edge, and the properties every answer
on an MCP route must have (``tests/unit/test_edge_fuzz.py`` in-process, for volume;
``tests/integration/test_edge_fuzz_e2e.py`` against a gateway process and a hostile upstream).

Profiles: the default run is short (a few hundred examples per test); ``HYPOTHESIS_PROFILE=fuzz``
runs the long one (``MCP_EDGE_FUZZ_EXAMPLES``, default 20 000 per test).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

MODERN = "2026-07-28"
MRTR_METHODS = ("tools/call", "resources/read", "prompts/get")
ABSENT: Any = object()

#: HTTP statuses the gateway may answer with itself (the spec's, and the documented refusals).
GATEWAY_STATUSES = frozenset(
    {200, 202, 400, 401, 403, 404, 405, 406, 408, 413, 415, 421, 429, 431, 502, 503, 504}
)


def fuzz_profile() -> bool:
    return os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"


def fuzz_settings(default_examples: int, long_examples: int | None = None) -> settings:
    """A short run by default; the long one under ``HYPOTHESIS_PROFILE=fuzz``."""
    long = int(os.environ.get("MCP_EDGE_FUZZ_EXAMPLES", long_examples or 20_000))
    return settings(
        max_examples=long if fuzz_profile() else default_examples,
        deadline=None,
        derandomize=not fuzz_profile(),  # the suite's run is the same every time
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# ---------------------------------------------------------------- JSON values

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["", "input_required", "complete", "\u0000", "é", "\ud7ff"]),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def deep(levels: int) -> Any:
    value: Any = 1
    for i in range(levels):
        value = [value] if i % 2 else {"d": value}
    return value


big_values = st.one_of(
    st.integers(1, 300).map(deep),
    st.integers(10, 300_000).map(lambda n: "x" * n),
    st.integers(1, 5000).map(lambda n: list(range(n))),
)

# ---------------------------------------------------------------- requests

METHODS = [
    "tools/call",
    "resources/read",
    "prompts/get",
    "tools/list",
    "prompts/list",
    "resources/list",
    "server/discover",
    "subscriptions/listen",
    "completion/complete",
    "initialize",
    "ping",
    "notifications/initialized",
    "tasks/get",
]
ODD_METHODS = [
    "Tools/Call",
    "tools/call ",
    " tools/call",
    "tools//call",
    "tools/call\u0000",
    "TOOLS/CALL",
    "tools\\/call",
    "",
    "rpc.discover",
    "notifications/",
    "tools/callx",
    "tools/cal",
]
methods = st.one_of(st.sampled_from(METHODS), st.sampled_from(ODD_METHODS), st.text(max_size=12))

ids = st.one_of(
    st.just(ABSENT),
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(2**64, 2**80),
    st.text(max_size=16),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
GOOD_CAPS = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}
metas = st.one_of(
    st.just(ABSENT),
    st.fixed_dictionaries(
        {
            "io.modelcontextprotocol/protocolVersion": st.sampled_from(
                [MODERN, MODERN, "2025-11-25", "v999", 1]
            ),
            "io.modelcontextprotocol/clientCapabilities": st.one_of(
                st.just(GOOD_CAPS), st.just({}), json_values
            ),
        }
    ),
    json_values,
)
request_states = st.one_of(
    st.just(ABSENT),
    st.text(max_size=40),
    st.just("mcpe1.k1.AAAA"),
    st.just("mcpe1." + "A" * 5000),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    json_values,
)
input_responses = st.one_of(
    st.just(ABSENT),
    st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    json_values,
)


@st.composite
def params(draw: st.DrawFn, method: str) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.just(ABSENT), json_values))
    p: dict[str, Any] = {}
    if method in ("tools/call", "prompts/get") or draw(st.booleans()):
        p["name"] = draw(st.one_of(st.sampled_from(["t", "book_table"]), json_values))
    if method == "resources/read":
        p["uri"] = draw(st.one_of(st.just("test://x"), json_values))
    if draw(st.booleans()):
        p["arguments"] = draw(
            st.one_of(st.dictionaries(st.text(max_size=6), json_values, max_size=3), json_values)
        )
    meta = draw(metas)
    if meta is not ABSENT:
        p["_meta"] = meta
    state = draw(request_states)
    if state is not ABSENT:
        p["requestState"] = state
    answers = draw(input_responses)
    if answers is not ABSENT:
        p["inputResponses"] = answers
    if draw(st.integers(0, 6)) == 0:
        p["big"] = draw(big_values)
    return p


def _short(data: bytes) -> str:
    return (
        repr(data if len(data) <= 600 else data[:300] + b"..." + data[-300:])
        + f" ({len(data)} bytes)"
    )


@dataclass(repr=False)
class Request:
    http_method: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    doc: Any = ABSENT  # the JSON document sent, when the body is one

    def __repr__(self) -> str:
        return f"Request({self.http_method}, headers={self.headers!r}, body={_short(self.body)})"

    @property
    def modern(self) -> bool:
        versions = [v for k, v in self.headers if k == b"mcp-protocol-version"]
        return bool(versions) and versions[0] not in (
            b"2025-11-25",
            b"2025-06-18",
            b"2025-03-26",
            b"2024-11-05",
        )

    @property
    def method(self) -> Any:
        return self.doc.get("method") if isinstance(self.doc, dict) else None

    @property
    def usable_id(self) -> bool:
        rid = self.doc.get("id", ABSENT) if isinstance(self.doc, dict) else ABSENT
        return (
            isinstance(rid, (str, int))
            and not isinstance(rid, bool)
            and (not isinstance(rid, int) or -(2**63) <= rid < 2**64)
        )

    @property
    def id(self) -> Any:
        return self.doc.get("id") if self.usable_id else None

    @property
    def has_id(self) -> bool:
        return isinstance(self.doc, dict) and "id" in self.doc


class _Repeated(ValueError):
    pass


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated
    return out


def strict_loads(body: bytes) -> Any:
    """The document a body holds when every reader would read it alike, else ABSENT."""
    import json

    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_no_repeats)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ABSENT


def _header_value(text: str) -> bytes:
    """Any bytes an HTTP parser lets through in a header value (no control characters)."""
    raw = text.encode("utf-8", "surrogatepass")[:200]
    return bytes(b for b in raw if b >= 0x20 and b != 0x7F or b == 0x09)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    method = draw(methods)
    doc: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]))}
    rid = draw(ids)
    if rid is not ABSENT:
        doc["id"] = rid
    doc["method"] = method
    p = draw(params(method))
    if p is not ABSENT:
        doc["params"] = p
    shape = draw(st.integers(0, 19))
    sent: Any = doc
    if shape == 0:
        body = draw(st.binary(max_size=64))  # not JSON, perhaps not UTF-8
        sent = ABSENT
    elif shape == 1:
        body = dumps([doc])  # a batch
        sent = [doc]
    elif shape == 2:
        whole = dumps(doc)
        body = whole[: draw(st.integers(0, max(0, len(whole) - 1)))]  # truncated
        sent = ABSENT
    elif shape == 3:
        body = dumps(doc)[:-1] + b',"id":1}'  # a member twice
        sent = ABSENT
    elif shape == 4:
        body = b"\xef\xbb\xbf" + dumps(doc)  # a byte order mark
        sent = ABSENT
    else:
        body = dumps(doc)

    sent = strict_loads(body)
    name = p.get("name") if isinstance(p, dict) else None
    uri = p.get("uri") if isinstance(p, dict) else None
    headers: list[tuple[bytes, bytes]] = [
        (
            b"host",
            draw(
                st.sampled_from(
                    [b"127.0.0.1:8080", b"127.0.0.1:8080", b"localhost", b"evil.example"]
                )
            ),
        )
    ]
    version = draw(
        st.sampled_from([MODERN, MODERN, MODERN, "2025-11-25", ABSENT, "garbage", MODERN + " "])
    )
    if version is not ABSENT:
        headers.append((b"mcp-protocol-version", version.encode()))
        if draw(st.integers(0, 9)) == 0:
            headers.append((b"mcp-protocol-version", b"2025-11-25"))  # duplicated, disagreeing
    mirrored = draw(st.sampled_from(["match", "match", "match", "absent", "other", "twice"]))
    if mirrored != "absent" and isinstance(method, str):
        value = method if mirrored != "other" else "tools/list"
        headers.append((b"mcp-method", _header_value(value)))
        if mirrored == "twice":
            headers.append((b"mcp-method", b"tools/call"))
    if isinstance(name or uri, str) and draw(st.integers(0, 4)):
        headers.append((b"mcp-name", _header_value(name or uri)))
    ctype = draw(
        st.sampled_from(
            [
                b"application/json",
                b"application/json",
                b"application/json; charset=utf-8",
                b"text/plain",
                None,
            ]
        )
    )
    if ctype is not None:
        headers.append((b"content-type", ctype))
    accept = draw(
        st.sampled_from(
            [
                b"application/json, text/event-stream",
                b"application/json, text/event-stream",
                b"application/json",
                b"text/event-stream",
                b"*/*",
                None,
            ]
        )
    )
    if accept is not None:
        headers.append((b"accept", accept))
    if draw(st.integers(0, 7)) == 0:
        headers.append(
            (
                b"connection",
                draw(
                    st.sampled_from(
                        [
                            b"mcp-method",
                            b"keep-alive, mcp-protocol-version",
                            b"close",
                            b"authorization",
                        ]
                    )
                ),
            )
        )
    origin = draw(
        st.sampled_from(
            [None, None, None, b"http://localhost:3000", b"https://evil.example", b"null"]
        )
    )
    if origin is not None:
        headers.append((b"origin", origin))
    if draw(st.integers(0, 9)) == 0:
        headers.append((b"authorization", b"Bearer " + draw(st.binary(max_size=20)).hex().encode()))
    if draw(st.integers(0, 9)) == 0:
        headers.append(
            (
                b"mcp-param-" + draw(st.sampled_from([b"a", b"Region", b""])),
                _header_value(draw(st.text(max_size=10))),
            )
        )
    http_method = draw(st.sampled_from(["POST"] * 12 + ["GET", "DELETE", "PUT", "OPTIONS"]))
    return Request(http_method, headers, body, sent)


# ---------------------------------------------------------------- upstream answers


@dataclass(repr=False)
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    chunks: list[bytes]
    kind: str = "garbage"
    messages: list[Any] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"Answer({self.status}, {self.kind}, headers={self.headers!r}, "
            f"chunks={[len(c) for c in self.chunks]}, body={_short(self.body)})"
        )

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def dumps(doc: Any) -> bytes:
    """JSON for anything drawn (integers beyond 64 bits and lone surrogates included)."""
    try:
        return orjson.dumps(doc)
    except (orjson.JSONEncodeError, TypeError):
        import json

        return json.dumps(doc, separators=(",", ":")).encode()


def _event(doc: Any) -> bytes:
    return b"event: message\r\ndata: " + dumps(doc) + b"\r\n\r\n"


@st.composite
def results(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            st.just({"resultType": "complete", "content": []}),
            st.just({"content": [{"type": "text", "text": "ok"}]}),
            st.fixed_dictionaries(
                {
                    "resultType": st.just("input_required"),
                    "inputRequests": st.one_of(
                        st.just(
                            {
                                "a": {
                                    "method": "elicitation/create",
                                    "params": {
                                        "message": "?",
                                        "requestedSchema": {"type": "object"},
                                    },
                                }
                            }
                        ),
                        st.just({"r": {"method": "roots/list"}}),
                        st.just({}),
                        json_values,
                    ),
                    "requestState": st.one_of(st.just("upstream-state"), json_values),
                }
            ),
            st.just({"resultType": "input_required"}),
            st.just({"resultType": "Input_Required", "requestState": "x"}),
            st.just({"requestState": "x"}),
            st.just({"resultType": "task"}),
            json_values,
        )
    )


@st.composite
def messages(draw: st.DrawFn, rid: Any) -> Any:
    kind = draw(st.integers(0, 9))
    the_id = draw(
        st.one_of(
            st.just(rid), st.just(rid), st.just(rid), st.none(), st.integers(), st.text(max_size=4)
        )
    )
    if kind <= 4:
        return {"jsonrpc": "2.0", "id": the_id, "result": draw(results())}
    if kind == 5:
        return {
            "jsonrpc": "2.0",
            "id": the_id,
            "error": {"code": draw(st.sampled_from([-32602, -32603, -32021, 7])), "message": "e"},
        }
    if kind in (6, 7):
        return {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1},
        }
    if kind == 8:
        return {"jsonrpc": "2.0", "id": 99, "method": "elicitation/create", "params": {}}
    return draw(json_values)


def _chunked(draw: st.DrawFn, data: bytes) -> list[bytes]:
    if not data or draw(st.booleans()):
        return [data]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    out, last = [], 0
    for cut in cuts:
        out.append(data[last:cut])
        last = cut
    out.append(data[last:])
    return out


@st.composite
def answers(draw: st.DrawFn, rid: Any, max_inspect_bytes: int) -> Answer:
    status = draw(st.sampled_from([200] * 10 + [202, 400, 401, 404, 500, 502]))
    shape = draw(
        st.sampled_from(
            ["json", "json", "sse", "sse", "ndjson", "garbage", "html", "oversized", "empty"]
        )
    )
    headers: list[tuple[bytes, bytes]] = []
    msgs: list[Any] = []
    if shape == "json":
        msgs = [draw(messages(rid))]
        body = dumps(msgs[0])
        if draw(st.integers(0, 5)) == 0:
            body = body[: draw(st.integers(0, len(body)))]  # truncated
            shape = "garbage"
        ctype = b"application/json"
    elif shape in ("sse", "ndjson"):
        msgs = draw(st.lists(messages(rid), max_size=5))
        if shape == "sse":
            parts = [_event(m) if draw(st.integers(0, 6)) else b": keep-alive\n\n" for m in msgs]
            body = b"".join(parts)
            ctype = b"text/event-stream"
        else:
            body = b"".join(dumps(m) + b"\n" for m in msgs)
            ctype = b"application/json"
        if draw(st.integers(0, 5)) == 0:
            body = body[: draw(st.integers(0, len(body)))]
    elif shape == "garbage":
        body = draw(st.binary(max_size=80))
        ctype = draw(st.sampled_from([b"application/json", b"text/event-stream"]))
    elif shape == "html":
        body = b"<html>upstream says no</html>"
        ctype = draw(st.sampled_from([b"text/html", b"text/plain"]))
    elif shape == "oversized":
        filler = b"x" * (max_inspect_bytes + 1)
        sse = draw(st.booleans())
        body = (
            (b"data: " + filler + b"\n\n")
            if sse
            else b'{"jsonrpc":"2.0","id":1,"result":{"a":"' + filler + b'"}}'
        )
        ctype = b"text/event-stream" if sse else b"application/json"
    else:
        body = b""
        ctype = draw(st.sampled_from([b"application/json", b"text/event-stream"]))
    headers.append((b"content-type", ctype))
    if draw(st.integers(0, 12)) == 0:
        headers.append((b"content-encoding", b"gzip"))
    if draw(st.integers(0, 12)) == 0:
        headers.append((b"content-type", b"text/html"))  # a second, disagreeing one
    return Answer(status, headers, _chunked(draw, body), shape, msgs)


# ---------------------------------------------------------------- what the client got


@dataclass
class Received:
    starts: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    ended: bool = False

    @property
    def status(self) -> int:
        return self.starts[0]["status"]

    @property
    def headers(self) -> dict[bytes, bytes]:
        return {k.lower(): v for k, v in self.starts[0].get("headers", [])}

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def take(self, message: dict[str, Any]) -> None:
        assert not self.ended, f"a message after the response ended: {message['type']}"
        if message["type"] == "http.response.start":
            assert not self.starts, "two http.response.start"
            self.starts.append(message)
        elif message["type"] == "http.response.body":
            assert self.starts, "a body before http.response.start"
            self.chunks.append(message.get("body", b""))
            self.ended = not message.get("more_body", False)


def sse_data(body: bytes) -> list[str]:
    from mcp_edge.core.sse import SSESplitter

    splitter = SSESplitter(len(body) + 10)
    events = [*splitter.feed(body), *splitter.feed(b"\n\n")]
    return [e.data for e in events if e.data is not None]


#: Refusals decided before the body is read (or without reading it): the id is not known.
_BEFORE_THE_BODY = frozenset({403, 405, 408, 413, 421, 431, 503})


def _is_sealed(result: Any) -> bool:
    return (
        isinstance(result, dict)
        and isinstance(result.get("requestState"), str)
        and result["requestState"].startswith("mcpe1.")
    )


def check_response(req: Request, got: Received, *, reached: bool, answer: Answer | None) -> None:
    """The properties of one exchange on an MCP route (``reached``: the upstream was called)."""
    assert len(got.starts) == 1 and got.ended, "the response did not start once and end"
    status = got.status
    ctype = got.headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    passed = answer is not None and reached and got.body == answer.body and status == answer.status
    modern = req.modern
    method = req.method if isinstance(req.method, str) else None
    mrtr = modern and method in MRTR_METHODS

    if not reached:
        # Refused at the edge: a JSON-RPC error for the request's id (or null), with a status of
        # the spec's or a documented refusal.
        assert status in GATEWAY_STATUSES, f"status {status} for a refusal"
        assert ctype == b"application/json", f"refusal with content type {ctype!r}"
        doc = orjson.loads(got.body)
        assert isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" and "error" in doc, doc
        if req.usable_id and status not in _BEFORE_THE_BODY:
            assert doc["id"] == req.id, f"the refusal lost the id: {doc['id']!r} for {req.id!r}"
        elif req.doc is not ABSENT:
            assert doc["id"] is None or doc["id"] == req.id, (doc["id"], req.id)
        return
    if not modern:
        return  # legacy-era traffic passes through untouched
    if not req.has_id:
        return  # id-less requests (notifications): their handling is the envelope's, not checked here
    if (
        passed
        and (answer.status < 200 or answer.status >= 300)
        and ctype not in (b"application/json", b"text/event-stream")
    ):
        return  # the upstream's own error page: the status says what happened
    if ctype == b"application/json":
        try:
            doc = orjson.loads(got.body)
        except orjson.JSONDecodeError:
            assert passed and not mrtr, (
                "an unreadable JSON body reached the client of an MRTR method"
            )
            return
        if not mrtr and passed:
            # Other methods' answers pass unread, unless they say input_required for the id.
            if (
                isinstance(doc, dict)
                and doc.get("id") == req.id
                and isinstance(doc.get("result"), dict)
            ):
                assert doc["result"].get("resultType") != "input_required", (
                    "input_required on another method"
                )
            return
        assert isinstance(doc, dict) and doc.get("jsonrpc") == "2.0", (
            f"not one JSON-RPC message: {got.body[:200]!r}"
        )
        assert ("result" in doc) != ("error" in doc), doc
        assert doc.get("id") == req.id and type(doc.get("id")) is type(req.id), (
            doc.get("id"),
            req.id,
        )
        if (
            mrtr
            and isinstance(doc.get("result"), dict)
            and doc["result"].get("resultType") == "input_required"
        ):
            assert _is_sealed(doc["result"]), "an input_required result left unsealed"
        # The gateway's own status, or the upstream's kept (its error, with the id filled in).
        assert status in GATEWAY_STATUSES or (answer is not None and status == answer.status), (
            status
        )
        return
    assert ctype == b"text/event-stream", f"content type {ctype!r} on an MCP route"
    # 200, or the upstream's own error status (a stream under it is the upstream's choice).
    assert status == 200 or (answer is not None and status == answer.status and status >= 400), (
        status
    )
    datas = sse_data(got.body)
    if not mrtr:
        for data in datas:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if (
                isinstance(doc, dict)
                and doc.get("id") == req.id
                and isinstance(doc.get("result"), dict)
            ):
                assert doc["result"].get("resultType") != "input_required", (
                    "input_required on another method"
                )
        return
    docs = [orjson.loads(d) for d in datas]  # every event of an MRTR method's stream is JSON
    responses = [d for d in docs if isinstance(d, dict) and ("result" in d or "error" in d)]
    assert responses, "an MRTR stream without a response"
    assert responses[-1] is docs[-1], "the response is not the last message"
    assert len(responses) == 1 and responses[0].get("id") == req.id, responses
    assert not any(isinstance(d, dict) and "method" in d and "id" in d for d in docs), (
        "a request on the stream"
    )
    result = responses[0].get("result")
    if isinstance(result, dict) and result.get("resultType") == "input_required":
        assert _is_sealed(result), "an input_required result left unsealed"
