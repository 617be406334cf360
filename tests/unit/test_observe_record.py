"""What observation records for each request: requests that differ only in ways the labels do not
see share their metric values, and requests whose labels differ never do, however alike their
values compare (an error code of ``-32600`` and ``-32600.0`` are equal in Python, not in the
labels)."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import generate_latest

from mcp_edge.core.jsonrpc import Message
from mcp_edge.edge import observe
from mcp_edge.edge.context import get_context
from mcp_edge.edge.observe import ObserveMiddleware
from mcp_edge.edge.responses import Outcome
from mcp_edge.observability.metrics import Metrics
from mcp_edge.observability.operations import OTHER

ROUTE = "r"


def _inner(method: str, tool: Any, code: Any, status: int = 200) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        ctx = get_context(scope)
        ctx.modern = True
        ctx.rpc = Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"name": tool}})
        ctx.outcome = Outcome(error_code=code, completed=code is None)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _call(mw: ObserveMiddleware, version: bytes = b"2026-07-28") -> None:
    scope = {"type": "http", "headers": [(b"mcp-protocol-version", version)]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await mw(scope, receive, send)


def _operations(metrics: Metrics, **labels: str) -> float:
    value = metrics.registry.get_sample_value(
        "mcp_server_operation_duration_seconds_count", {"route": ROUTE, **labels}
    )
    return value or 0.0


async def _record(metrics: Metrics, method: str, tool: Any, code: Any, **kw: Any) -> None:
    middleware = _middlewares.setdefault(
        id(metrics), ObserveMiddleware(_Switch(), route=ROUTE, metrics=metrics)
    )
    middleware.app.app = _inner(method, tool, code)
    await _call(middleware, **kw)


class _Switch:
    """The inner app, replaced per call (one middleware, and so one memo, for many requests)."""

    app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


_middlewares: dict[int, ObserveMiddleware] = {}


def _labels(method: str, tool: str, error: str, version: str = "2026-07-28") -> dict[str, str]:
    return {
        "mcp_method_name": method,
        "gen_ai_tool_name": tool,
        "error_type": error,
        "mcp_protocol_version": version,
    }


async def test_equal_values_of_other_types_are_told_apart() -> None:
    metrics = Metrics()
    await _record(metrics, "tools/call", "t", -32602)
    await _record(metrics, "tools/call", "t", -32602.0)  # == -32602, not a known code
    await _record(metrics, "tools/call", "t", True)  # == 1
    await _record(metrics, "tools/call", "t", 1)
    await _record(metrics, "tools/call", "t", -32602)
    # A tool's name is a label only once a call of it was answered without a protocol error.
    assert _operations(metrics, **_labels("tools/call", OTHER, "-32602")) == 2
    assert _operations(metrics, **_labels("tools/call", OTHER, OTHER)) == 3


async def test_repeated_requests_add_to_the_same_values() -> None:
    metrics = Metrics()
    for _ in range(3):
        await _record(metrics, "tools/call", "t", None)
    await _record(metrics, "tools/list", None, None)
    await _record(metrics, "tools/call", "t", None, version=b"2025-06-18")
    assert _operations(metrics, **_labels("tools/call", "t", "")) == 3
    assert _operations(metrics, **_labels("tools/list", "", "")) == 1
    assert _operations(metrics, **_labels("tools/call", "t", "", "2025-06-18")) == 1
    requests = metrics.registry.get_sample_value(
        "mcp_edge_requests_total", {"route": ROUTE, "method": "tools/call", "status": "200"}
    )
    assert requests == 4


async def test_what_callers_choose_does_not_grow_the_memo_without_bound(monkeypatch) -> None:
    monkeypatch.setattr(observe, "_MAX_RECORDERS", 5)
    metrics = Metrics()
    for i in range(20):
        await _record(metrics, "tools/call", f"t{i}", None)
    await _record(metrics, "tools/call", {"not": "hashable"}, [1])  # recorded, never memoised
    middleware = _middlewares[id(metrics)]
    assert len(middleware._recorders) == 5
    assert sum(_operations(metrics, **_labels("tools/call", f"t{i}", "")) for i in range(20)) == 20
    assert _operations(metrics, **_labels("tools/call", OTHER, OTHER)) == 1


async def test_no_memo_entry_holds_a_long_string_a_caller_chose() -> None:
    metrics = Metrics()
    for i in range(5):
        await _record(metrics, f"custom/{i}/" + "m" * 10_000, None, None)
        await _record(metrics, "tools/call", f"{i}" + "t" * 10_000, None)
    await _record(metrics, "tools/call", "t", None, version=b"2026-07-28" * 1000)
    middleware = _middlewares[id(metrics)]
    held = [part for key in middleware._recorders for part in key if isinstance(part, str)]
    assert held and max(len(part) for part in held) <= 128
    assert _operations(metrics, **_labels("other", "", "")) == 5  # the methods, as "other"
    assert _operations(metrics, **_labels("tools/call", OTHER, "")) == 5  # names past 128 chars


def _answered(method: str, name: Any, rid: Any = 1, **outcome: Any) -> Any:
    """An inner app whose request was ``method`` (``name`` its tool) and whose answer the
    response side read as ``outcome``."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        ctx = get_context(scope)
        ctx.modern = True
        ctx.request_id = rid
        params = {"name": name} if name is not None else {}
        ctx.rpc = Message({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        ctx.outcome = Outcome(**outcome)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _observe(middleware: ObserveMiddleware, app: Any) -> None:
    middleware.app.app = app
    await _call(middleware)


def _listing(rid: Any, *names: str) -> bytes:
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})


