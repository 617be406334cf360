"""The federation's wiring: a route's ``members:`` in configuration, the state bound to its
member, the policy's ``member`` and ``original``, a member's health, and reading and relaying a
member's answers (mcp_edge.upstream.federation, mcp_edge.server.stack)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from mcp_edge.core.federation.names import MemberNames, Namespace
from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.rules import RouteRules
from mcp_edge.sections import ConfigError
from mcp_edge.server.cli import _different_servers
from mcp_edge.server.config import load_config
from mcp_edge.server.stack import _member_rules, _resolver
from mcp_edge.upstream.federation.answers import CallAnswer
from mcp_edge.upstream.federation.listen import BACKOFF_MAX, backoff, jittered
from mcp_edge.upstream.federation.reader import Capture, classify, derive
from mcp_edge.upstream.http.era import ProbeOutcome
from mcp_edge.upstream.member import Health, Member

# ---------------------------------------------------------------- configuration


def config(route: dict[str, Any]) -> Any:
    return load_config(
        env={}, sections={"routes": [{"name": "r", "path": "/mcp", **route}]}, flags={}
    )


MEMBERS = [
    {"name": "docs", "upstream": "http://127.0.0.1:1/mcp"},
    {"name": "local", "prefix": "", "upstream": {"command": ["true"]}},
]


def test_a_route_with_members_names_each_and_refuses_2025_clients():
    route = config({"members": MEMBERS}).routes[0]
    assert route.federated and route.legacy_clients == "deny"
    assert [name for name, _ in route.upstreams()] == ["docs", "local"]
    assert route.members[1].stdio is not None
    assert route.members[0].list_timeout_ms == 2000


def test_the_example_configuration_is_a_valid_route_with_members():
    path = Path(__file__).resolve().parents[2] / "config" / "federation.yaml"
    (route,) = load_config(str(path), env={}).routes
    namespace = Namespace([m.names() for m in route.members or []], route.separator)
    assert [(m.name, m.prefix) for m in namespace.members] == [
        ("docs", "docs"),
        ("tickets", "jira"),
        ("files", ""),
    ]
    assert namespace.route_tool("find_docs") == ("docs", "search")
    assert namespace.route_tool("docs__search") is None  # renamed
    assert namespace.route_tool("docs__debug_x") is None  # excluded
    assert namespace.route_uri("jira+jira://issue/1") == ("tickets", "jira://issue/1")
    assert namespace.route_tool("read_file") == ("files", "read_file")


def test_a_single_upstream_route_is_unchanged_and_one_member_named_after_it():
    route = config({"upstream": "http://127.0.0.1:1/mcp", "era": "legacy"}).routes[0]
    assert not route.federated and route.legacy_clients == "allow"
    assert route.upstreams() == [("r", route)]
    assert route.upstream_urls() == ["http://127.0.0.1:1/mcp"]


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"upstream": "http://127.0.0.1:1/mcp"}, "gives upstream per member"),
        ({"era": "legacy"}, "gives era per member"),
        ({"legacy_clients": "allow"}, "legacy_clients: a route with members"),
        ({"separator": "a"}, "separator"),
    ],
)
def test_members_refuse_what_belongs_to_them_or_cannot_be(extra, says):
    with pytest.raises(ConfigError, match=says):
        config({"members": MEMBERS, **extra})


@pytest.mark.parametrize(
    "members, says",
    [
        ([MEMBERS[0], MEMBERS[0]], r"members\[1\]\.name"),
        ([MEMBERS[0], {**MEMBERS[0], "name": "other", "prefix": "docs"}], r"members\[1\]\.prefix"),
        ([{**MEMBERS[0], "prefix": "a__b"}], r"members\[0\]\.prefix: \"a__b\" must match"),
        ([{"name": "docs"}], "give either 'upstream'"),
        ([{**MEMBERS[1], "era": "modern"}], "stdio upstream speaks"),
        (
            [
                {**MEMBERS[0], "tools": {"rename": {"a": "x"}}},
                {**MEMBERS[0], "name": "two", "tools": {"rename": {"b": "x"}}},
            ],
            "already the name given",
        ),
    ],
)
def test_a_members_problem_names_its_field(members, says):
    with pytest.raises(ConfigError, match=says):
        config({"members": members})


def test_an_endpoints_list_of_different_servers_is_told_apart_from_replicas():
    same = [
        ProbeOutcome("a", era="modern", server_name="x"),
        ProbeOutcome("b", era="modern", server_name="x"),
    ]
    assert _different_servers(same) is None
    eras = [ProbeOutcome("a", era="modern"), ProbeOutcome("b", era="legacy")]
    assert _different_servers(eras) == "eras legacy and modern"
    names = [
        ProbeOutcome("a", era="modern", server_name="x"),
        ProbeOutcome("b", era="modern", server_name="y"),
    ]
    assert _different_servers(names) == "serverInfo.name 'x' and 'y'"
    down = [ProbeOutcome("a", era="modern"), ProbeOutcome("b", unreachable="refused")]
    assert _different_servers(down) is None


# ---------------------------------------------------------------- state and policy

NS = Namespace(
    [
        MemberNames("docs", "docs"),
        MemberNames("web", "web"),
    ]
)


def test_each_state_is_bound_to_the_member_its_target_names():
    from mcp_edge.core.flow import FlowRules

    base = FlowRules(ring=KeyRing([parse_key_spec(generate_key())]), audience="gw/r")

    def make(route: Any, audience: str) -> FlowRules:
        return FlowRules(ring=base.ring, audience=audience)

    rules_for = _member_rules(NS, base, make, None)  # type: ignore[arg-type]
    assert rules_for("tools/call", {"name": "docs__x"}).audience == "gw/r/docs"
    assert rules_for("prompts/get", {"name": "web__p"}).audience == "gw/r/web"
    assert rules_for("resources/read", {"uri": "web+file:///a"}).audience == "gw/r/web"
    assert rules_for("tools/call", {"name": "nobody__x"}) is base


def test_policy_rules_see_the_member_and_its_own_name():
    rules = RouteRules(
        RoutePolicyConfig.model_validate(
            {
                "default": "allow",
                "rules": [{"when": 'member == "docs" && original == "delete"', "action": "deny"}],
            }
        )
    )
    rules.resolve = _resolver("r", NS)
    assert rules.decide(None, "tools/call", "docs__delete", None, {}).action == "deny"
    assert rules.decide(None, "tools/call", "web__delete", None, {}).action == "allow"
    assert not rules.visible(None, "tools/call", "docs__delete", None)
    listed = {"tools": [{"name": "docs__delete"}, {"name": "web__delete"}]}
    assert rules.filter_result(None, "tools/list", listed) == 1
    assert listed["tools"] == [{"name": "web__delete"}]
    single = RouteRules(
        RoutePolicyConfig.model_validate({"rules": [{"when": 'member == "r"', "action": "deny"}]})
    )
    single.resolve = _resolver("r", None)
    assert single.decide(None, "tools/call", "x", None, {}).action == "deny"


# ---------------------------------------------------------------- health


def test_health_reports_changes_only():
    seen: list[bool] = []
    health = Health(on_change=seen.append)
    health.mark(True)
    health.mark(True)
    health.mark(False, "upstream_unreachable")
    health.mark(False, "upstream_unreachable")
    health.mark(True)
    assert seen == [True, False, True]
    assert health.describe()["state"] == "up" and "reason" not in health.describe()


# ---------------------------------------------------------------- reading answers


def scope_and_ctx(**headers: str) -> tuple[dict[str, Any], RequestContext]:
    raw = [(k.encode(), v.encode()) for k, v in {"accept": "application/json", **headers}.items()]
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": raw}, RequestContext(
        modern=True
    )


def test_a_derived_request_carries_matching_mcp_headers():
    scope, ctx = scope_and_ctx(**{"mcp-method": "tools/list", "mcp-name": "docs__x"})
    doc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ü"}}
    inner, derived = derive(scope, ctx, doc, mcp_name="ü")
    headers = dict(inner["headers"])
    assert headers[b"mcp-method"] == b"tools/call"
    assert headers[b"mcp-name"] == b"=?base64?" + base64.b64encode("ü".encode()) + b"?="
    assert inner[SCOPE_KEY] is derived and derived.rpc_method == "tools/call"
    assert orjson.loads(derived.body) == doc
    assert scope["headers"] != inner["headers"]  # the client's scope is not changed


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_capture_reads_json_sse_and_json_lines_bounded():
    async def feed(
        ctype: bytes, chunks: list[bytes], max_bytes: int = 1000
    ) -> tuple[list[Any], Capture]:
        got: list[Any] = []
        capture = Capture(got.append, max_bytes, reservation=Reservation(None))
        await capture(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]}
        )
        for i, chunk in enumerate(chunks):
            await capture(
                {"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1}
            )
        return got, capture

    got, _ = run(feed(b"application/json", [b'{"id":1,', b'"result":{}}']))
    assert got == [{"id": 1, "result": {}}]
    got, _ = run(
        feed(b"text/event-stream", [b'data: {"a":1}\n\n: c\n\ndata: {"id":1,"result":{}}\n\n'])
    )
    assert got == [{"a": 1}, {"id": 1, "result": {}}]
    lines = b'{"method":"n"}\n{"method":"m"}\n'
    got, capture = run(feed(b"application/json", [lines, b""]))
    assert got == [{"method": "n"}, {"method": "m"}]
    got, capture = run(feed(b"application/json", [b"x" * 2000]))
    assert got == [] and capture.too_large


@pytest.mark.parametrize(
    "response, status, missing",
    [
        (None, 502, "unavailable"),
        (None, 200, "invalid"),
        (
            {
                "id": 1,
                "error": {
                    "code": -32603,
                    "message": "",
                    "data": {"reason": "upstream_unreachable"},
                },
            },
            502,
            "unavailable",
        ),
        (
            {
                "id": 1,
                "error": {"code": -32603, "message": "", "data": {"reason": "upstream_timeout"}},
            },
            504,
            "timeout",
        ),
        ({"id": 1, "error": {"code": -32601, "message": "no"}}, 200, "error"),
        ({"id": 1, "result": []}, 200, "invalid"),
        ({"id": 1, "result": {"tools": []}}, 200, None),
    ],
)
def test_a_members_reply_is_classified(response, status, missing):
    assert classify(response, status, False).missing == missing


def test_backoff_doubles_to_its_bound_with_jitter():
    delays = [0.5]
    for _ in range(10):
        delays.append(backoff(delays[-1]))
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and delays[-1] == BACKOFF_MAX
    assert all(0.375 <= jittered(0.5) <= 0.625 for _ in range(100))


# ---------------------------------------------------------------- relaying a call's answer


def relay(
    namespace: Namespace,
    member: str,
    method: str,
    doc: dict[str, Any],
    asked: tuple[str, str] | None = None,
) -> tuple[list[Any], Member]:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def go() -> Member:
        m = Member(member, f"r/{member}", "http", lambda *a: None)  # type: ignore[arg-type,return-value]
        outer, inner = RequestContext(request_id=7), RequestContext(answered_by="http://e")
        answer = CallAnswer(
            send,
            outer=outer,
            inner=inner,
            member=m,
            namespace=namespace,
            method=method,
            max_bytes=10_000,
            on_dropped=lambda d: None,
            asked=asked,
            reservation=Reservation(None),
        )
        body = orjson.dumps(doc)
        await answer(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await answer({"type": "http.response.body", "body": body, "more_body": False})
        assert outer.answered_by == "http://e"
        return m

    member_ = asyncio.run(go())
    return sent, member_


def test_an_adapter_error_names_the_member_and_marks_it_down():
    error = {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32603,
            "message": "Upstream unreachable",
            "data": {"reason": "upstream_unreachable"},
        },
    }
    sent, member = relay(NS, "docs", "tools/call", error, ("name", "docs__search"))
    body = orjson.loads(sent[1]["body"])
    # The member and the federated name the client asked for (never the member's own name).
    assert body["error"]["data"] == {
        "reason": "upstream_unreachable",
        "member": "docs",
        "name": "docs__search",
    }
    assert dict(sent[0]["headers"])[b"content-length"] == b"%d" % len(sent[1]["body"])
    assert member.health.up is False


def test_uris_in_a_members_answer_are_federated():
    result = {"contents": [{"uri": "file:///a", "text": "x"}]}
    sent, member = relay(NS, "web", "resources/read", {"jsonrpc": "2.0", "id": 7, "result": result})
    assert orjson.loads(sent[1]["body"])["result"]["contents"][0]["uri"] == "web+file:///a"
    assert member.health.up is True
    # An answer with nothing to change passes as it came.
    plain = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "t"}]}}
    sent, _ = relay(NS, "web", "tools/call", plain)
    assert sent[1]["body"] == orjson.dumps(plain)


@pytest.mark.parametrize(
    "ctype, body, expected, too_large",
    [
        (b"application/json", b'{"method":"n"}\n{"id":1,\r"result":{}}\n', 2, False),
        (b"text/event-stream", b': c\n\nid: 2\nretry: 9\ndata: {"method":"n"}\n\n', 1, False),
        (
            b"text/event-stream",
            b'data: {"method":"n"}\n\ndata: "' + b"x" * 1000 + b'"\n\n',
            1,
            True,
        ),
        (
            b"application/json",
            b'{"method":"n"}\n{"id":2,"method":"m"}\n{"id":1,"result":{}}\n',
            1,
            False,
        ),
    ],
    ids=["lines_with_cr", "sse", "oversize_event", "request_on_the_stream"],
)
def test_capture_reads_the_same_however_the_answer_is_cut(ctype, body, expected, too_large):
    """A member's answer is read as the edge reads it (mcp_edge.core.response_reader): the
    same messages whatever the chunking; a message over the bound ends the reading, so does a
    request on a response stream (a client could not read on)."""

    async def feed(parts: list[bytes]) -> tuple[list[Any], bool]:
        got: list[Any] = []
        capture = Capture(got.append, 500, reservation=Reservation(None))
        await capture(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]}
        )
        for i, part in enumerate(parts):
            await capture(
                {"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1}
            )
        assert capture.ended.is_set()
        return got, capture.too_large

    async def every_cut() -> None:
        whole = await feed([body])
        assert (len(whole[0]), whole[1]) == (expected, too_large)
        for k in range(1, len(body)):
            assert await feed([body[:k], body[k:]]) == whole, k

    run(every_cut())


# ---------------------------------------------------------------- a listen stream fanned in


def test_a_member_stream_that_ends_is_opened_again_and_the_client_stream_goes_on(monkeypatch):
    """The member ends its first listen stream right after acknowledging; the gateway opens it
    again (after its backoff) without ending the client's stream, and relays what the second
    stream says with the client's subscription id; the client leaving closes it."""
    from prometheus_client import CollectorRegistry

    from mcp_edge.core.jsonrpc import Message as RpcMessage
    from mcp_edge.core.sse import encode_event
    from mcp_edge.edge.context import get_context
    from mcp_edge.upstream.federation import listen
    from mcp_edge.upstream.federation.report import FederationMetrics, Reporter
    from mcp_edge.upstream.federation.route import FederatedRoute, Seat

    monkeypatch.setattr(listen, "BACKOFF_START", 0.01)
    opened: list[Any] = []
    closed: list[Any] = []
    changed: list[str] = []
    forgotten_first: list[str] = []  # what was forgotten when the client was told
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": True}},
    }
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}

    async def member_app(scope: Any, receive: Any, send: Any) -> None:
        opened.append(get_context(scope).rpc.params)  # type: ignore[union-attr]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": encode_event(orjson.dumps(ack)), "more_body": True})  # fmt: skip
        if len(opened) == 1:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.body", "body": encode_event(orjson.dumps(note)), "more_body": True})  # fmt: skip
        while (await receive())["type"] != "http.disconnect":
            pass
        closed.append(True)

    async def forget(member: Any) -> None:
        changed.append(member.name)

    async def go() -> list[Any]:
        member = Member("docs", "r/docs", "http", member_app)
        route = FederatedRoute(
            route="r",
            audience="gw/r",
            seats=[Seat(member, 2.0)],
            namespace=Namespace([MemberNames("docs", "docs")]),
            ring=KeyRing([parse_key_spec(generate_key())]),
            reporter=Reporter("r", FederationMetrics(CollectorRegistry())),
            max_bytes=10_000,
            on_list_changed=forget,
        )
        doc = {
            "jsonrpc": "2.0",
            "id": "sub-1",
            "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": True}},
        }
        ctx = RequestContext(modern=True, request_id="sub-1", rpc=RpcMessage(doc), message=doc)
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], SCOPE_KEY: ctx}
        sent: list[Any] = []
        leave = asyncio.Event()
        relayed = asyncio.Event()

        async def receive() -> Any:
            await leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)
            if b"list_changed" in message.get("body", b""):
                forgotten_first.extend(changed)
                relayed.set()

        task = asyncio.ensure_future(listen.FanIn(route, scope, receive, send, ctx).run())
        await asyncio.wait_for(relayed.wait(), 10)
        leave.set()
        await asyncio.wait_for(task, 10)
        return sent

    sent = asyncio.run(go())
    assert len(opened) == 2  # opened again after it ended
    assert opened[1]["notifications"] == {"toolsListChanged": True}
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert all(m.get("more_body") for m in bodies), "the client's stream never ended"
    events = [orjson.loads(m["body"].split(b"data: ", 1)[1]) for m in bodies if m["body"]]
    assert [e["method"] for e in events] == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ]
    assert all(e["params"]["_meta"][listen.SUBSCRIPTION_ID] == "sub-1" for e in events)
    assert changed == ["docs"]  # the member's cached parts dropped...
    assert forgotten_first == ["docs"]  # ...before the client heard of the change
    assert closed == [True]  # the client leaving closed the member's stream
