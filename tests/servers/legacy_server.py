"""A 2025-era MCP server: FastMCP from the published `mcp` SDK 1.x (exactly `mcp==1.30.0`).

It stands for the unmodified servers a gateway has to bridge to 2026-07-28 clients: an
`initialize` handshake, an `Mcp-Session-Id`, server->client requests (`elicitation/create`,
`sampling/createMessage`, `roots/list`, `ping`) pushed over SSE in the middle of a call, and
answers POSTed back separately. It must run in its own environment, never in this project's
(which has `mcp` 2.x):

    uv run --isolated --no-project --with 'mcp==1.30.0' \\
        python tests/servers/legacy_server.py --port N [options]

(`tests/support/legacy.py` builds that command line and starts the process for tests.)

Options:
  --host H             bind address (default 127.0.0.1)
  --name NAME          server name in serverInfo (default "legacy-fixture")
  --instance LABEL     label returned by `whoami` and `/stats` (default host:port)
  --event-store        in-memory EventStore (resumable streams: priming events, `id:` on every
                       event, GET + Last-Event-ID replay) with a 1000 ms `retry` hint
  --json-response      answer POSTs with application/json instead of SSE (server->client
                       requests tied to a call are then dropped: such a call never answers)
  --stateless          no sessions (no Mcp-Session-Id); an elicitation can never be answered
  --idle-timeout S     end a session after S seconds with no request in flight (SDK: 1800)
  --log FILE           append one JSON line per HTTP request that reaches the server
  --subscriptions      advertise `resources.subscribe` (FastMCP 1.x never does) and serve it:
                       `touch(uri)` sends `notifications/resources/updated` to every session
                       subscribed to `uri` (on each one's standalone stream)
  --list-delay-file F  while the file F exists, every `*/list` request waits the seconds F holds
                       before it is handled (a slow server, switched on and off by a test)

Tools: `add`, `whoami`, `book_table` (one form elicitation), `ask_model` (sampling),
`show_roots` (roots/list), `roots_in_call` (roots/list tied to the call), `sample_plainly`
(sampling the SDK's plain way), `ask_later` (roots/list and ping sent between calls),
`three_questions` (three elicitations in a row), `versioned_question` (the question changes
after its first execution per key), `side_effect` (counts runs before asking),
`ping_then_ask` (server->client ping, then an elicitation), `progress_steps` (progress and
log notifications), `ask_then_progress` (an elicitation, then progress), `slow`, `url_consent` (URL-mode elicitation), `url_required` (raises the
-32042 URLElicitationRequiredError).
Prompts: `greeting(name)` (with completion for `name`), `briefing(topic)` (elicits an audience).
Resources: `static://hello`; template `secret://{name}` (elicits a pin); `big://{kib}` (that
many KiB of text: bench/answer_rss.py and tests/integration/test_answer_budget.py).

Where the SDK sends a server->client message (1.30, read from its sources and seen on the wire):
elicitation, sampling, progress and log messages carry the call's request id, so they travel
on that call's POST stream. `ctx.session.list_roots()` and `ctx.session.send_ping()` do NOT:
they go to the session's standalone GET stream, and with no GET stream open they are dropped
(stored, with an event store) while the tool waits for an answer that cannot come.

`GET /stats` answers JSON: instance, `methods` (JSON-RPC requests and notifications received,
per method), `responses` (client answers to server->client requests), `tools` (executions per
tool), `side_effects` / `versioned` (per-key counters), `sessions_initialized`, `deletes`,
`gets`, `resumes` (GETs with Last-Event-ID), `hosts` (Host headers seen), `later` (how each
`ask_later` request ended).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    Completion,
    ElicitRequestURLParams,
    JSONRPCMessage,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    SamplingMessage,
    ServerRequest,
    TextContent,
)
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

GREETING_NAMES = ("Ada", "Alan", "Alonzo", "Barbara", "Grace")


# ---- elicitation schemas -------------------------------------------------------------------


class Party(BaseModel):
    size: int


class Colour(BaseModel):
    colour: str


class Number(BaseModel):
    number: int


class Ship(BaseModel):
    ship: bool


class Answer(BaseModel):
    answer: str


class Confirm(BaseModel):
    confirm: bool


class Audience(BaseModel):
    audience: str


class Pin(BaseModel):
    pin: str


# ---- event store ---------------------------------------------------------------------------


class MemoryEventStore(EventStore):
    """The SDK's EventStore interface over a process-wide list (the SDK ships one only in its
    examples). Event ids are uuid4 strings; the stream id is what the SDK passes: the
    JSON-RPC request id of the POST (as a string), or `_GET_stream` for the standalone stream,
    shared by every session of the process exactly as in the SDK example."""

    def __init__(self, max_events: int = 10_000) -> None:
        self.events: collections.OrderedDict[str, tuple[str, JSONRPCMessage | None]] = (
            collections.OrderedDict()
        )
        self.max_events = max_events

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(uuid.uuid4())
        self.events[event_id] = (stream_id, message)
        while len(self.events) > self.max_events:
            self.events.popitem(last=False)
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        if last_event_id not in self.events:
            return None
        stream_id = self.events[last_event_id][0]
        after = False
        for event_id, (sid, message) in list(self.events.items()):
            if event_id == last_event_id:
                after = True
                continue
            if after and sid == stream_id and message is not None:  # priming events: no data
                await send_callback(EventMessage(message, event_id))
        return stream_id


# ---- counters ------------------------------------------------------------------------------


@dataclass
class Stats:
    instance: str
    methods: collections.Counter[str] = field(default_factory=collections.Counter)
    tools: collections.Counter[str] = field(default_factory=collections.Counter)
    side_effects: collections.Counter[str] = field(default_factory=collections.Counter)
    versioned: collections.Counter[str] = field(default_factory=collections.Counter)
    hosts: collections.Counter[str] = field(default_factory=collections.Counter)
    responses: int = 0
    sessions_initialized: int = 0
    deletes: int = 0
    gets: int = 0
    resumes: int = 0
    #: ``ask_later``: how each request sent between calls ended, by key.
    later: dict[str, str] = field(default_factory=dict)
    tasks: set[Any] = field(default_factory=set)

    def snapshot(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "methods": dict(self.methods),
            "responses": self.responses,
            "tools": dict(self.tools),
            "side_effects": dict(self.side_effects),
            "versioned": dict(self.versioned),
            "sessions_initialized": self.sessions_initialized,
            "deletes": self.deletes,
            "gets": self.gets,
            "resumes": self.resumes,
            "hosts": dict(self.hosts),
            "later": dict(self.later),
        }


# ---- the server ----------------------------------------------------------------------------


def build_server(args: argparse.Namespace, stats: Stats) -> FastMCP:
    # DNS-rebinding protection as the SDK enables it for a localhost bind, plus the bind
    # address itself: a gateway that rewrites Host to this upstream's host:port is accepted,
    # a foreign Host still gets 421 like any default 1.x server.
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", f"{args.host}:*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    mcp: FastMCP = FastMCP(
        args.name,
        event_store=MemoryEventStore() if args.event_store else None,
        retry_interval=1000 if args.event_store else None,
        host=args.host,
        port=args.port or 8000,  # unused over stdio
        json_response=args.json_response,
        stateless_http=args.stateless,
        session_idle_timeout=args.idle_timeout if args.idle_timeout else 30 * 60,
        transport_security=security,
        log_level="WARNING",
    )

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        stats.tools["add"] += 1
        return a + b

    @mcp.tool()
    def whoami() -> str:
        """The instance label of this process."""
        stats.tools["whoami"] += 1
        return stats.instance

    @mcp.tool()
    async def book_table(date: str, ctx: Context) -> str:
        """Books a table; asks for the party size."""
        stats.tools["book_table"] += 1
        answer = await ctx.elicit(f"How many people for {date}?", Party)
        if answer.action == "accept":
            return f"Booked {answer.data.size} on {date}"
        return f"Not booked ({answer.action})"

    @mcp.tool()
    async def ask_model(question: str, ctx: Context) -> str:
        """Asks the client's model (sampling/createMessage)."""
        stats.tools["ask_model"] += 1
        result = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=50,
            related_request_id=ctx.request_id,
        )
        text = result.content.text if isinstance(result.content, TextContent) else "?"
        return f"Model said: {text}"

    @mcp.tool()
    async def show_roots(ctx: Context) -> str:
        """Lists the client's roots the way the SDK does it (on the standalone GET stream)."""
        stats.tools["show_roots"] += 1
        result = await ctx.session.list_roots()
        return "Roots: " + ", ".join(str(root.uri) for root in result.roots)

    @mcp.tool()
    async def sample_plainly(question: str, ctx: Context) -> str:
        """Asks the client's model the way most 1.x servers do: ``create_message`` without a
        related request id, so the request goes to the standalone GET stream."""
        stats.tools["sample_plainly"] += 1
        result = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=50,
        )
        text = result.content.text if isinstance(result.content, TextContent) else "?"
        return f"Model said: {text}"

    @mcp.tool()
    async def ask_later(key: str, methods: list[str], ctx: Context) -> str:
        """Answers at once, then (0.3 s later, between calls) sends each of ``methods``
        (``roots/list``, ``ping``) on the standalone stream, the SDK's plain way; how each ended
        lands in /stats ``later["<key> <method>"]``."""
        stats.tools["ask_later"] += 1
        session = ctx.session

        async def later() -> None:
            await asyncio.sleep(0.3)
            for method in methods:
                try:
                    if method == "ping":
                        await session.send_ping()
                        outcome = "pong"
                    else:
                        result = await session.list_roots()
                        outcome = "roots: " + ", ".join(str(r.uri) for r in result.roots)
                except Exception as exc:  # the client's error answer, as the SDK raises it
                    error = getattr(exc, "error", None)
                    outcome = f"error {getattr(error, 'code', '?')}: {exc}"
                stats.later[f"{key} {method}"] = outcome

        stats.tasks.add(asyncio.ensure_future(later()))
        return "later"

    @mcp.tool()
    async def roots_in_call(ctx: Context) -> str:
        """Lists the client's roots with the request tied to this call (on its POST stream)."""
        stats.tools["roots_in_call"] += 1
        result = await ctx.session.send_request(
            ServerRequest(ListRootsRequest()),
            ListRootsResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
        return "Roots: " + ", ".join(str(root.uri) for root in result.roots)

    @mcp.tool()
    async def three_questions(topic: str, ctx: Context) -> str:
        """Asks three questions in a row (colour, number, ship)."""
        stats.tools["three_questions"] += 1
        answers: list[str] = []
        for schema, key, message in (
            (Colour, "colour", f"Favourite colour for {topic}?"),
            (Number, "number", f"Lucky number for {topic}?"),
            (Ship, "ship", f"Ship {topic}?"),
        ):
            reply = await ctx.elicit(message, schema)
            if reply.action != "accept":
                return f"{topic}: stopped at {key} ({reply.action})"
            answers.append(str(getattr(reply.data, key)))
        return f"{topic}: {', '.join(answers)}"

    @mcp.tool()
    async def big_after_question(kib: int, ctx: Context) -> str:
        """Asks whether to send, then answers ``kib`` KiB of text (at most 64 MiB)."""
        stats.tools["big_after_question"] += 1
        reply = await ctx.elicit(f"Send {kib} KiB?", Confirm)
        if reply.action != "accept" or not reply.data.confirm:
            return "not sent"
        return _big_text(min(kib, 64 * 1024))

    @mcp.tool()
    async def versioned_question(key: str, ctx: Context) -> str:
        """Asks 'Question v1 for KEY?' on its first execution for KEY, then always v2."""
        stats.tools["versioned_question"] += 1
        stats.versioned[key] += 1
        version = "v1" if stats.versioned[key] == 1 else "v2"
        reply = await ctx.elicit(f"Question {version} for {key}?", Answer)
        if reply.action != "accept":
            return f"{key}: {version} {reply.action}"
        return f"{key}: answered {version} with {reply.data.answer}"

    @mcp.tool()
    async def side_effect(key: str, ctx: Context) -> str:
        """Counts an execution for KEY (see /stats), then asks for a confirmation."""
        stats.tools["side_effect"] += 1
        stats.side_effects[key] += 1
        runs = stats.side_effects[key]
        reply = await ctx.elicit(f"Confirm the side effect for {key}?", Confirm)
        confirmed = reply.data.confirm if reply.action == "accept" else reply.action
        return f"{key}: confirmed={confirmed} runs={runs}"

    @mcp.tool()
    async def ping_then_ask(ctx: Context) -> str:
        """Pings the client (standalone GET stream), then asks for an answer (POST stream)."""
        stats.tools["ping_then_ask"] += 1
        await ctx.session.send_ping()
        reply = await ctx.elicit("Still there? Say something.", Answer)
        return reply.data.answer if reply.action == "accept" else f"no answer ({reply.action})"

    @mcp.tool()
    async def progress_steps(steps: int, ctx: Context) -> str:
        """Reports progress (when the call has a progressToken) and logs one line per step."""
        stats.tools["progress_steps"] += 1
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.info(f"step {step} of {steps}")
            await asyncio.sleep(0.05)
        return f"done {steps}"

    @mcp.tool()
    async def ask_then_progress(steps: int, ctx: Context) -> str:
        """Asks for a go-ahead, then reports progress (the token of the call's own request)."""
        stats.tools["ask_then_progress"] += 1
        reply = await ctx.elicit("Go ahead?", Confirm)
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await asyncio.sleep(0.05)
        return f"went ahead={reply.action == 'accept'} in {steps} steps"

    @mcp.tool()
    async def slow(seconds: float) -> str:
        """Sleeps, then answers."""
        stats.tools["slow"] += 1
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool()
    async def url_consent(ctx: Context) -> str:
        """URL-mode elicitation: asks the user to visit a URL (out of band)."""
        stats.tools["url_consent"] += 1
        elicitation_id = f"consent-{uuid.uuid4().hex[:8]}"
        reply = await ctx.elicit_url(
            "Please approve access in your browser.",
            f"https://consent.example/approve?id={elicitation_id}",
            elicitation_id,
        )
        if reply.action == "accept":
            await ctx.session.send_elicit_complete(
                elicitation_id, related_request_id=ctx.request_id
            )
        return f"URL consent: {reply.action}"

    @mcp.tool()
    async def url_required() -> str:
        """Fails with -32042: the client must complete a URL elicitation first."""
        stats.tools["url_required"] += 1
        raise UrlElicitationRequiredError(
            [
                ElicitRequestURLParams(
                    mode="url",
                    message="Authorization required",
                    url="https://consent.example/authorize",
                    elicitationId="auth-001",
                )
            ]
        )

    @mcp.prompt()
    def greeting(name: str) -> str:
        """Greets someone."""
        return f"Hello, {name}!"

    @mcp.prompt()
    async def briefing(topic: str, ctx: Context) -> str:
        """A briefing request; asks who the audience is."""
        reply = await ctx.elicit(f"Who is the briefing on {topic} for?", Audience)
        audience = reply.data.audience if reply.action == "accept" else "everyone"
        return f"Write a briefing on {topic} for {audience}."

    @mcp.resource("static://hello", mime_type="text/plain")
    def hello() -> str:
        return "hello"

    @mcp.resource("big://{kib}", mime_type="text/plain")
    def big(kib: str) -> str:
        """``kib`` KiB of text (at most 64 MiB), made once per size."""
        return _big_text(min(int(kib), 64 * 1024))

    @mcp.resource("secret://{name}", mime_type="text/plain")
    async def secret(name: str, ctx: Context) -> str:
        reply = await ctx.elicit(f"PIN for {name}?", Pin)
        if reply.action != "accept":
            return f"secret {name} stays locked ({reply.action})"
        return f"secret {name} unlocked with pin {reply.data.pin}"

    @mcp.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        if isinstance(ref, PromptReference) and ref.name == "greeting" and argument.name == "name":
            prefix = argument.value.lower()
            return Completion(values=[n for n in GREETING_NAMES if n.lower().startswith(prefix)])
        return None

    @mcp.custom_route("/stats", methods=["GET"])
    async def stats_route(request: Request) -> JSONResponse:
        return JSONResponse(stats.snapshot())

    if args.stdio:
        _add_stdio_tools(mcp, stats)
    if args.subscriptions:
        _add_subscriptions(mcp, stats)
    return mcp


def _add_subscriptions(mcp: FastMCP, stats: Stats) -> None:
    """resources/subscribe served, and advertised (FastMCP 1.x hard-codes `subscribe: false`)."""
    low = mcp._mcp_server
    subscribers: dict[str, set[Any]] = collections.defaultdict(set)
    plain = low.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        caps = plain(*args, **kwargs)
        if caps.resources is not None:
            caps.resources.subscribe = True
        return caps

    low.get_capabilities = get_capabilities  # type: ignore[method-assign]

    @low.subscribe_resource()
    async def subscribe(uri: Any) -> None:
        subscribers[str(uri)].add(low.request_context.session)

    @low.unsubscribe_resource()
    async def unsubscribe(uri: Any) -> None:
        subscribers[str(uri)].discard(low.request_context.session)

    @mcp.tool()
    async def touch(uri: str) -> int:
        """Tells every session subscribed to URI that it changed; answers how many it told."""
        stats.tools["touch"] += 1
        told = 0
        for session in list(subscribers[uri]):
            try:
                await session.send_resource_updated(uri)
                told += 1
            except Exception:  # a session that ended: forget it
                subscribers[uri].discard(session)
        return told


@functools.lru_cache(maxsize=4)
def _big_text(kib: int) -> str:
    return ("0123456789abcdef" * 64) * kib


def _add_stdio_tools(mcp: FastMCP, stats: Stats) -> None:
    """Over stdio there is no /stats route: the same facts, and a way to crash, as tools."""

    @mcp.tool()
    def stats_snapshot() -> str:
        """What reached this process (the /stats document of the HTTP modes), as JSON text."""
        return json.dumps(stats.snapshot(), sort_keys=True)

    @mcp.tool()
    def pid() -> int:
        """This process's id."""
        return os.getpid()

    @mcp.tool()
    async def crash_after_question(ctx: Context) -> str:
        """Asks for a confirmation, then exits the process without answering (a crash mid-call)."""
        stats.tools["crash_after_question"] += 1
        await ctx.elicit("Crash now?", Confirm)
        os._exit(3)


# ---- request log and counters (ASGI middleware) --------------------------------------------


LIST_METHODS = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
)


