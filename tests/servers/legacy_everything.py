"""A 2025-era ("legacy") MCP conformance fixture, built with FastMCP from `mcp==1.30.0`.

It offers the conformance suite's SEP-2322 (multi round-trip, MRTR) fixtures, but implements
them the way a server written before 2026-07-28 has to: every question is a live
server->client JSON-RPC request sent in the middle of the call (`elicitation/create`,
`sampling/createMessage`, `roots/list`), on the SSE stream of the POST that carries the
call, and the call resumes when the client POSTs the answer on the same session. It never
returns an InputRequiredResult and has no requestState; its "state" is the suspended
handler. A gateway that bridges 2026-07-28 clients to this server has to turn those live
requests into InputRequiredResults and feed the retries' inputResponses back as answers.

Run it in an isolated environment (the project's own venv has mcp 2.x):

    uv run --isolated --no-project --with 'mcp==1.30.0' \\
        python tests/servers/legacy_everything.py --port 3010 [--host 127.0.0.1] \\
        [--event-store] [--log FILE] [--roots-stream request|standalone] \\
        [--multiple-inputs concurrent|sequential]

Spoken protocol: 2025-era Streamable HTTP only (initialize, `Mcp-Session-Id`, SSE, GET
resume, DELETE); versions 2024-11-05 ... 2025-11-25. A 2026-07-28 request (no session) is
answered `400 {"code":-32600,"message":"Bad Request: Missing session ID"}`.

Fixtures (see tests/conformance/LEGACY_MRTR_SCENARIOS.md for what each scenario checks):

- MRTR, the old way: tools `test_input_required_result_elicitation`, `_sampling`,
  `_list_roots`, `_request_state`, `_multiple_inputs`, `_multi_round`, `_tampered_state`,
  `_capabilities`, and the prompt `test_input_required_result_prompt`;
- 2025-11-25 scenarios: `test_simple_text`, `test_sampling`, `test_elicitation`,
  `test_elicitation_sep1034_defaults`, `test_elicitation_sep1330_enums`,
  `test_reconnection` (SSE polling, needs --event-store), `test_error_handling`, and the
  prompt `test_simple_prompt`.

Options:

- `--event-store`: keep every outgoing SSE event in memory (`MemoryEventStore`) so a
  client can resume a dropped stream with `GET` + `Last-Event-ID`; POST streams then start
  with a priming event and carry `id:` lines (`retry:` is `--retry-ms`). mcp 1.x ships
  only the EventStore interface. Stream ids are the JSON-RPC request ids, NOT scoped to the
  session (an SDK property): two sessions that both use request id 2 share stream "2", so a
  client resuming one of them could be replayed the other's events. Clients of this fixture
  (a gateway) should use request ids that are unique across sessions.
- `--log FILE`: one JSON line per incoming JSON-RPC message (requests, notifications, and
  the client's responses to the server's own requests), plus one line per GET/DELETE.
- `--roots-stream`: where `roots/list` goes. `request` (default) sends it, like the
  elicitation and sampling requests, on the SSE stream of the POST whose handler asks.
  `standalone` uses the SDK's plain `ctx.session.list_roots()`, which in mcp 1.30 takes no
  related request id, so the request goes to the session's standalone GET stream instead
  (and is never delivered live if the client has no GET stream open).
- `--multiple-inputs`: how `test_input_required_result_multiple_inputs` asks its three
  questions. `concurrent` (default) sends all three at once (asyncio.gather), the only way
  a legacy server can have three questions outstanding together, as the scenario's single
  InputRequiredResult does. `sequential` asks them one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import sys
import time
import uuid
from typing import IO, Any

import uvicorn
from body_replay import read_body, replaying
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.prompts.base import UserMessage
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    ClientCapabilities,
    CreateMessageResult,
    ElicitationCapability,
    JSONRPCMessage,
    ListRootsRequest,
    ListRootsResult,
    SamplingCapability,
    SamplingMessage,
    ServerRequest,
    TextContent,
)
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

SERVER_NAME = "mcp-conformance-test-server"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

log = logging.getLogger("legacy_everything")


# --------------------------------------------------------------------------------------
# Resumability: mcp 1.x defines EventStore but ships no implementation.
# --------------------------------------------------------------------------------------


class MemoryEventStore(EventStore):
    """Keeps the most recent `capacity` SSE events so a client can resume with Last-Event-ID.

    `store_event` is called for every message the server sends on a stream (whether or not
    a client is connected to it) and, with message None, for each stream's priming event.
    `replay_events_after` sends, in order, the stored messages of the same stream that came
    after the given event id, and returns that stream id (None for an unknown id, which the
    SDK answers with an empty stream).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._events: collections.OrderedDict[str, tuple[str, JSONRPCMessage | None]] = (
            collections.OrderedDict()
        )
        self._capacity = capacity

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = uuid.uuid4().hex
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self._capacity:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (sid, message) in list(self._events.items()):
            if event_id == last_event_id:
                after = True
                continue
            # Priming events carry no message: nothing to replay.
            if after and sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


