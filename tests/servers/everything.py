"""An "everything" MCP server for tests: every fixture the conformance server scenarios use.

Built with the published SDK's high-level `MCPServer`, served over Streamable HTTP on
`/mcp`. One endpoint serves both wires: the 2026-07-28 stateless exchange (chosen by the
`MCP-Protocol-Version` header) and the 2025-era session transport.

    python tests/servers/everything.py --port 3001 [--host 127.0.0.1] [--json-response]

`requestState` is sealed by the SDK with a fixed, shared key and a fixed server name (the
seal's audience), so a flow started on one process can be finished on another process of
this fixture: that is what several gateway replicas in front of several upstreams need.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

import uvicorn
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import (
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    RequestStateSecurity,
    Resolve,
)
from mcp.server.mcpserver.prompts.base import Prompt, UserMessage
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    JSONRPCMessage,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field, JsonValue

log = logging.getLogger("everything")

SERVER_NAME = "mcp-edge-everything"
# Fixed on purpose: every process of this fixture must seal and open the same state.
# 32+ bytes is what RequestStateSecurity asks for. Test-only, obviously not a secret.
STATE_KEY = b"mcp-edge-tests/everything/request-state-key/v1"

# A 1x1 PNG and a tiny WAV header, small enough to inline.
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WAV_TINY = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="


# --------------------------------------------------------------------------------------
# SSE resumability (2025-era polling scenario): a bounded in-memory event store.
# --------------------------------------------------------------------------------------


class MemoryEventStore(EventStore):
    """Keeps the most recent events in memory so a client can resume with Last-Event-ID."""

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
            # Priming events carry no message and are not replayed.
            if after and sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


# --------------------------------------------------------------------------------------
# Small builders for embedded input requests (2026-07-28 InputRequiredResult).
# --------------------------------------------------------------------------------------


def ask_form(message: str, **properties: str) -> ElicitRequest:
    """A form elicitation; each keyword names a required field and gives its JSON type."""
    schema = {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def ask_llm(text: str, max_tokens: int = 100) -> CreateMessageRequest:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    return CreateMessageRequest(
        params=CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


def form_value(answer: InputResponse | None, field: str) -> Any:
    """The named field of an accepted form answer, or None for anything else."""
    if isinstance(answer, ElicitResult) and answer.action == "accept" and answer.content:
        return answer.content.get(field)
    return None


def answers(ctx: Context) -> Mapping[str, InputResponse]:
    return ctx.input_responses or {}


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


def _json_schema_2020_12_tool() -> Tool:
    """A tool whose inputSchema uses the 2020-12 keywords the conformance suite looks for.

    The schema is attached after building the tool from a function, because a Python
    signature cannot express `if`/`then`/`else`, `$anchor` or `allOf`.
    """

    def json_schema_2020_12_tool() -> str:
        """Lists a JSON Schema 2020-12 inputSchema unchanged in tools/list."""
        return "json_schema_2020_12_tool"

    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": False,
    }
    tool = Tool.from_function(json_schema_2020_12_tool)
    return tool.model_copy(update={"parameters": schema})


server: MCPServer = MCPServer(
    SERVER_NAME,
    version="1.0.0",
    request_state_security=RequestStateSecurity(keys=[STATE_KEY]),
    tools=[_json_schema_2020_12_tool()],
)


# ---- plain content tools ------------------------------------------------------------


@server.tool()
def test_simple_text() -> str:
    """Returns one text block."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[ImageContent]:
    """Returns one image block."""
    return [ImageContent(type="image", data=PNG_1X1, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[AudioContent]:
    """Returns one audio block."""
    return [AudioContent(type="audio", data=WAV_TINY, mime_type="audio/wav")]


def _text_resource(uri: str, text: str, mime_type: str = "text/plain") -> EmbeddedResource:
    contents = TextResourceContents(uri=uri, mime_type=mime_type, text=text)
    return EmbeddedResource(type="resource", resource=contents)


@server.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Returns one embedded text resource."""
    return [_text_resource("test://embedded-resource", "This is an embedded resource content.")]


@server.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Returns text, image and resource blocks together."""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG_1X1, mime_type="image/png"),
        _text_resource(
            "test://mixed-content-resource", '{"test":"data","value":123}', "application/json"
        ),
    ]


