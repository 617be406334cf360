"""An MCP server whose `requestState` is plaintext and never verified.

Built with the published SDK's low-level `Server`, which, unlike `MCPServer`, adds no
request-state seal: the state a handler returns goes out as written, and whatever a client
echoes back reaches the handler unchanged. Run directly, it therefore fails the conformance
`input-required-result-tampered-state` scenario; behind a gateway that seals state at the
edge, it must pass all the `input-required-result-*` scenarios.

    python tests/servers/plaintext_state.py --port 3002 [--host 127.0.0.1] [--log FILE]

Every HTTP request that reaches it is logged as JSON lines (to `--log FILE`, else stderr):
on arrival its `X-Test-Marker` header, the JSON-RPC method, id, tool/prompt name or resource uri, whether a
`requestState` was present and its value, and the `inputResponses` keys; when answered the
HTTP status, resultType, error code and the requestState it issued. Tests read the log to
prove what reached the upstream, or that a request never did.

Besides the conformance tools it has a few of its own:

- `ask_name`, `ask_sample`, `ask_roots`: one elicitation / sampling / roots request;
- `ask_three`: all three at once;
- `three_rounds`: three rounds of elicitation, the plaintext state counting the rounds;
- `whoami_state`: echoes the raw `requestState` and `inputResponses` it received;
- resource `plain://vault/{name}`: MRTR on `resources/read`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import uvicorn
from body_replay import read_body, replaying
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequest,
    InputRequiredResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListRootsRequest,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourceTemplate,
    SamplingMessage,
    TextContent,
    TextResourceContents,
    Tool,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SERVER_NAME = "mcp-edge-plaintext-state"
INVALID_PARAMS = -32602


# --------------------------------------------------------------------------------------
# What a handler sees of one call: the raw wire params, not the SDK's parsed models, so a
# test can see exactly what arrived.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    raw: Mapping[str, Any]
    capabilities: Mapping[str, Any]

    @property
    def arguments(self) -> Mapping[str, Any]:
        return self.raw.get("arguments") or {}

    @property
    def state(self) -> str | None:
        value = self.raw.get("requestState")
        return value if isinstance(value, str) else None

    @property
    def responses(self) -> Mapping[str, Any]:
        value = self.raw.get("inputResponses")
        return value if isinstance(value, Mapping) else {}

    def answer(self, key: str) -> Mapping[str, Any] | None:
        value = self.responses.get(key)
        return value if isinstance(value, Mapping) else None

    def form_field(self, key: str, name: str) -> Any:
        answer = self.answer(key)
        if (
            answer
            and answer.get("action") == "accept"
            and isinstance(answer.get("content"), Mapping)
        ):
            return answer["content"].get(name)
        return None

    def sampled_text(self, key: str) -> str | None:
        content = (self.answer(key) or {}).get("content")
        if isinstance(content, Mapping) and content.get("type") == "text":
            return str(content.get("text"))
        return None


def make_call(ctx: ServerRequestContext) -> Call:
    raw: Mapping[str, Any] = ctx.params or {}
    meta = raw.get("_meta") or {}
    caps = (
        meta.get("io.modelcontextprotocol/clientCapabilities")
        if isinstance(meta, Mapping)
        else None
    )
    return Call(raw=raw, capabilities=caps if isinstance(caps, Mapping) else {})


# ---- input request builders ---------------------------------------------------------


def ask_form(message: str, **properties: str) -> ElicitRequest:
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


def need(
    requests: dict[str, InputRequest] | None = None, state: str | None = None
) -> InputRequiredResult:
    return InputRequiredResult(input_requests=requests or None, request_state=state)


def done(text: str, structured: dict[str, Any] | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


ToolResult = CallToolResult | InputRequiredResult
ToolFn = Callable[[Call], Awaitable[ToolResult]]


@dataclass
class Registry:
    tools: dict[str, tuple[Tool, ToolFn]] = field(default_factory=dict)

    def tool(
        self, description: str, properties: dict[str, Any] | None = None
    ) -> Callable[[ToolFn], ToolFn]:
        def register(fn: ToolFn) -> ToolFn:
            schema = {"type": "object", "properties": properties or {}}
            self.tools[fn.__name__] = (
                Tool(name=fn.__name__, description=description, input_schema=schema),
                fn,
            )
            return fn

        return register


registry = Registry()


# ---- the conformance MRTR tools, with plaintext state ---------------------------------


@registry.tool("One form elicitation under the key user_name.")
async def test_input_required_result_elicitation(call: Call) -> ToolResult:
    if "user_name" in call.responses:
        return done(f"Hello, {call.form_field('user_name', 'name') or 'stranger'}!")
    return need({"user_name": ask_form("What is your name?", name="string")})


@registry.tool("One sampling request under the key capital_question.")
async def test_input_required_result_sampling(call: Call) -> ToolResult:
    if "capital_question" in call.responses:
        return done(f"Model said: {call.sampled_text('capital_question') or '?'}")
    return need({"capital_question": ask_llm("What is the capital of France?")})


@registry.tool("One roots/list request under the key client_roots.")
async def test_input_required_result_list_roots(call: Call) -> ToolResult:
    answer = call.answer("client_roots")
    if answer is not None:
        roots = answer.get("roots")
        return done(f"Client exposed {len(roots) if isinstance(roots, list) else 0} root(s).")
    return need({"client_roots": ListRootsRequest()})


@registry.tool("Completes when the echoed requestState equals the one sent.")
async def test_input_required_result_request_state(call: Call) -> ToolResult:
    if "confirm" in call.responses and call.state == "request-state-nonce":
        return done("state-ok: confirmation received")
    return need({"confirm": ask_form("Please confirm", ok="boolean")}, "request-state-nonce")


def _three_inputs() -> dict[str, InputRequest]:
    return {
        "user_name": ask_form("What is your name?", name="string"),
        "greeting": ask_llm("Generate a greeting", max_tokens=50),
        "client_roots": ListRootsRequest(),
    }


@registry.tool("Elicitation, sampling and roots in one round.")
async def test_input_required_result_multiple_inputs(call: Call) -> ToolResult:
    wanted = _three_inputs()
    if wanted.keys() <= call.responses.keys():
        return done("All inputs received.")
    return need(wanted, "multiple-inputs")


@registry.tool("Three rounds (name, colour, answer); the plaintext state holds the round.")
async def test_input_required_result_multi_round(call: Call) -> ToolResult:
    state = _json_state(call.state)
    if state.get("round") == 1 and "step1" in call.responses:
        name = call.form_field("step1", "name")
        return need(
            {"step2": ask_form("Step 2: What is your favorite color?", color="string")},
            json.dumps({"round": 2, "name": name}),
        )
    if state.get("round") == 2 and "step2" in call.responses:
        return done(f"{state.get('name')} likes {call.form_field('step2', 'color')}.")
    return need(
        {"step1": ask_form("Step 1: What is your name?", name="string")}, json.dumps({"round": 1})
    )


@registry.tool("Accepts any echoed state: this server cannot tell a tampered one.")
async def test_input_required_result_tampered_state(call: Call) -> ToolResult:
    if call.state is None:
        return need({"confirm": ask_form("Please confirm", ok="boolean")}, "round-1")
    return done(f"state-ok: {call.state}")


@registry.tool("Asks only for what this request's clientCapabilities declare.")
async def test_input_required_result_capabilities(call: Call) -> ToolResult:
    wanted: dict[str, InputRequest] = {}
    if "sampling" in call.capabilities:
        wanted["sample"] = ask_llm("Say hello", max_tokens=50)
    if "elicitation" in call.capabilities:
        wanted["ask"] = ask_form("What is your name?", name="string")
    return need(wanted, "capability-gated")


# ---- our own tools --------------------------------------------------------------------


@registry.tool("Asks for a name (form elicitation).")
async def ask_name(call: Call) -> ToolResult:
    if "name" in call.responses:
        name = call.form_field("name", "name")
        return done(f"Hello, {name}!" if name else "No name given.", {"name": name})
    return need({"name": ask_form("What is your name?", name="string")}, "ask_name:1")


@registry.tool("Asks the client's model a question (sampling).")
async def ask_sample(call: Call) -> ToolResult:
    if "answer" in call.responses:
        text = call.sampled_text("answer")
        return done(f"Model said: {text}", {"text": text})
    return need({"answer": ask_llm("Say something short.")}, "ask_sample:1")


@registry.tool("Asks for the client's roots (roots/list).")
async def ask_roots(call: Call) -> ToolResult:
    answer = call.answer("roots")
    if answer is not None:
        roots = answer.get("roots")
        uris = (
            [r.get("uri") for r in roots if isinstance(r, Mapping)]
            if isinstance(roots, list)
            else []
        )
        return done(f"{len(uris)} root(s): {', '.join(map(str, uris))}", {"roots": uris})
    return need({"roots": ListRootsRequest()}, "ask_roots:1")


@registry.tool("Asks for a name, a model answer and the roots at once.")
async def ask_three(call: Call) -> ToolResult:
    wanted: dict[str, InputRequest] = {
        "name": ask_form("What is your name?", name="string"),
        "answer": ask_llm("Say something short."),
        "roots": ListRootsRequest(),
    }
    missing = {key: request for key, request in wanted.items() if key not in call.responses}
    if not missing:
        roots = (call.answer("roots") or {}).get("roots")
        summary = {
            "name": call.form_field("name", "name"),
            "answer": call.sampled_text("answer"),
            "roots": len(roots) if isinstance(roots, list) else 0,
        }
        return done(json.dumps(summary, sort_keys=True), summary)
    return need(missing, "ask_three:1")


@registry.tool(
    "Three rounds of elicitation; the plaintext state counts rounds and keeps the answers."
)
async def three_rounds(call: Call) -> ToolResult:
    state = _json_state(call.state)
    round_no = state.get("round", 0) if isinstance(state.get("round"), int) else 0
    so_far = list(state.get("answers", [])) if isinstance(state.get("answers"), list) else []
    if round_no > 0:
        key = f"q{round_no}"
        if key not in call.responses:  # ask the same question again
            return need({key: ask_form(f"Question {round_no}?", answer="string")}, call.state)
        so_far.append(call.form_field(key, "answer"))
    if round_no >= 3:
        return done(f"rounds=3 answers={json.dumps(so_far)}", {"rounds": 3, "answers": so_far})
    nxt = round_no + 1
    return need(
        {f"q{nxt}": ask_form(f"Question {nxt}?", answer="string")},
        json.dumps({"round": nxt, "answers": so_far}),
    )


@registry.tool(
    "Echoes the raw requestState and inputResponses it received. A call carrying neither "
    "first answers input_required (requestState = the `state` argument, none if empty), "
    "unless `ask` is false.",
    {"state": {"type": "string"}, "ask": {"type": "boolean"}},
)
async def whoami_state(call: Call) -> ToolResult:
    first_round = "requestState" not in call.raw and "inputResponses" not in call.raw
    if first_round and call.arguments.get("ask", True):
        state = call.arguments.get("state", "whoami-state-1")
        return need({"confirm": ask_form("Continue?", ok="boolean")}, state or None)
    seen = {
        "requestStatePresent": "requestState" in call.raw,
        "requestState": call.raw.get("requestState"),
        "inputResponsesPresent": "inputResponses" in call.raw,
        "inputResponses": call.raw.get("inputResponses"),
    }
    return done(json.dumps(seen, sort_keys=True), seen)


def _json_state(state: str | None) -> dict[str, Any]:
    try:
        value = json.loads(state) if state else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---- prompts and resources --------------------------------------------------------------

MRTR_PROMPT = "test_input_required_result_prompt"
VAULT_TEMPLATE = "plain://vault/{name}"
VAULT_PREFIX = "plain://vault/"


async def list_tools(
    ctx: ServerRequestContext, params: PaginatedRequestParams | None
) -> ListToolsResult:
    return ListToolsResult(tools=[tool for tool, _ in registry.tools.values()])


async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> ToolResult:
    entry = registry.tools.get(params.name)
    if entry is None:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    return await entry[1](make_call(ctx))


async def list_prompts(
    ctx: ServerRequestContext, params: PaginatedRequestParams | None
) -> ListPromptsResult:
    return ListPromptsResult(prompts=[Prompt(name=MRTR_PROMPT, description="MRTR on prompts/get.")])


async def get_prompt(
    ctx: ServerRequestContext, params: GetPromptRequestParams
) -> GetPromptResult | InputRequiredResult:
    if params.name != MRTR_PROMPT:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    call = make_call(ctx)
    if "user_context" in call.responses:
        context = call.form_field("user_context", "context")
        text = f"Use the following context: {context if context is not None else '?'}"
        return GetPromptResult(
            messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))]
        )
    return need({"user_context": ask_form("What context should the prompt use?", context="string")})


async def list_resources(
    ctx: ServerRequestContext, params: PaginatedRequestParams | None
) -> ListResourcesResult:
    return ListResourcesResult(resources=[])


async def list_templates(
    ctx: ServerRequestContext, params: PaginatedRequestParams | None
) -> ListResourceTemplatesResult:
    template = ResourceTemplate(
        name="vault", uri_template=VAULT_TEMPLATE, description="MRTR on resources/read."
    )
    return ListResourceTemplatesResult(resource_templates=[template])


async def read_resource(
    ctx: ServerRequestContext, params: ReadResourceRequestParams
) -> ReadResourceResult | InputRequiredResult:
    uri = str(params.uri)
    if not uri.startswith(VAULT_PREFIX):
        raise MCPError(code=-32002, message="Resource not found", data={"uri": uri})
    call = make_call(ctx)
    pin = call.form_field("pin", "pin")
    if pin is None:
        return need({"pin": ask_form(f"PIN for {uri}?", pin="string")}, f"vault:{uri}")
    text = f"{uri.removeprefix(VAULT_PREFIX)} unlocked with pin {pin}"
    return ReadResourceResult(
        contents=[TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
    )


def build_server() -> Server:
    # No RequestStateBoundary is appended: that is the point of this fixture.
    return Server(
        SERVER_NAME,
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


# ---- request log ------------------------------------------------------------------------


class RequestLog:
    """Pure ASGI middleware: logs each HTTP request as it arrives, and its answer when done.

    Two JSON lines per request, tied by `seq`: `"event": "request"` (written before the
    server sees the request) and `"event": "response"` (status, resultType, error code and
    the requestState the server issued, if any).
    """

    def __init__(self, app: ASGIApp, sink: IO[str], max_capture: int = 1 << 20) -> None:
        self.app = app
        self.sink = sink
        self.max_capture = max_capture
        self.seq = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, whole = await read_body(receive)
        if not whole:
            return
        self.seq += 1
        seq = self.seq
        self._write({"event": "request", "seq": seq, **describe_request(scope, body)})

        status = 0
        content_type = ""
        answer = bytearray()
        logged = False

        def log_response() -> None:
            nonlocal logged
            if not logged:
                logged = True
                self._write(
                    {
                        "event": "response",
                        "seq": seq,
                        **describe_response(status, content_type, bytes(answer)),
                    }
                )

        async def capture(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = message["status"]
                for key, value in message.get("headers", []):
                    if key.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                if len(answer) < self.max_capture:
                    answer.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    # Logged before the last byte leaves, so a client's follow-up request
                    # can never be logged ahead of the answer it follows.
                    log_response()
            await send(message)

        try:
            await self.app(scope, replaying(body, receive), capture)
        finally:
            log_response()

    def _write(self, entry: dict[str, Any]) -> None:
        entry["ts"] = time.time()
        self.sink.write(json.dumps(entry, sort_keys=True) + "\n")
        self.sink.flush()


def describe_request(scope: Scope, body: bytes) -> dict[str, Any]:
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    entry: dict[str, Any] = {
        "http_method": scope["method"],
        "path": scope["path"],
        "protocol_version": headers.get("mcp-protocol-version"),
        # What a test sent to find its own requests in the log (tests.support.raw_http).
        "marker": headers.get("x-test-marker"),
    }
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return {**entry, "unparsable_body": True}
    if isinstance(message, dict):
        raw_params = message.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        responses = params.get("inputResponses")
        entry.update(
            {
                "method": message.get("method"),
                "id": message.get("id"),
                "name": params.get("name"),
                "uri": params.get("uri"),
                "has_request_state": "requestState" in params,
                "request_state": params.get("requestState"),
                "has_input_responses": "inputResponses" in params,
                "input_response_keys": sorted(responses) if isinstance(responses, dict) else None,
            }
        )
    return entry


def describe_response(status: int, content_type: str, body: bytes) -> dict[str, Any]:
    entry: dict[str, Any] = {"status": status}
    message = final_message(content_type, body)
    if isinstance(message, dict):
        result = message.get("result")
        error = message.get("error")
        if isinstance(result, dict):
            entry["result_type"] = result.get("resultType")
            entry["issued_request_state"] = result.get("requestState")
        if isinstance(error, dict):
            entry["error_code"] = error.get("code")
    return entry


def final_message(content_type: str, body: bytes) -> Any:
    """The JSON-RPC response in a JSON body, or the last response event of an SSE body."""
    text = body.decode("utf-8", "replace")
    if content_type.startswith("application/json"):
        try:
            return json.loads(text)
        except ValueError:
            return None
    found = None
    for line in text.splitlines():
        if line.startswith("data:"):
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue
            if isinstance(event, dict) and ("result" in event or "error" in event):
                found = event
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--log", help="append the JSON-lines request log to this file (default: stderr)"
    )
    parser.add_argument("--json-response", action="store_true", help="answer with JSON, never SSE")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    sink: IO[str] = open(args.log, "a", encoding="utf-8") if args.log else sys.stderr  # noqa: SIM115
    app = build_server().streamable_http_app(json_response=args.json_response, host=args.host)
    # h11, like a plain `pip install mcp`: httptools keeps trailing whitespace in header values.
    uvicorn.run(
        RequestLog(app, sink),
        host=args.host,
        port=args.port,
        http="h11",
        log_level=args.log_level.lower(),
    )


if __name__ == "__main__":
    main()