# --------------------------------------------------------------------------------------
# Request log: one JSON line per incoming JSON-RPC message.
# --------------------------------------------------------------------------------------


class RequestLog:
    """Pure ASGI middleware that logs what reaches the server, before the SDK sees it.

    Each JSON-RPC message in a POST body gives one line with `kind` = request /
    notification / response / error (the last two are the client's answers to this
    server's own requests), its `id`, `method`, tool/prompt `name`, resource `uri`, and the
    whole `message`. GET and DELETE give one line with `kind` = "http". Every line carries
    `seq`, `ts`, `http_method`, `session_id`, `protocol_version` and `last_event_id` (the
    HTTP headers as received).
    """

    def __init__(self, app: ASGIApp, sink: IO[str]) -> None:
        self.app = app
        self.sink = sink
        self.seq = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        common = {
            "http_method": scope["method"],
            "path": scope["path"],
            "session_id": headers.get("mcp-session-id"),
            "protocol_version": headers.get("mcp-protocol-version"),
            "last_event_id": headers.get("last-event-id"),
        }
        if scope["method"] != "POST":
            self._write({**common, "kind": "http"})
            await self.app(scope, receive, send)
            return

        body, whole = await read_body(receive)
        if not whole:
            return
        for entry in describe_body(body):
            self._write({**common, **entry})

        await self.app(scope, replaying(body, receive), send)

    def _write(self, entry: dict[str, Any]) -> None:
        self.seq += 1
        entry = {"seq": self.seq, "ts": time.time(), **entry}
        self.sink.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
        self.sink.flush()


def describe_body(body: bytes) -> list[dict[str, Any]]:
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return [{"kind": "invalid", "raw": body[:2000].decode("utf-8", "replace")}]
    messages = parsed if isinstance(parsed, list) else [parsed]
    return [describe_message(message) for message in messages]


def describe_message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        return {"kind": "invalid", "message": message}
    if "method" in message:
        kind = "request" if "id" in message else "notification"
    elif "error" in message:
        kind = "error"
    elif "result" in message:
        kind = "response"
    else:
        kind = "invalid"
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    return {
        "kind": kind,
        "id": message.get("id"),
        "method": message.get("method"),
        "name": params.get("name"),
        "uri": params.get("uri"),
        "message": message,
    }


# --------------------------------------------------------------------------------------
# Asking the client, the 2025 way: live server->client requests on the call's stream.
# --------------------------------------------------------------------------------------


class Options:
    roots_stream: str = "request"  # "request" | "standalone"
    multiple_inputs: str = "concurrent"  # "concurrent" | "sequential"


options = Options()


# FastMCP puts the class name in requestedSchema.title. That title is the only naming
# hint a legacy elicitation carries, so these names are deliberately neutral: none of them
# maps onto the scenarios' inputRequests keys (user_name, confirm, step1, ...).
class NameForm(BaseModel):
    name: str = Field(description="Your name")


class ConfirmForm(BaseModel):
    ok: bool = Field(description="Confirm")


class ColorForm(BaseModel):
    color: str = Field(description="Your favorite color")


