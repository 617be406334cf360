"""Start the 2025-era conformance fixture (tests/servers/legacy_everything.py) and talk to it.

The fixture is written against `mcp==1.30.0`, which cannot share the project's venv (that
has mcp 2.x), so it runs in a throwaway environment built by
`uv run --isolated --no-project --with mcp==1.30.0`. The first start on a machine may have
to build that environment, hence the generous startup timeout. `uv` forwards SIGTERM to
the Python it starts, and ManagedProcess stops the whole process group, so nothing leaks.

`LegacyClient` is a deliberately small raw 2025-11-25 Streamable HTTP client (httpx): it
initializes a session with exactly the capabilities it is given, reads each POST's SSE
stream, and answers the server's live requests (`elicitation/create`,
`sampling/createMessage`, `roots/list`) with separate POSTs, recording everything it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import SERVERS_DIR, ManagedProcess, free_port, serving

LEGACY_SCRIPT = SERVERS_DIR / "legacy_everything.py"
LEGACY_MCP_REQUIREMENT = "mcp==1.30.0"
LEGACY_PROTOCOL_VERSION = "2025-11-25"
LEGACY_STARTUP_TIMEOUT = 60.0  # the first `uv run --isolated` may have to build the env
HOST = "127.0.0.1"


def uv_path() -> str | None:
    return shutil.which("uv")


def legacy_argv(port: int, *args: str, host: str = HOST) -> list[str]:
    """argv running the legacy fixture under mcp 1.30 in an isolated uv environment."""
    uv = uv_path() or "uv"
    return [
        uv,
        "run",
        "--isolated",
        "--no-project",
        "--with",
        LEGACY_MCP_REQUIREMENT,
        "python",
        str(LEGACY_SCRIPT),
        "--host",
        host,
        "--port",
        str(port),
        *args,
    ]


@dataclass(frozen=True)
class LegacyServer:
    url: str
    port: int
    process: ManagedProcess
    request_log: Path | None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def requests(self) -> list[dict[str, Any]]:
        """The fixture's --log: one dict per incoming JSON-RPC message (and GET/DELETE)."""
        if self.request_log is None or not self.request_log.exists():
            return []
        lines = self.request_log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


@contextlib.contextmanager
def serving_legacy(
    log_dir: Path,
    *args: str,
    event_store: bool = True,
    request_log: bool = True,
    name: str = "legacy_everything",
) -> Iterator[LegacyServer]:
    """Run the legacy fixture for the duration of the block (stopped however it ends).

    Its output goes to `log_dir/<name>-<port>.log`, its request log (if wanted) to
    `log_dir/<name>-<port>.requests.jsonl`. Extra `args` go to the fixture's CLI.
    """
    port = free_port(HOST)
    argv_args = list(args)
    if event_store:
        argv_args.append("--event-store")
    log_path: Path | None = None
    if request_log:
        log_path = log_dir / f"{name}-{port}.requests.jsonl"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("")
        argv_args += ["--log", str(log_path)]
    with serving(
        name,
        legacy_argv(port, *argv_args),
        port=port,
        log_path=log_dir / f"{name}-{port}.log",
        startup_timeout=LEGACY_STARTUP_TIMEOUT,
    ) as process:
        yield LegacyServer(f"http://{HOST}:{port}/mcp", port, process, log_path)


def start_legacy(stack: ExitStack, log_dir: Path, *args: str, **kwargs: Any) -> LegacyServer:
    """`serving_legacy` for ExitStack-style fixtures (like tests/conftest.py's start_upstream)."""
    return stack.enter_context(serving_legacy(log_dir, *args, **kwargs))


# --------------------------------------------------------------------------------------
# A raw 2025-11-25 client
# --------------------------------------------------------------------------------------

Answer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class Exchange:
    """One request on a session: what came back on its POST stream, and what was answered."""

    request: dict[str, Any]
    response: dict[str, Any] | None = None
    server_requests: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    answer_statuses: list[int] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        assert self.response is not None and "result" in self.response, self.response
        return self.response["result"]

    @property
    def text(self) -> str:
        """The text blocks of a CallToolResult, or of a GetPromptResult's messages."""
        result = self.result
        blocks = result.get("content") or [m.get("content", {}) for m in result.get("messages", [])]
        return "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict))

    @property
    def asked(self) -> list[str]:
        return [r["method"] for r in self.server_requests]