@server.tool()
def test_error_handling() -> str:
    """Always fails; the SDK turns the exception into an isError result."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool()
def test_x_mcp_header(
    region: Annotated[
        str,
        Field(
            description="Mirrored in the Mcp-Param-Region header",
            json_schema_extra={"x-mcp-header": "Region"},
        ),
    ] = "<none>",
) -> str:
    """An argument annotated with x-mcp-header: the client mirrors it into Mcp-Param-Region."""
    return f"region={region}"


# ---- notifications: logging and progress -------------------------------------------


async def _log_three_steps(ctx: Context) -> None:
    # ctx.info is deprecated with the logging capability in 2026-07-28, but the 2025
    # scenarios still exercise it; on 2026 the SDK only emits it when _meta asks for it.
    for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(step)  # pyright: ignore[reportDeprecated]
        await asyncio.sleep(0.05)


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Emits three log notifications while it runs."""
    await _log_three_steps(ctx)
    return "Tool with logging executed successfully"


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Same as test_tool_with_logging, under the name the stateless scenario probes."""
    await _log_three_steps(ctx)
    return "logged"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50, 100 and returns the progress token it was given."""
    for done in (0, 50, 100):
        await ctx.report_progress(progress=done, total=100, message=f"Completed step {done} of 100")
        if done < 100:
            await asyncio.sleep(0.05)
    meta: Mapping[str, Any] = ctx.request_context.meta or {}
    token = meta.get("progress_token", meta.get("progressToken", 0))
    return str(token)


# ---- 2025-era server-to-client requests (pushed mid-call on a session) ---------------


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's LLM on the live session (2025-era sampling)."""
    try:
        message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
        result = await ctx.session.create_message(  # pyright: ignore[reportDeprecated]
            messages=[message],
            max_tokens=100,
            # Tie the request to this call's stream: the standalone GET stream may not be open.
            related_request_id=ctx.request_id,
        )
    except Exception as exc:  # noqa: BLE001 - reported in the text, which the scenario reads
        return f"Sampling not supported or error: {exc}"
    text = result.content.text if result.content.type == "text" else "No response"
    return f"LLM response: {text}"


class UserResponse(BaseModel):
    response: str = Field(description="User's response")


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


def _titled(*pairs: tuple[str, str]) -> list[JsonValue]:
    return [{"const": value, "title": title} for value, title in pairs]