class ContextForm(BaseModel):
    context: str = Field(description="Context for the prompt")


async def ask_llm(ctx: Context, text: str, max_tokens: int) -> CreateMessageResult:
    """sampling/createMessage on this call's stream (FastMCP 1.x has no ctx.sample)."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    result = await ctx.session.create_message(
        messages=[message], max_tokens=max_tokens, related_request_id=ctx.request_id
    )
    assert isinstance(result, CreateMessageResult)
    return result


async def ask_roots(ctx: Context) -> ListRootsResult:
    """roots/list: on this call's stream, or (--roots-stream standalone) the SDK's way."""
    if options.roots_stream == "standalone":
        # mcp 1.30's list_roots() sends no related request id: the request is routed to
        # the standalone GET stream, not to the stream of the POST that is waiting.
        return await ctx.session.list_roots()
    return await ctx.session.send_request(
        ServerRequest(ListRootsRequest()),
        ListRootsResult,
        metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
    )


def sampled_text(result: CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, TextContent) else f"<{content.type}>"


def root_uris(result: ListRootsResult) -> str:
    return ", ".join(str(root.uri) for root in result.roots) or "none"


def client_declares(ctx: Context, capability: ClientCapabilities) -> bool:
    """What the client declared in `initialize` (the only place a 2025 client says it)."""
    return ctx.session.check_client_capability(capability)


SAMPLING = ClientCapabilities(sampling=SamplingCapability())
ELICITATION = ClientCapabilities(elicitation=ElicitationCapability())


# --------------------------------------------------------------------------------------
# The MRTR fixtures, the old way.
# --------------------------------------------------------------------------------------


async def test_input_required_result_elicitation(ctx: Context) -> str:
    """Asks the user's name (elicitation/create, live), then greets them."""
    answer = await ctx.elicit("What is your name?", NameForm)
    if answer.action == "accept":
        return f"Hello, {answer.data.name}!"
    return f"Hello, stranger! (elicitation {answer.action})"


async def test_input_required_result_sampling(ctx: Context) -> str:
    """Asks the client's model for the capital of France (sampling/createMessage, live)."""
    result = await ask_llm(ctx, "What is the capital of France?", max_tokens=100)
    return f"Model said: {sampled_text(result)}"


async def test_input_required_result_list_roots(ctx: Context) -> str:
    """Asks for the client's roots (roots/list, live) and names them."""
    result = await ask_roots(ctx)
    return f"Client exposed {len(result.roots)} root(s): {root_uris(result)}"


async def test_input_required_result_request_state(ctx: Context) -> str:
    """Asks for a confirmation; the continuation lives in this suspended handler.

    A 2025 server has no requestState: what a 2026 server would round-trip in it is here
    the handler's own stack, so reaching the return proves the state survived the question.
    """
    round_trip_marker = uuid.uuid4().hex[:8]  # only this invocation knows it
    answer = await ctx.elicit("Please confirm", ConfirmForm)
    ok = answer.data.ok if answer.action == "accept" else None
    return f"state-ok: confirmation received (ok={ok}, continuation {round_trip_marker})"


async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    """Asks for a name, a model greeting and the roots.

    Concurrently by default: the three requests are all outstanding at once, which is the
    closest a live-request server gets to the scenario's single InputRequiredResult holding
    three inputRequests. With --multiple-inputs sequential each waits for the previous one.
    """
    if options.multiple_inputs == "sequential":
        name = await ctx.elicit("What is your name?", NameForm)
        greeting = await ask_llm(ctx, "Generate a greeting", max_tokens=50)
        roots = await ask_roots(ctx)
    else:
        name, greeting, roots = await asyncio.gather(
            ctx.elicit("What is your name?", NameForm),
            ask_llm(ctx, "Generate a greeting", max_tokens=50),
            ask_roots(ctx),
        )
    who = name.data.name if name.action == "accept" else f"({name.action})"
    return (
        f"All inputs received: name={who}, greeting={sampled_text(greeting)}, "
        f"roots={root_uris(roots)}"
    )