class LegacyClient:
    """A 2025-era session against one server URL, over an httpx.AsyncClient."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self.protocol_version = LEGACY_PROTOCOL_VERSION
        self._next_id = 1

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    async def initialize(self, capabilities: Mapping[str, Any]) -> dict[str, Any]:
        exchange = await self.request(
            "initialize",
            {
                "protocolVersion": LEGACY_PROTOCOL_VERSION,
                "capabilities": dict(capabilities),
                "clientInfo": {"name": "mcp-edge-legacy-tests", "version": "0"},
            },
        )
        self.protocol_version = exchange.result["protocolVersion"]
        await self.notify("notifications/initialized")
        return exchange.result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> int:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        response = await self.http.post(self.url, json=message, headers=self._headers())
        return response.status_code

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        answer: Answer | None = None,
        timeout: float = 20.0,
    ) -> Exchange:
        """Send one request; answer each server->client request on its stream with `answer`."""
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        exchange = Exchange(message)
        answering: list[asyncio.Task[None]] = []

        async def reply(server_request: dict[str, Any]) -> None:
            if answer is None:
                body: dict[str, Any] = {
                    "jsonrpc": "2.0",
                    "id": server_request["id"],
                    "error": {"code": -32601, "message": "this test client answers nothing"},
                }
            else:
                result = await answer(server_request)
                body = {"jsonrpc": "2.0", "id": server_request["id"], "result": result}
            response = await self.http.post(self.url, json=body, headers=self._headers())
            exchange.answer_statuses.append(response.status_code)

        async def read() -> None:
            async with self.http.stream(
                "POST", self.url, json=message, headers=self._headers()
            ) as response:
                if self.session_id is None:
                    self.session_id = response.headers.get("mcp-session-id")
                content_type = response.headers.get("content-type", "")
                if not content_type.startswith("text/event-stream"):
                    exchange.response = json.loads(await response.aread())
                    return
                async for event_id, data in sse_events(response):
                    if event_id:
                        exchange.event_ids.append(event_id)
                    if not data:
                        continue  # a priming event
                    incoming = json.loads(data)
                    if "method" in incoming and "id" in incoming:
                        exchange.server_requests.append(incoming)
                        answering.append(asyncio.create_task(reply(incoming)))
                    elif "method" in incoming:
                        exchange.notifications.append(incoming)
                    elif incoming.get("id") == request_id:
                        exchange.response = incoming
                        return

        try:
            await asyncio.wait_for(read(), timeout)
            await asyncio.gather(*answering)
        finally:
            for task in answering:
                task.cancel()
        return exchange

    @contextlib.asynccontextmanager
    async def standalone_stream(self, answer: Answer) -> AsyncIterator[list[dict[str, Any]]]:
        """Hold the session's GET stream open, answering requests that arrive on it."""
        seen: list[dict[str, Any]] = []
        opened = asyncio.Event()

        async def listen() -> None:
            headers = {**self._headers(), "Accept": "text/event-stream"}
            async with self.http.stream("GET", self.url, headers=headers) as response:
                opened.set()
                async for _, data in sse_events(response):
                    if not data:
                        continue
                    incoming = json.loads(data)
                    seen.append(incoming)
                    if "method" in incoming and "id" in incoming:
                        result = await answer(incoming)
                        body = {"jsonrpc": "2.0", "id": incoming["id"], "result": result}
                        await self.http.post(self.url, json=body, headers=self._headers())

        task = asyncio.create_task(listen())
        try:
            await asyncio.wait_for(opened.wait(), 10)
            await asyncio.sleep(0.1)  # let the server register the stream
            yield seen
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        if self.session_id:
            await self.http.delete(self.url, headers=self._headers())


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str | None, str]]:
    """(id, data) per SSE event of a streaming httpx response."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if event_id is not None or data:
                yield event_id, "\n".join(data)
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


# --------------------------------------------------------------------------------------
# The answers the conformance harness gives in the MRTR scenarios, as live answers.
# --------------------------------------------------------------------------------------

# Form answers by requested property (the harness: name Alice, ok true, color blue,
# context "test context").
HARNESS_FORM_VALUES: dict[str, Any] = {
    "name": "Alice",
    "ok": True,
    "color": "blue",
    "context": "test context",
}
HARNESS_ROOTS = {"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}


def harness_sampling_answer(text: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn",
    }


def harness_like(sampled_text: str = "The capital of France is Paris.") -> Answer:
    """Answers live requests the way the harness answers the matching inputRequests."""

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        method = request["method"]
        if method == "elicitation/create":
            properties = request["params"]["requestedSchema"].get("properties", {})
            content = {key: HARNESS_FORM_VALUES.get(key, "x") for key in properties}
            return {"action": "accept", "content": content}
        if method == "sampling/createMessage":
            return harness_sampling_answer(sampled_text)
        if method == "roots/list":
            return HARNESS_ROOTS
        raise AssertionError(f"unexpected server request {method}")

    return answer