class Sep1330Enums(BaseModel):
    """The enum shapes of SEP-1330: plain, titled, multi-select, legacy enumNames."""

    untitledSingle: str = Field(
        description="Simple enum without titles",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    titledSingle: str = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra={
            "oneOf": _titled(
                ("low", "Low Priority"), ("medium", "Medium Priority"), ("high", "High Priority")
            )
        },
    )
    untitledMulti: list[str] = Field(
        description="Multi-select without titles",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Multi-select with titled options",
        json_schema_extra={
            "items": {
                "anyOf": _titled(
                    ("feature", "New Feature"), ("bug", "Bug Fix"), ("docs", "Documentation")
                )
            }
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


async def _elicit_and_describe(
    ctx: Context, message: str, schema: type[BaseModel], label: str
) -> str:
    try:
        result = await ctx.elicit(message=message, schema=schema)
    except Exception as exc:  # noqa: BLE001 - reported in the text, which the scenario reads
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"{label}: action={result.action}, content={content}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user on the live session (2025-era elicitation)."""
    return await _elicit_and_describe(ctx, message, UserResponse, "User response")


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation whose schema carries defaults for every primitive type."""
    return await _elicit_and_describe(
        ctx, "Please provide user information", Sep1034Defaults, "Elicitation result"
    )


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation with every enum schema shape."""
    return await _elicit_and_describe(
        ctx,
        "Please select values using different enum schema types",
        Sep1330Enums,
        "Elicitation completed",
    )


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes its own SSE stream mid-call so the client must resume (SEP-1699 polling)."""
    await ctx.info("Before disconnect")  # pyright: ignore[reportDeprecated]
    await ctx.close_sse_stream()
    await asyncio.sleep(0.2)
    await ctx.info("After reconnect")  # pyright: ignore[reportDeprecated]
    return "Reconnection test completed"


# ---- era-portable input (Resolve): InputRequiredResult on 2026, a push on 2025 -------


class Confirmation(BaseModel):
    ok: bool = Field(description="Proceed?")


def ask_confirmation() -> Elicit[Confirmation]:
    return Elicit("Proceed with the streaming elicitation test?", Confirmation)


@server.tool()
async def test_streaming_elicitation(
    answer: Annotated[ElicitationResult[Confirmation], Resolve(ask_confirmation)],
) -> str:
    """Needs one elicitation; on 2026-07-28 it must come back as input_required, not a request."""
    if answer.action == "accept":
        return f"confirmed={answer.data.ok}"
    return f"not confirmed ({answer.action})"


# ---- capability gate -----------------------------------------------------------------


@server.tool()
async def test_missing_capability(ctx: Context) -> str:
    """Refuses with -32021 unless the request declared the sampling capability."""
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client 'sampling' capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "sampling declared"


# ---- 2026-07-28 multi round-trip (InputRequiredResult built by hand) ------------------


@server.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
    """One form elicitation under the key user_name."""
    got = answers(ctx)
    if "user_name" in got:
        return f"Hello, {form_value(got['user_name'], 'name') or 'stranger'}!"
    return InputRequiredResult(
        input_requests={"user_name": ask_form("What is your name?", name="string")}
    )


@server.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
    """One sampling request under the key capital_question."""
    got = answers(ctx)
    answer = got.get("capital_question")
    if answer is not None:
        said = (
            answer.content.text
            if isinstance(answer, CreateMessageResult) and answer.content.type == "text"
            else "?"
        )
        return f"Model said: {said}"
    return InputRequiredResult(
        input_requests={"capital_question": ask_llm("What is the capital of France?")}
    )


@server.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
    """One roots/list request under the key client_roots."""
    answer = answers(ctx).get("client_roots")
    if answer is not None:
        count = len(answer.roots) if isinstance(answer, ListRootsResult) else 0
        return f"Client exposed {count} root(s)."
    return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})


REQUEST_STATE_NONCE = "request-state-nonce"


@server.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
    """Completes only when the echoed requestState opens to exactly what was sent."""
    if "confirm" in answers(ctx) and ctx.request_state == REQUEST_STATE_NONCE:
        return "state-ok: confirmation received"
    return InputRequiredResult(
        input_requests={"confirm": ask_form("Please confirm", ok="boolean")},
        request_state=REQUEST_STATE_NONCE,
    )


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
    """Elicitation, sampling and roots in one round."""
    wanted: dict[str, InputRequest] = {
        "user_name": ask_form("What is your name?", name="string"),
        "greeting": ask_llm("Generate a greeting", max_tokens=50),
        "client_roots": ListRootsRequest(),
    }
    if wanted.keys() <= answers(ctx).keys():
        return "All inputs received."
    return InputRequiredResult(input_requests=wanted, request_state="multiple-inputs")


@server.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
    """Three rounds: name, then colour, then the answer; the state records the round."""
    try:
        state: dict[str, Any] = json.loads(ctx.request_state) if ctx.request_state else {}
    except ValueError:
        state = {}
    got = answers(ctx)
    round_no = state.get("round", 0)

    if round_no == 1 and "step1" in got:
        return InputRequiredResult(
            input_requests={
                "step2": ask_form("Step 2: What is your favorite color?", color="string")
            },
            request_state=json.dumps({"round": 2, "name": form_value(got["step1"], "name")}),
        )
    if round_no == 2 and "step2" in got:
        return f"{state.get('name')} likes {form_value(got['step2'], 'color')}."
    # First round, or an answer that does not fit the round: start over.
    return InputRequiredResult(
        input_requests={"step1": ask_form("Step 1: What is your name?", name="string")},
        request_state=json.dumps({"round": 1}),
    )


@server.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
    """Plain handler: tamper detection is the SDK seal's job (or a gateway's)."""
    if ctx.request_state is None:
        return InputRequiredResult(
            input_requests={"confirm": ask_form("Please confirm", ok="boolean")},
            request_state="round-1",
        )
    return f"state-ok: {ctx.request_state}"


@server.tool()
async def test_input_required_result_capabilities(ctx: Context) -> InputRequiredResult:
    """Asks only for what this request's clientCapabilities declare."""
    caps = ctx.client_capabilities
    wanted: dict[str, InputRequest] = {}
    if caps is None or caps.sampling is not None:
        wanted["sample"] = ask_llm("Say hello", max_tokens=50)
    if caps is None or caps.elicitation is not None:
        wanted["ask"] = ask_form("What is your name?", name="string")
    return InputRequiredResult(input_requests=wanted, request_state="capability-gated")


# ---- subscriptions/listen triggers (SEP-2575) -----------------------------------------


def _dynamic_tool() -> str:
    """Exists for an instant, to change the tool list."""
    return "dynamic"


def _dynamic_prompt() -> str:
    """Exists for an instant, to change the prompt list."""
    return "dynamic"


@server.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Adds and removes a tool, then announces the change to listeners."""
    server.add_tool(_dynamic_tool, name="test_dynamic_tool")
    server.remove_tool("test_dynamic_tool")
    await ctx.notify_tools_changed()
    return "tool list changed"


@server.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Adds and removes a prompt, then announces the change to listeners."""
    server.add_prompt(
        Prompt.from_function(_dynamic_prompt, name="test_dynamic_prompt", description="dynamic")
    )
    server.remove_prompt("test_dynamic_prompt")
    await ctx.notify_prompts_changed()
    return "prompt list changed"


# ---- resources --------------------------------------------------------------------------

WATCHED_TEXT = "Watched resource content"


@server.resource("test://static-text")
def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed binary resource (a PNG)."""
    return base64.b64decode(PNG_1X1)


@server.resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> str:
    """A template: the id is substituted into the JSON body."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource")