async def test_input_required_result_multi_round(ctx: Context) -> str:
    """Two questions, the second asked only after the first is answered."""
    step1 = await ctx.elicit("Step 1: What is your name?", NameForm)
    name = step1.data.name if step1.action == "accept" else "someone"
    step2 = await ctx.elicit("Step 2: What is your favorite color?", ColorForm)
    color = step2.data.color if step2.action == "accept" else "nothing"
    return f"{name} likes {color}."


async def test_input_required_result_tampered_state(ctx: Context) -> str:
    """Asks for a confirmation. A legacy server has no requestState to protect.

    Tamper detection is the job of whatever mints requestState for it (a gateway).
    """
    answer = await ctx.elicit("Please confirm", ConfirmForm)
    return f"state-ok: confirmed={answer.data.ok if answer.action == 'accept' else None}"


async def test_input_required_result_capabilities(ctx: Context) -> str:
    """Asks only what the session's client declared in initialize: sampling and/or elicitation."""
    asks: dict[str, Any] = {}
    if client_declares(ctx, SAMPLING):
        asks["sampling"] = ask_llm(ctx, "Say hello", max_tokens=50)
    if client_declares(ctx, ELICITATION):
        asks["elicitation"] = ctx.elicit("What is your name?", NameForm)
    if not asks:
        return "Client declared neither sampling nor elicitation: nothing asked."
    answers = await asyncio.gather(*asks.values())
    return "Asked via: " + ", ".join(
        f"{kind} ({getattr(answer, 'action', 'answered')})"
        for kind, answer in zip(asks, answers, strict=True)
    )


async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage]:
    """MRTR on prompts/get, the old way: asks for context while the prompt renders."""
    answer = await ctx.elicit("What context should the prompt use?", ContextForm)
    context = answer.data.context if answer.action == "accept" else "?"
    return [UserMessage(f"Use the following context: {context}")]


# --------------------------------------------------------------------------------------
# 2025-11-25 scenario fixtures.
# --------------------------------------------------------------------------------------


def test_simple_text() -> str:
    """Returns one text block."""
    return "This is a simple text response for testing."


def test_error_handling() -> str:
    """Always fails; FastMCP turns the exception into an isError result."""
    raise RuntimeError("This tool intentionally returns an error for testing")


async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's LLM (sampling/createMessage on the call's stream)."""
    if not client_declares(ctx, SAMPLING):
        raise ValueError("Client does not support sampling")
    result = await ask_llm(ctx, prompt, max_tokens=100)
    return f"LLM response: {sampled_text(result)}"


class UserInfo(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


def _describe(label: str, answer: Any) -> str:
    content = answer.data.model_dump_json() if answer.action == "accept" else "{}"
    return f"{label}: action={answer.action}, content={content}"


async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user (elicitation/create on the call's stream)."""
    if not client_declares(ctx, ELICITATION):
        raise ValueError("Client does not support elicitation")
    return _describe("User response", await ctx.elicit(message, UserInfo))


class Sep1034Defaults(BaseModel):
    """Every primitive type with a default (SEP-1034)."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation whose schema gives a default for every primitive type."""
    answer = await ctx.elicit("Please provide user information", Sep1034Defaults)
    return _describe("Elicitation completed", answer)


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