async def test_names_answered_is_error_never_take_label_slots() -> None:
    """Many SDK servers answer a call of a tool they do not have with ``isError: true``: such a
    call proves nothing, and a caller inventing names must not push the real tools out."""
    metrics = Metrics()
    middleware = ObserveMiddleware(_Switch(), route=ROUTE, metrics=metrics, max_tool_names=3)
    for i in range(10):
        await _observe(
            middleware, _answered("tools/call", f"made-up-{i}", completed=True, tool_error=True)
        )
    await _observe(middleware, _answered("tools/call", "real", completed=True))
    assert _operations(metrics, **_labels("tools/call", OTHER, "tool_error")) == 10
    assert _operations(metrics, **_labels("tools/call", "real", "")) == 1
    # An input_required round is not a result either.
    await _observe(middleware, _answered("tools/call", "asks", input_required=True))
    assert _operations(metrics, **_labels("tools/call", OTHER, "")) == 1


async def test_a_listed_tool_gets_its_label_even_when_its_calls_fail() -> None:
    metrics = Metrics()
    middleware = ObserveMiddleware(_Switch(), route=ROUTE, metrics=metrics, max_tool_names=3)
    failing = _answered("tools/call", "fails", completed=True, tool_error=True)
    await _observe(middleware, failing)  # not known yet (and what it records is memoised)
    assert _operations(metrics, **_labels("tools/call", OTHER, "tool_error")) == 1
    # A listing for another request's id is not this request's answer: nothing learned.
    await _observe(middleware, _answered("tools/list", None, rid=5, listing=_listing(6, "fails")))
    await _observe(middleware, failing)
    assert _operations(metrics, **_labels("tools/call", OTHER, "tool_error")) == 2
    await _observe(
        middleware, _answered("tools/list", None, rid=7, listing=_listing(7, "fails", "other"))
    )
    await _observe(middleware, failing)
    assert _operations(metrics, **_labels("tools/call", "fails", "tool_error")) == 1
    # As an SSE event's data (text); past the cap of three names, the rest stay _OTHER.
    listing = _listing("s", "third", "fourth").decode()
    await _observe(middleware, _answered("tools/list", None, rid="s", listing=listing))
    for name in ("third", "fourth"):
        await _observe(middleware, _answered("tools/call", name, completed=True))
    assert _operations(metrics, **_labels("tools/call", "third", "")) == 1
    assert _operations(metrics, **_labels("tools/call", OTHER, "")) == 1  # "fourth"


async def test_control_characters_never_reach_the_exposition() -> None:
    metrics = Metrics()
    middleware = ObserveMiddleware(_Switch(), route=ROUTE, metrics=metrics)
    names = ["bell\x07", "esc\x1b[31mred", "cr\rlf\n", "nul\x00", "rtl\u202eoverride", "del\x7f"]
    await _observe(middleware, _answered("tools/list", None, rid=1, listing=_listing(1, *names)))
    for name in names:
        await _observe(middleware, _answered("tools/call", name, completed=True))
        await _observe(middleware, _answered("tools/call", name, completed=True, tool_error=True))
    text = generate_latest(metrics.registry).decode()
    assert not [c for c in text if not c.isprintable() and c != "\n"], "unprintable in /metrics"
    assert _operations(metrics, **_labels("tools/call", OTHER, "")) == len(names)
    await _observe(middleware, _answered("tools/call", "plain name", completed=True))
    assert _operations(metrics, **_labels("tools/call", "plain name", "")) == 1