def watched() -> str:
    """A resource clients may subscribe to."""
    return WATCHED_TEXT


@server.resource("test://input-required/{topic}")
async def input_required_resource(topic: str, ctx: Context) -> str | InputRequiredResult:
    """MRTR on resources/read: the text appears once the client supplied a pin."""
    pin = form_value(answers(ctx).get("pin"), "pin")
    if pin is not None:
        return f"{topic} unlocked with pin {pin}"
    return InputRequiredResult(input_requests={"pin": ask_form(f"PIN for {topic}?", pin="string")})


# ---- prompts ----------------------------------------------------------------------------


def _user_text(text: str) -> UserMessage:
    return UserMessage(role="user", content=TextContent(type="text", text=text))


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [_user_text("This is a simple prompt for testing.")]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two required arguments."""
    return [_user_text(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that embeds the resource it is given."""
    return [
        UserMessage(
            role="user",
            content=_text_resource(resourceUri, "Embedded resource content for testing."),
        ),
        _user_text("Please process the embedded resource above."),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt with an image block."""
    return [
        UserMessage(
            role="user", content=ImageContent(type="image", data=PNG_1X1, mime_type="image/png")
        ),
        _user_text("Please analyze the image above."),
    ]


@server.prompt()
async def test_input_required_result_prompt(
    ctx: Context,
) -> list[UserMessage] | InputRequiredResult:
    """MRTR on prompts/get: asks for context first."""
    context = form_value(answers(ctx).get("user_context"), "context")
    if "user_context" in answers(ctx):
        return [_user_text(f"Use the following context: {context if context is not None else '?'}")]
    return InputRequiredResult(
        input_requests={
            "user_context": ask_form("What context should the prompt use?", context="string")
        }
    )


# ---- completion and the 2025-era handlers MCPServer has no decorator for ---------------


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference,
    argument: CompletionArgument,
    context: CompletionContext | None,
) -> Completion:
    """No suggestions: the scenario only checks the shape of the answer."""
    return Completion(values=[], total=0, has_more=False)


subscribed_uris: set[str] = set()


async def on_set_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    log.info("log level set to %s", params.level)
    return EmptyResult()


async def on_subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    subscribed_uris.add(str(params.uri))
    return EmptyResult()


async def on_unsubscribe(
    ctx: ServerRequestContext, params: UnsubscribeRequestParams
) -> EmptyResult:
    subscribed_uris.discard(str(params.uri))
    return EmptyResult()


# MCPServer offers no public hook for these three; the runner still serves them only to
# 2025-era sessions (on 2026-07-28 they are unknown methods).
_lowlevel = server._lowlevel_server  # pyright: ignore[reportPrivateUsage]
_lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, on_set_level)
_lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, on_subscribe)
_lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--json-response", action="store_true", help="answer with JSON, never SSE")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--http",
        choices=("h11", "httptools"),
        default="h11",
        help=(
            "uvicorn HTTP parser. h11 (default) is what a plain `pip install mcp` runs on; "
            "httptools keeps trailing whitespace in header values, which the SDK's "
            "Mcp-Name check then rejects"
        ),
    )
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    app = server.streamable_http_app(
        json_response=args.json_response,
        event_store=MemoryEventStore(),
        retry_interval=100,  # ms; the SSE polling scenario waits for the client to come back
        host=args.host,  # a loopback host switches on the SDK's DNS-rebinding protection
    )
    uvicorn.run(
        app, host=args.host, port=args.port, http=args.http, log_level=args.log_level.lower()
    )


if __name__ == "__main__":
    main()