class Observe:
    """Pure ASGI middleware: counts what reaches the server and, with a sink, writes one JSON
    line per HTTP request as it arrives (before the server handles it)."""

    def __init__(
        self, app: ASGIApp, stats: Stats, sink: IO[str] | None, delay_file: str | None = None
    ) -> None:
        self.app = app
        self.stats = stats
        self.sink = sink
        self.delay_file = delay_file

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/stats":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        entry: dict[str, Any] = {
            "time": time.time(),
            "http_method": scope["method"],
            "path": scope["path"],
            "host": headers.get("host"),
            "session_id": headers.get("mcp-session-id"),
            "protocol_version": headers.get("mcp-protocol-version"),
            "last_event_id": headers.get("last-event-id"),
        }
        self.stats.hosts[headers.get("host", "")] += 1
        if scope["method"] == "GET":
            self.stats.gets += 1
            self.stats.resumes += "last-event-id" in headers
        elif scope["method"] == "DELETE":
            self.stats.deletes += 1
        if scope["method"] != "POST":
            self._write(entry)
            await self.app(scope, receive, send)
            return

        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        doc = self._describe(body, entry)
        self._write(entry)
        if isinstance(doc, dict) and doc.get("method") in LIST_METHODS and self._list_delay():
            await asyncio.sleep(self._list_delay())

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        send_to = send
        if isinstance(doc, dict) and doc.get("method") == "initialize":

            async def watch(message: Message) -> None:
                if message["type"] == "http.response.start" and message["status"] == 200:
                    self.stats.sessions_initialized += 1
                await send(message)

            send_to = watch
        await self.app(scope, replay, send_to)

    def _list_delay(self) -> float:
        if self.delay_file is None:
            return 0.0
        try:
            with open(self.delay_file, encoding="utf-8") as f:
                return min(float(f.read().strip() or 0), 60.0)
        except (OSError, ValueError):
            return 0.0

    def _describe(self, body: bytes, entry: dict[str, Any]) -> Any:
        try:
            doc = json.loads(body)
        except ValueError:
            entry["unparsable_body"] = True
            return None
        if not isinstance(doc, dict):
            entry["body"] = doc
            return doc
        entry["id"] = doc.get("id")
        if "method" in doc:
            entry["method"] = doc["method"]
            entry["params"] = doc.get("params")
            self.stats.methods[str(doc["method"])] += 1
        else:
            entry["result"] = doc.get("result")
            if "error" in doc:
                entry["error"] = doc["error"]
            self.stats.responses += 1
        return doc

    def _write(self, entry: dict[str, Any]) -> None:
        if self.sink is not None:
            self.sink.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
            self.sink.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="HTTP port (required unless --stdio)")
    parser.add_argument(
        "--stdio", action="store_true", help="speak over stdin/stdout instead of HTTP"
    )
    parser.add_argument("--name", default="legacy-fixture")
    parser.add_argument("--instance", help="label for whoami and /stats (default host:port)")
    parser.add_argument("--event-store", action="store_true", help="in-memory event store")
    parser.add_argument("--json-response", action="store_true", help="JSON answers, no SSE")
    parser.add_argument("--stateless", action="store_true", help="no sessions")
    parser.add_argument("--idle-timeout", type=float, help="session idle timeout in seconds")
    parser.add_argument("--log", help="append a JSON line per HTTP request to this file")
    parser.add_argument("--subscriptions", action="store_true", help="serve resources/subscribe")
    parser.add_argument("--list-delay-file", help="slow */list down while this file exists")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if args.stdio:
        stats = Stats(instance=args.instance or f"stdio-{os.getpid()}")
        server = build_server(args, stats)
        print(f"legacy fixture {stats.instance} on stdio", file=sys.stderr)
        server.run("stdio")  # messages on stdin/stdout, logs on stderr
        return
    if args.port is None:
        parser.error("--port is required (or --stdio)")
    stats = Stats(instance=args.instance or f"{args.host}:{args.port}")
    sink: IO[str] | None = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    app = build_server(args, stats).streamable_http_app()
    print(f"legacy fixture {stats.instance} on {args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(
        Observe(app, stats, sink, args.list_delay_file),
        host=args.host,
        port=args.port,
        http="h11",
        log_level=args.log_level.lower(),
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
