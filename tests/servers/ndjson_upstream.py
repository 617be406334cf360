"""A 2026-07-28 upstream that streams its answers as newline-delimited JSON under
``application/json`` (one JSON-RPC message per line), which the transport does not allow and no
SDK server sends, but some servers do. A fixture of an unusual upstream, in plain ASGI.

    python tests/servers/ndjson_upstream.py --port N --log FILE [--host 127.0.0.1]
                                            [--interval-ms 200] [--listen-seconds 120]

Each line is sent as its own chunk, as soon as it is written. The messages are built with the
published SDK's types (``mcp.types``).

* ``server/discover``, ``tools/list``: one plain JSON response.
* ``tools/call stream_steps(steps=3, release_timeout=30)``: for each step a log message (when the
  request opted in with ``io.modelcontextprotocol/logLevel``) and a progress notification (when
  it carries a ``progressToken``), then the response line. After the first step it waits until
  ``POST /release {"marker": M}`` arrives (or ``release_timeout`` seconds pass) before the other
  steps: a client that releases it from its progress callback proves the first step reached it
  while the final line was not yet written. The result says whether it was released.
* ``tools/call confirm``: an MRTR tool. Round 1 streams a log message and a progress
  notification, then an ``input_required`` result asking ``confirm`` (a form with ``ok``), with
  the plaintext ``requestState`` ``plain:<marker>``; the retry with that state and an accepted
  answer streams a log message, then the completed result. Another state is ``-32602``.
* ``subscriptions/listen``: ``notifications/subscriptions/acknowledged``, then
  ``notifications/tools/list_changed`` every ``--interval-ms`` (when ``toolsListChanged`` was
  asked for), each with ``_meta["io.modelcontextprotocol/subscriptionId"]`` = the request's id,
  until the client goes away (logged) or ``--listen-seconds`` pass (then the listen result).

Every request is logged to FILE as JSON lines, under its marker: the ``name`` of the client's
``io.modelcontextprotocol/clientInfo``. Events: ``request`` (method, id, tool, whether a
``requestState`` came), ``line`` (each message sent: its method, or ``result``/``error``),
``waiting`` / ``released`` / ``release_timeout``, ``state`` (the ``requestState`` a retry
carried), ``closed`` (the client went away before the stream ended; ``sent``: messages sent).
Each entry has ``t``, the time it happened.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import mcp.types as types
import uvicorn
from starlette.types import Receive, Scope, Send

PROTOCOL = "2026-07-28"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
MAX_BODY = 1 << 20
STEP_DELAY = 0.05

FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TOOLS = [
    types.Tool(
        name="stream_steps",
        description="Reports each step as it goes, then answers.",
        input_schema={
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "release_timeout": {"type": "number"}},
        },
    ),
    types.Tool(
        name="confirm",
        description="Asks for a confirmation first (MRTR).",
        input_schema={"type": "object"},
    ),
]


def dump(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def line(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode() + b"\n"


class Upstream:
    def __init__(self, log_path: str, interval: float, listen_seconds: float) -> None:
        self.log_path = log_path
        self.interval = interval
        self.listen_seconds = listen_seconds
        self.releases: dict[str, anyio.Event] = {}

    def log(self, marker: str | None, event: str, **fields: Any) -> None:
        with open(self.log_path, "a") as f:
            f.write(
                json.dumps({"t": time.time(), "marker": marker, "event": event, **fields}) + "\n"
            )

    def release(self, marker: str) -> anyio.Event:
        return self.releases.setdefault(marker, anyio.Event())

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await respond(send, 405, b"", b"text/plain")
            return
        body = await read_body(receive)
        if body is None:
            await respond(send, 413, b"", b"text/plain")
            return
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            await respond(
                send, 400, line({"id": None, "error": {"code": -32700, "message": "Parse error"}})
            )
            return
        if scope["path"] == "/release":
            self.log(doc.get("marker"), "released_by_client")
            self.release(str(doc.get("marker"))).set()
            await respond(send, 200, b'{"released":true}')
            return
        await self.rpc(doc, receive, send)

    async def rpc(self, doc: dict[str, Any], receive: Receive, send: Send) -> None:
        params = doc.get("params") or {}
        meta = params.get("_meta") or {}
        marker = (meta.get(CLIENT_INFO) or {}).get("name")
        method, request_id = doc.get("method"), doc.get("id")
        self.log(
            marker,
            "request",
            method=method,
            id=request_id,
            tool=params.get("name"),
            request_state="requestState" in params,
        )
        if request_id is None:  # a notification: nothing to answer
            await respond(send, 202, b"")
            return
        if method == "server/discover":
            result = dump(
                types.DiscoverResult(
                    supported_versions=[PROTOCOL],
                    capabilities=types.ServerCapabilities(
                        tools=types.ToolsCapability(list_changed=True)
                    ),
                )
            )
            result["_meta"] = {SERVER_INFO: {"name": "ndjson-upstream", "version": "1.0.0"}}
            await respond(send, 200, line({"id": request_id, "result": result}))
        elif method == "tools/list":
            await respond(
                send,
                200,
                line({"id": request_id, "result": dump(types.ListToolsResult(tools=TOOLS))}),
            )
        elif method == "tools/call" and params.get("name") == "stream_steps":
            await self.stream(marker, receive, send, self.stream_steps(marker, request_id, params))
        elif method == "tools/call" and params.get("name") == "confirm":
            await self.stream(marker, receive, send, self.confirm(marker, request_id, params))
        elif method == "subscriptions/listen":
            await self.stream(marker, receive, send, self.listen(request_id, params))
        else:
            error = {"code": -32601, "message": "Method not found", "data": method}
            await respond(send, 404, line({"id": request_id, "error": error}))

    async def stream(
        self,
        marker: str | None,
        receive: Receive,
        send: Send,
        messages: AsyncGenerator[dict[str, Any], None],
    ) -> None:
        """Send each message as one line in its own chunk; stop (and log it) when the client goes."""
        sent = 0
        gone = finished = False
        async with anyio.create_task_group() as tasks:

            async def watch() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                if not finished:  # (a finished response reads as a disconnect too)
                    gone = True
                    tasks.cancel_scope.cancel()

            tasks.start_soon(watch)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            async with contextlib.aclosing(messages):
                async for message in messages:
                    await send(
                        {"type": "http.response.body", "body": line(message), "more_body": True}
                    )
                    sent += 1
                    what = message.get("method") or ("error" if "error" in message else "result")
                    self.log(marker, "line", what=what)
            finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tasks.cancel_scope.cancel()
        if gone:
            self.log(marker, "closed", sent=sent)

    # ------------------------------------------------------------------ tools

    async def stream_steps(
        self, marker: str | None, request_id: Any, params: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        arguments = params.get("arguments") or {}
        steps = max(1, min(int(arguments.get("steps", 3)), 20))
        timeout = max(0.0, min(float(arguments.get("release_timeout", 30)), 60.0))
        notes = Notes(params)
        released = False
        for step in range(1, steps + 1):
            for message in notes(step, steps, f"step {step} of {steps}"):
                yield message
            if step == 1:
                self.log(marker, "waiting", timeout=timeout)
                with anyio.move_on_after(timeout):
                    await self.release(str(marker)).wait()
                    released = True
                self.log(marker, "released" if released else "release_timeout")
            else:
                await anyio.sleep(STEP_DELAY)
        text = f"{steps} steps; released by the client: {'yes' if released else 'no'}"
        result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        yield {"id": request_id, "result": dump(result)}

    async def confirm(
        self, marker: str | None, request_id: Any, params: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        notes = Notes(params)
        issued = f"plain:{marker}"
        if "requestState" not in params:
            for message in notes(0, 1, "asking for a confirmation"):
                yield message
            await anyio.sleep(STEP_DELAY)
            ask = types.ElicitRequest(
                params=types.ElicitRequestFormParams(message="Go ahead?", requested_schema=FORM)
            )
            result = types.InputRequiredResult(
                input_requests={"confirm": ask}, request_state=issued
            )
            yield {"id": request_id, "result": dump(result)}
            return
        state = params.get("requestState")
        self.log(marker, "state", request_state=state)
        answer = (params.get("inputResponses") or {}).get("confirm") or {}
        if state != issued or answer.get("action") != "accept":
            yield {
                "id": request_id,
                "error": {"code": -32602, "message": "Invalid requestState or answer"},
            }
            return
        for message in notes(1, 1, "confirmed"):
            yield message
        await anyio.sleep(STEP_DELAY)
        text = f"confirmed ok={(answer.get('content') or {}).get('ok')}; state {state}"
        result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        yield {"id": request_id, "result": dump(result)}

    async def listen(
        self, request_id: Any, params: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        wanted = (params.get("notifications") or {}).get("toolsListChanged") is True
        meta = {SUBSCRIPTION_ID: request_id}
        honored = {"toolsListChanged": True} if wanted else {}
        ack = {"notifications": honored, "_meta": meta}
        yield {"method": "notifications/subscriptions/acknowledged", "params": ack}
        deadline = anyio.current_time() + self.listen_seconds
        while anyio.current_time() < deadline:
            await anyio.sleep(self.interval)
            if wanted:
                yield {"method": "notifications/tools/list_changed", "params": {"_meta": meta}}
        yield {"id": request_id, "result": {"_meta": meta, "resultType": "complete"}}


class Notes:
    """The notifications a request asked for: progress for its ``progressToken``, log messages
    when it opted in with ``io.modelcontextprotocol/logLevel``."""

    def __init__(self, params: dict[str, Any]) -> None:
        meta = params.get("_meta") or {}
        self.token = meta.get("progressToken")
        self.logs = meta.get(LOG_LEVEL) in ("debug", "info")

    def __call__(self, progress: float, total: float, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.logs:
            note = types.LoggingMessageNotificationParams(
                level="info", logger="ndjson-upstream", data=text
            )
            out.append({"method": "notifications/message", "params": dump(note)})
        if self.token is not None:
            note = types.ProgressNotificationParams(
                progress_token=self.token, progress=progress, total=total, message=text
            )
            out.append({"method": "notifications/progress", "params": dump(note)})
        return out


async def read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send, status: int, body: bytes, content_type: bytes = b"application/json"
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--log", required=True, help="JSON lines: what reached this upstream and what it sent"
    )
    parser.add_argument(
        "--interval-ms", type=int, default=200, help="between list_changed notifications"
    )
    parser.add_argument(
        "--listen-seconds", type=float, default=120, help="a listen stream's longest life"
    )
    args = parser.parse_args(argv)
    app = Upstream(args.log, args.interval_ms / 1000, args.listen_seconds)
    uvicorn.run(
        app, host=args.host, port=args.port, http="h11", lifespan="off", log_level="warning"
    )


if __name__ == "__main__":
    main()