class Sep1330Enums(BaseModel):
    """The five enum shapes of SEP-1330."""

    untitledSingle: str = Field(
        description="Untitled single-select",
        json_schema_extra={"enum": ["option1", "option2", "option3"]},
    )
    titledSingle: str = Field(
        description="Titled single-select",
        json_schema_extra={
            "oneOf": _titled(
                ("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")
            )
        },
    )
    legacyEnum: str = Field(
        description="Legacy titled enum",
        json_schema_extra={
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
    )
    untitledMulti: list[str] = Field(
        description="Untitled multi-select",
        json_schema_extra={"items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    )
    titledMulti: list[str] = Field(
        description="Titled multi-select",
        json_schema_extra={
            "items": {
                "anyOf": _titled(
                    ("value1", "First Choice"),
                    ("value2", "Second Choice"),
                    ("value3", "Third Choice"),
                )
            }
        },
    )


async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation whose schema has every SEP-1330 enum variant."""
    answer = await ctx.elicit("Please select options", Sep1330Enums)
    return _describe("Elicitation completed", answer)


async def test_reconnection(ctx: Context) -> str:
    """Closes its own SSE stream mid-call (SEP-1699); the result is replayed on resume."""
    await asyncio.sleep(0.05)
    await ctx.close_sse_stream()  # a no-op without --event-store
    await asyncio.sleep(0.3)  # the client reconnects after the priming event's retry
    return "Reconnection test completed"


def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage("This is a simple prompt for testing.")]


async def test_missing_capability(ctx: Context) -> str:
    """Needs the client's model: asks it (sampling/createMessage, live) without first checking
    what the client declared, as many 2025-era servers do. A 2026-07-28 client that did not
    declare sampling must get -32021 instead (from whoever bridges the call)."""
    result = await ask_llm(ctx, "Say hi", max_tokens=10)
    return f"sampling declared: {sampled_text(result)}"


TOOLS = (
    test_input_required_result_elicitation,
    test_input_required_result_sampling,
    test_input_required_result_list_roots,
    test_input_required_result_request_state,
    test_input_required_result_multiple_inputs,
    test_input_required_result_multi_round,
    test_input_required_result_tampered_state,
    test_input_required_result_capabilities,
    test_simple_text,
    test_error_handling,
    test_sampling,
    test_elicitation,
    test_elicitation_sep1034_defaults,
    test_elicitation_sep1330_enums,
    test_reconnection,
    test_missing_capability,
)
PROMPTS = (test_input_required_result_prompt, test_simple_prompt)


# --------------------------------------------------------------------------------------


def build_server(
    host: str,
    *,
    event_store: EventStore | None,
    retry_ms: int | None,
    session_idle_timeout: float | None,
    log_level: str,
) -> FastMCP:
    # DNS-rebinding protection always on: Host must be a loopback name (any port) or the
    # bind host itself; a foreign Host gets 421 and a foreign Origin 403.
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if host not in LOOPBACK_HOSTS:
        hosts.append(f"{host}:*")
        origins.append(f"http://{host}:*")
    server = FastMCP(
        SERVER_NAME,
        event_store=event_store,
        retry_interval=retry_ms if event_store is not None else None,
        host=host,
        session_idle_timeout=session_idle_timeout,
        log_level=log_level,  # type: ignore[arg-type]
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        ),
    )
    for fn in TOOLS:
        server.tool()(fn)
    for fn in PROMPTS:
        server.prompt()(fn)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--event-store", action="store_true", help="in-memory SSE event store")
    parser.add_argument("--retry-ms", type=int, default=100, help="SSE retry hint (event store)")
    parser.add_argument("--log", metavar="FILE", help="JSON line per incoming JSON-RPC message")
    parser.add_argument("--roots-stream", choices=("request", "standalone"), default="request")
    parser.add_argument(
        "--multiple-inputs", choices=("concurrent", "sequential"), default="concurrent"
    )
    parser.add_argument(
        "--session-idle-timeout",
        type=float,
        default=1800.0,
        help="seconds a session may have nothing in flight before it is closed (0: never)",
    )
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)

    options.roots_stream = args.roots_stream
    options.multiple_inputs = args.multiple_inputs
    level = args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    server = build_server(
        args.host,
        event_store=MemoryEventStore() if args.event_store else None,
        retry_ms=args.retry_ms,
        session_idle_timeout=args.session_idle_timeout or None,
        log_level=level,
    )
    app: ASGIApp = server.streamable_http_app()
    sink = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    if sink is not None:
        app = RequestLog(app, sink)
    log.warning(
        "legacy fixture %s (mcp 1.30) on http://%s:%d/mcp event_store=%s roots=%s multiple=%s",
        SERVER_NAME,
        args.host,
        args.port,
        args.event_store,
        args.roots_stream,
        args.multiple_inputs,
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=level.lower())
    finally:
        if sink is not None:
            sink.close()


if __name__ == "__main__":
    sys.exit(main())
