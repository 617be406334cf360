"""A small MCP upstream whose tool needs three rounds of elicitation (2026-07-28 MRTR).

    python tests/servers/mrtr_upstream.py --port N [--host 127.0.0.1] (--keys HEX | --ephemeral)

Built with the published SDK's `MCPServer`, which seals its own `requestState`:

* `--keys HEX`: with this shared secret, so any process started with the same key opens the state
  of any other (what several upstream replicas behind one route need);
* `--ephemeral`: with the SDK default, a random key per process, so a retry that reaches another
  process is rejected (`-32602 Invalid or expired requestState`). A gateway in front needs
  endpoint affinity for that.

Tool `survey(topic)`: round 1 asks q1, the retry with its answer asks q2, then q3, then it
completes with the three answers and the instances (`--instance`, default host:port) that ran
each step, e.g. `"ops: red, 42, yes | served by 127.0.0.1:4001 x4"`.

Tool `chain(marker, rounds)`: asks one question per round, `rounds` times, then completes with
how many it was asked (rate-limit tests: how many upstream calls one budget unit buys).

`--growable` adds tool `grow(name)`: a new tool `name` (answering "grown"), and a tools
list-changed event on every listen stream.

`--list-ttl-ms N` marks `tools/list` results `cacheScope: "public"`, `ttlMs: N` (edge-cache tests).

`GET /stats` answers what reached this process: `{"instance", "posts", "calls": {tool: n},
"methods": {method: n}, "retries": n, "hosts": {Host header: n}, "markers": {marker: n}}`
(`retries`: tools/call carrying a requestState; `markers`: tools/call by their `marker` argument),
so tests can prove that a request never arrived, and count their own.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
from typing import Any

import uvicorn
from body_replay import read_body, replaying
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from starlette.types import ASGIApp, Receive, Scope, Send

SERVER_NAME = "mcp-edge-mrtr"  # the SDK binds sealed state to it (audience): same on every process
QUESTIONS = ("Favourite colour?", "Lucky number?", "Ship it?")


def ask(step: int) -> ElicitRequest:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    return ElicitRequest(
        params=ElicitRequestFormParams(message=QUESTIONS[step], requested_schema=schema)
    )


def build_server(
    instance: str,
    security: RequestStateSecurity,
    list_ttl_ms: int = 0,
    growable: bool = False,
) -> MCPServer:
    hints = {"tools/list": CacheHint(ttl_ms=list_ttl_ms, scope="public")} if list_ttl_ms else None
    server: MCPServer = MCPServer(SERVER_NAME, request_state_security=security, cache_hints=hints)

    @server.tool()
    async def survey(topic: str, ctx: Context) -> str | InputRequiredResult:
        """Asks three questions, one per round, then returns the answers."""
        state: dict[str, Any] = json.loads(ctx.request_state) if ctx.request_state else {}
        answers: list[str] = state.get("answers", [])
        served: list[str] = [*state.get("served", []), instance]
        step = len(answers)
        reply = (ctx.input_responses or {}).get(f"q{step + 1}")
        if isinstance(reply, ElicitResult) and reply.action == "accept" and reply.content:
            answers = [*answers, str(reply.content.get("answer"))]
            step += 1
        if step == len(QUESTIONS):
            by = ", ".join(
                f"{name} x{count}" for name, count in collections.Counter(served).items()
            )
            return f"{topic}: {', '.join(answers)} | served by {by}"
        return InputRequiredResult(
            input_requests={f"q{step + 1}": ask(step)},
            request_state=json.dumps({"answers": answers, "served": served}),
        )

    @server.tool()
    async def chain(marker: str, rounds: int, ctx: Context) -> str | InputRequiredResult:
        """Asks `rounds` questions, one per round, then says how many were answered."""
        asked = int(ctx.request_state or 0)
        if asked >= rounds:
            return f"{marker}: {asked} rounds"
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
        question = ElicitRequest(
            params=ElicitRequestFormParams(message=f"Round {asked + 1}?", requested_schema=schema)
        )
        return InputRequiredResult(
            input_requests={f"r{asked + 1}": question}, request_state=str(asked + 1)
        )

    @server.tool()
    def whoami() -> str:
        """The instance name of this process."""
        return instance

    if growable:

        @server.tool()
        async def grow(name: str, ctx: Context) -> str:
            """Adds a tool called NAME (it answers "grown") and says the tool list changed."""

            def grown() -> str:
                return "grown"

            server.add_tool(grown, name=name)
            await ctx.notify_tools_changed()
            return f"added {name}"

    return server


class Stats:
    """Pure ASGI middleware counting what reaches the server; serves them on GET /stats."""

    def __init__(self, app: ASGIApp, instance: str) -> None:
        self.app = app
        self.instance = instance
        self.posts = 0
        self.retries = 0
        self.calls: collections.Counter[str] = collections.Counter()
        self.methods: collections.Counter[str] = collections.Counter()
        self.hosts: collections.Counter[str] = collections.Counter()
        self.markers: collections.Counter[str] = collections.Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == "/stats":
            stats = {
                "instance": self.instance,
                "posts": self.posts,
                "retries": self.retries,
                "calls": self.calls,
                "methods": self.methods,
                "hosts": self.hosts,
                "markers": self.markers,
            }
            body = json.dumps(stats).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, _ = await read_body(receive)
        self.posts += 1
        self.hosts[dict(scope["headers"]).get(b"host", b"").decode("latin-1")] += 1
        try:
            doc = json.loads(body)
            params = doc.get("params") or {}
            self.methods[str(doc.get("method"))] += 1
            if doc.get("method") == "tools/call":
                self.calls[str(params.get("name"))] += 1
                self.retries += "requestState" in params
                marker = (params.get("arguments") or {}).get("marker")
                if isinstance(marker, str):
                    self.markers[marker] += 1
        except (ValueError, AttributeError):
            pass
        await self.app(scope, replaying(body, receive), send)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--instance", help="name reported in results (default host:port)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--keys", help="shared request-state secret(s), hex, comma separated; first seals"
    )
    which.add_argument(
        "--ephemeral", action="store_true", help="a random request-state key per process"
    )
    parser.add_argument(
        "--list-ttl-ms",
        type=int,
        default=0,
        help="mark tools/list results cacheScope public with this ttlMs (default: no hint)",
    )
    parser.add_argument(
        "--growable", action="store_true", help="tool grow(name): adds a tool, tools list changes"
    )
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    instance = args.instance or f"{args.host}:{args.port}"
    if args.ephemeral:
        security = RequestStateSecurity.ephemeral()
    else:
        security = RequestStateSecurity(keys=[bytes.fromhex(k) for k in args.keys.split(",")])
    app = build_server(instance, security, args.list_ttl_ms, args.growable).streamable_http_app(
        json_response=True, host=args.host
    )
    # h11: httptools keeps trailing header whitespace, which the SDK's Mcp-Name check rejects.
    uvicorn.run(
        Stats(app, instance), host=args.host, port=args.port, http="h11", log_level=args.log_level
    )


if __name__ == "__main__":
    main()
