"""``mcp_edge.Edge`` in one process, without sockets: its configuration (the ``serve`` file's,
what only ``serve`` has refused), what it guards and what it passes untouched, its lifespan, and
the wire of the in-process upstream adapter (mcp_edge.upstream.inprocess).

The apps are the SDK's ``MCPServer``; a bare ASGI app only where it must misbehave (raise, answer
a 500 page, break a stream), which no SDK server does. The same Edge in real uvicorn processes,
beside ``mcp-edge serve``: tests/integration/test_in_process.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route

from mcp_edge import Edge, EdgeConfigError, LifespanFailed
from mcp_edge.core.seal import generate_key
from mcp_edge.sections import ConfigError
from mcp_edge.server.cli import main as cli_main

MODERN = "2026-07-28"
KEY = generate_key()
BASE = "http://127.0.0.1:8000"


def sdk_server() -> MCPServer:
    server = MCPServer("edge-unit")

    @server.tool()
    def seen(ctx: Context) -> str:
        """What the app saw of the request: its headers and query string."""
        request: Any = ctx.request_context.request
        return json.dumps({"headers": dict(ctx.headers or {}), "query": str(request.url.query)})

    return server


def sdk_app() -> Any:
    return sdk_server().streamable_http_app(json_response=True)


def edge(app: Any = None, **options: Any) -> Edge:
    options.setdefault("state_keys", KEY)
    options.setdefault("anonymous", True)
    options.setdefault("env", {})
    return Edge(app if app is not None else sdk_app(), **options)


def call(name: str = "seen", request_id: int = 1) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta},
    }


def headers(name: str = "seen", **extra: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        **extra,
    }


@contextlib.asynccontextmanager
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE, timeout=10) as c:
        yield c


# ---- configuration ------------------------------------------------------------------------


def test_no_key_and_no_auth_mode_are_refused_in_the_words_of_the_options() -> None:
    with pytest.raises(EdgeConfigError, match=r"^no state key: pass state_keys=") as no_key:
        Edge(sdk_app(), anonymous=True, env={})
    with pytest.raises(
        EdgeConfigError, match=r"^no authentication mode: pass anonymous=True"
    ) as no_mode:
        Edge(sdk_app(), state_keys=KEY, env={})
    assert isinstance(no_mode.value, ConfigError)
    for caught in (no_key, no_mode):
        assert "--" not in str(caught.value)  # no command-line flag
    with pytest.raises(EdgeConfigError, match=r"^state_keys=: ") as bad_key:
        Edge(sdk_app(), anonymous=True, state_keys="not-a-key", env={})
    with pytest.raises(EdgeConfigError, match=r"^MCP_EDGE_STATE_KEYS: "):
        Edge(sdk_app(), anonymous=True, env={"MCP_EDGE_STATE_KEYS": "not-a-key"})
    assert "not-a-key" not in str(bad_key.value)  # (a key is never printed)


def test_a_mistake_gets_check_configs_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same mistake in a serve file (check-config) and in the Edge's file or options."""
    bad = {"state": {"ttl_seconds": 0}, "limits": {"max_json_depth": 3}}
    serve_file = tmp_path / "serve.yaml"
    serve_file.write_text(
        yaml.safe_dump({**bad, "routes": [{"upstream": "http://127.0.0.1:9/mcp"}]})
    )
    assert cli_main(["check-config", "--config", str(serve_file)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("mcp-edge: configuration error: ")
    message = line.removeprefix("mcp-edge: configuration error: ")
    assert "state.ttl_seconds" in message and "limits.max_json_depth" in message
    edge_file = tmp_path / "edge.yaml"
    edge_file.write_text(yaml.safe_dump(bad))
    with pytest.raises(EdgeConfigError) as from_file:
        edge(config=edge_file)
    with pytest.raises(EdgeConfigError) as from_options:
        edge(state=bad["state"], limits=bad["limits"])
    assert str(from_file.value) == message  # the file's keys, as check-config names them
    # The options, as the program gives them.
    assert str(from_options.value) == message.replace(
        "state.ttl_seconds", 'state["ttl_seconds"]'
    ).replace("limits.max_json_depth", 'limits["max_json_depth"]')
    with pytest.raises(
        EdgeConfigError, match=r'^routes\[0\]\["policy"\]\["rules"\]\[0\]\["when"\]: '
    ):
        edge(routes=[{"name": "r", "policy": {"rules": [{"when": "1 +", "action": "deny"}]}}])
    with pytest.raises(EdgeConfigError, match=r"^path=: "):
        edge(path="no-slash")
    with pytest.raises(EdgeConfigError, match=r"^MCP_EDGE_STATE_TTL \(state\.ttl_seconds\): "):
        edge(env={"MCP_EDGE_STATE_TTL": "0"})


@pytest.mark.parametrize(
    ("options", "env", "named"),
    [
        ({"routes": [{"upstream": "http://127.0.0.1:3001/mcp"}]}, {}, 'routes[0]["upstream"]'),
        ({"routes": [{"endpoints": ["http://127.0.0.1:3001/mcp"]}]}, {}, 'routes[0]["endpoints"]'),
        ({"routes": [{"dns": True}]}, {}, 'routes[0]["dns"]'),
        ({"routes": [{"era": "legacy"}]}, {}, 'routes[0]["era"]'),
        ({"routes": [{"bridge": {"strategy": ["replay"]}}]}, {}, 'routes[0]["bridge"]'),
        ({"routes": [{"affinity": False}]}, {}, 'routes[0]["affinity"]'),
        ({"listen": {"port": 9000}}, {}, 'listen["port"]'),
        ({"listen": {"workers": 2}}, {}, 'listen["workers"]'),
        ({"limits": {"read_timeout": 5}}, {}, 'limits["read_timeout"]'),
        ({"logging": {"format": "text"}}, {}, 'logging["format"]'),
        ({}, {"MCP_EDGE_PORT": "9000"}, "MCP_EDGE_PORT"),
        ({}, {"MCP_EDGE_WORKERS": "4"}, "MCP_EDGE_WORKERS"),
        ({}, {"MCP_EDGE_UPSTREAM": "http://127.0.0.1:3001/mcp"}, "MCP_EDGE_UPSTREAM"),
        ({}, {"MCP_EDGE_ADVERTISE_URL": "http://10.0.0.1:9090"}, "MCP_EDGE_ADVERTISE_URL"),
    ],
)
def test_what_only_serve_has_is_refused_by_name(
    options: dict[str, Any], env: dict[str, str], named: str
) -> None:
    with pytest.raises(EdgeConfigError) as caught:
        edge(env=env, **options)
    assert named in str(caught.value)
    assert "applies to mcp-edge serve only" in str(caught.value)


def test_a_serve_file_is_refused_for_its_serve_only_keys(tmp_path: Path) -> None:
    serve_file = tmp_path / "serve.yaml"
    serve_file.write_text(
        yaml.safe_dump(
            {
                "listen": {"host": "0.0.0.0", "port": 8080},
                "cluster": {"advertise_url": "http://10.0.0.1:9090"},
                "admin": {"listen": {"port": 9100}},
                "routes": [{"name": "main", "upstream": "http://127.0.0.1:3001/mcp"}],
            }
        )
    )
    with pytest.raises(EdgeConfigError) as caught:
        edge(env={"MCP_EDGE_CONFIG": str(serve_file)})
    message = str(caught.value)
    for named in (
        "listen.host",
        "listen.port",
        "cluster",
        "admin.listen",
        "routes (main): upstream",
    ):
        assert named in message


def test_what_applies_in_process_is_accepted(tmp_path: Path) -> None:
    config = tmp_path / "edge.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "gateway": {"id": "edge-unit"},
                "routes": [
                    {
                        "name": "tools",
                        "path": "/tools/mcp",
                        "era": "modern",
                        "legacy_clients": "deny",
                        "policy": {"default": "allow"},
                        "rate_limits": {"per_principal": "100/minute"},
                        "cache": {"enabled": True},
                        "upstream_auth": {"principal_header": "X-MCP-Principal"},
                    }
                ],
            }
        )
    )
    built = edge(
        config=config,
        listen={"body_timeout": 5},
        logging={"access_log": True},
        state={"ttl_seconds": 60},
    )
    assert built.paths == ["/tools/mcp"]
    assert built.config.gateway.id == "edge-unit" and built.config.state.ttl_seconds == 60


def test_jwt_needs_the_public_url_in_process() -> None:
    jwt = {
        "mode": "jwt",
        "jwt": {"issuer": "https://issuer.example", "jwks_url": "https://issuer.example/jwks"},
    }
    with pytest.raises(
        EdgeConfigError, match=r"gateway=\{'public_url': \.\.\.\} .*: required in-process"
    ):
        edge(anonymous=False, auth=jwt)


def test_path_and_routes() -> None:
    assert edge().paths == ["/mcp"]
    assert edge(path="/tools/").paths == ["/tools"]
    assert edge(routes=[{"name": "a", "path": "/a"}, {"name": "b", "path": "/b"}]).paths == [
        "/a",
        "/b",
    ]
    with pytest.raises(EdgeConfigError, match="path= .* or routes=, not both"):
        edge(path="/a", routes=[{"path": "/b"}])
    with pytest.raises(EdgeConfigError, match="admin_path"):
        edge(admin_path="/mcp")


# ---- what is guarded, what passes ---------------------------------------------------------


async def test_only_the_mcp_path_is_guarded() -> None:
    server = sdk_server()
    seen: list[dict[str, str]] = []

    async def other(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        return JSONResponse({"path": request.url.path})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    host = Starlette(
        routes=[Route("/other", other), Mount("/", app=server.streamable_http_app())],
        lifespan=lifespan,
    )
    guarded = edge(host)
    async with guarded.lifespan(), client(guarded) as c:
        page = await c.get("/other", headers={"Authorization": "Bearer t", "Cookie": "c=1"})
        answer = await c.post("/mcp", json=call(), headers=headers(Authorization="Bearer t"))
    assert page.json() == {"path": "/other"} and "x-request-id" not in page.headers
    assert seen[0]["authorization"] == "Bearer t" and seen[0]["cookie"] == "c=1"
    app_saw = json.loads(answer.json()["result"]["content"][0]["text"])
    assert "authorization" not in app_saw["headers"] and answer.headers["x-request-id"]


async def test_under_a_mount_the_path_is_below_root_path() -> None:
    inner = edge()
    host = Starlette(routes=[Mount("/tools", app=inner)], lifespan=inner.lifespan)
    async with inner.lifespan(), client(host) as c:
        guarded = await c.post("/tools/mcp", json=call(), headers=headers())
        outside = await c.post("/mcp", json=call(), headers=headers())
    assert guarded.status_code == 200 and guarded.headers["x-request-id"]
    assert outside.status_code == 404  # the host's own answer


async def test_add_middleware_guards_the_hosts_mcp_path() -> None:
    server = sdk_server()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    host = Starlette(routes=[Mount("/", app=server.streamable_http_app())], lifespan=lifespan)
    host.add_middleware(Edge, state_keys=KEY, anonymous=True, env={})
    async with LifespanDriver(host), client(host) as c:
        answer = await c.post("/mcp", json=call(), headers=headers(Origin="http://evil.example"))
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == "Origin not allowed"


async def test_the_app_gets_what_an_upstream_gets() -> None:
    """The proxy's header rules: credentials, cookies, Origin and hop-by-hop headers dropped,
    the route's identity header set (whatever the client sent under its name), the caller's
    ``access_token`` out of the query; Host and the MCP headers as they came."""
    guarded = edge(routes=[{"upstream_auth": {"principal_header": "X-MCP-Principal"}}])
    sent = headers(
        Authorization="Bearer secret",
        Cookie="session=1",
        Origin="http://localhost",
        Connection="keep-alive, X-Hop",
        **{"X-Hop": "1", "X-MCP-Principal": "forged", "X-Kept": "yes"},
    )
    async with guarded.lifespan(), client(guarded) as c:
        answer = await c.post("/mcp?access_token=t&x=1", json=call(), headers=sent)
    saw = json.loads(answer.json()["result"]["content"][0]["text"])
    got = saw["headers"]
    for dropped in ("authorization", "cookie", "origin", "connection", "x-hop"):
        assert dropped not in got, dropped
    assert got["x-mcp-principal"] == "anonymous"
    assert got["host"] == "127.0.0.1:8000" and got["x-kept"] == "yes"
    assert got["mcp-name"] == "seen" and got["mcp-protocol-version"] == MODERN
    assert saw["query"] == "x=1"


# ---- lifespan -----------------------------------------------------------------------------


class LifespanDriver:
    """An ASGI server's side of the lifespan protocol: start-up on enter, shutdown on exit."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self.sent: list[dict[str, Any]] = []
        self._to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        await self._answers.put(message)

    async def startup(self) -> dict[str, Any]:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        self.task = asyncio.ensure_future(self.app(scope, self._to_app.get, self._send))
        await self._to_app.put({"type": "lifespan.startup"})
        return await asyncio.wait_for(self._answers.get(), 10)

    async def shutdown(self) -> dict[str, Any]:
        await self._to_app.put({"type": "lifespan.shutdown"})
        answer = await asyncio.wait_for(self._answers.get(), 10)
        await asyncio.wait_for(self.task, 10)
        return answer

    async def __aenter__(self) -> LifespanDriver:
        answer = await self.startup()
        assert answer["type"] == "lifespan.startup.complete", answer
        return self

    async def __aexit__(self, *exc: object) -> None:
        answer = await self.shutdown()
        assert answer["type"] == "lifespan.shutdown.complete", answer


def starlette_with(lifespan: Any) -> Starlette:
    return Starlette(routes=[], lifespan=lifespan)


async def test_the_apps_lifespan_runs_within_the_edges() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, str]]:
        events.append("app started")
        yield {"from_app": "yes"}
        events.append("app stopped")

    guarded = edge(starlette_with(lifespan), admin_path="/edge")
    driver = LifespanDriver(guarded)
    async with client(guarded) as c:
        assert (await c.get("/edge/readyz")).status_code == 503
        async with driver:
            assert events == ["app started"] and guarded.started
            assert driver.state["from_app"] == "yes"  # the app's state reaches requests
            assert (await c.get("/edge/readyz")).status_code == 200
        assert events == ["app started", "app stopped"] and not guarded.started


async def test_an_app_that_fails_to_start_is_reported_once() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("database unreachable")
        yield

    driver = LifespanDriver(edge(starlette_with(lifespan)))
    answer = await driver.startup()
    await asyncio.wait_for(driver.task, 10)
    assert answer["type"] == "lifespan.startup.failed"
    # The cause, not the traceback Starlette's router sent: one line.
    assert answer["message"] == (
        "mcp-edge: the wrapped app did not start: RuntimeError: database unreachable"
    )
    assert [m["type"] for m in driver.sent] == ["lifespan.startup.failed"]


async def test_a_start_failing_in_a_task_group_is_reported_by_the_tasks_exception() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async def connect() -> None:
            raise ConnectionError("cache is down")

        async with anyio.create_task_group() as tg:
            tg.start_soon(connect)
            await anyio.sleep(5)
        yield

    driver = LifespanDriver(edge(starlette_with(lifespan)))
    answer = await driver.startup()
    await asyncio.wait_for(driver.task, 10)
    assert answer["message"] == (
        "mcp-edge: the wrapped app did not start: ConnectionError: cache is down"
    )


def keyless_host_app() -> Starlette:
    async def home(_: Request) -> PlainTextResponse:
        return PlainTextResponse("home")

    return Starlette(
        routes=[Route("/", home)], middleware=[Middleware(Edge, anonymous=True, env={})]
    )


async def test_an_edge_its_host_app_builds_reports_its_error_by_its_start() -> None:
    """Built by Starlette's middleware stack, an Edge without a key does not raise there (which
    would fail the host's every request, and which uvicorn's --lifespan auto would take for no
    lifespan support): its start fails, in one line naming the option."""
    driver = LifespanDriver(keyless_host_app())
    answer = await driver.startup()
    assert answer["type"] == "lifespan.startup.failed"
    assert answer["message"].startswith("mcp-edge: no state key: pass state_keys=")


async def test_without_a_lifespan_it_refuses_its_paths_and_serves_the_hosts() -> None:
    async with client(keyless_host_app()) as c:
        assert (await c.get("/")).text == "home"
        answer = await c.post("/mcp", json=call(), headers=headers())
        assert answer.status_code == 503
        assert answer.json()["error"]["data"] == {"reason": "not_started"}


async def test_a_failing_shutdown_is_reported() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        raise RuntimeError("flush failed")

    driver = LifespanDriver(edge(starlette_with(lifespan)))
    assert (await driver.startup())["type"] == "lifespan.startup.complete"
    answer = await driver.shutdown()
    assert answer["type"] == "lifespan.shutdown.failed"
    assert "the wrapped app" in answer["message"] and "flush failed" in answer["message"]


async def test_an_app_without_lifespan_support_is_served_without(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def http_only(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"

    caplog.set_level(logging.WARNING, logger="mcp_edge")
    guarded = edge(http_only)
    async with LifespanDriver(guarded):
        assert guarded.started
    assert any("served without a lifespan" in r.getMessage() for r in caplog.records)


async def test_without_a_lifespan_mcp_requests_get_503_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_edge")
    guarded = edge()
    async with client(guarded) as c:
        answers = [await c.post("/mcp", json=call(), headers=headers()) for _ in range(2)]
    for answer in answers:
        assert answer.status_code == 503
        assert answer.json()["error"]["data"] == {"reason": "not_started"}
    lines = [r for r in caplog.records if "has not started" in r.getMessage()]
    assert len(lines) == 1 and "lifespan" in lines[0].getMessage()


async def test_an_edge_starts_once() -> None:
    guarded = edge()
    async with guarded.lifespan():
        pass
    with pytest.raises(LifespanFailed, match="started before"):
        async with guarded.lifespan():
            pass


# ---- an app that misbehaves ---------------------------------------------------------------


async def test_an_exception_in_the_app_is_the_proxys_upstream_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raise ValueError("a bug in a tool")

    caplog.set_level(logging.ERROR, logger="mcp_edge")
    guarded = edge(broken)
    async with guarded.lifespan(), client(guarded) as c:
        answer = await c.post("/mcp", json=call(request_id=7), headers=headers())
    assert answer.status_code == 502
    assert answer.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32603,
            "message": "Upstream failed",
            "data": {"reason": "upstream_error", "status": 500},
        },
    }
    raised = [r for r in caplog.records if r.name == "mcp_edge" and r.exc_info]
    assert raised and "a bug in a tool" in str(raised[0].exc_info[1])  # type: ignore[index]


async def test_a_500_page_is_the_proxys_upstream_error() -> None:
    async def page(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"text/html")],
                }
            )
            await send({"type": "http.response.body", "body": b"<h1>down</h1>"})

    guarded = edge(page)
    async with guarded.lifespan(), client(guarded) as c:
        answer = await c.post("/mcp", json=call(request_id=3), headers=headers())
    assert answer.status_code == 502
    assert answer.json()["error"]["data"] == {"reason": "upstream_error", "status": 503}


async def test_a_broken_stream_ends_with_the_proxys_error_event() -> None:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        await send(
            {
                "type": "http.response.body",
                "body": b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n",
                "more_body": True,
            }
        )
        raise ConnectionError("the tool's backend went away")

    guarded = edge(stream)
    async with guarded.lifespan(), client(guarded) as c:
        answer = await c.post("/mcp", json=call(request_id=5), headers=headers())
    assert answer.headers["x-accel-buffering"] == "no"
    data = [
        json.loads(line.removeprefix("data: "))
        for line in answer.text.splitlines()
        if line.startswith("data: ")
    ]
    assert data[0]["method"] == "notifications/progress"
    assert data[-1]["id"] == 5
    assert data[-1]["error"]["data"] == {"reason": "upstream_broken_stream"}


# ---- what the host mounts, what the Edge publishes ----------------------------------------


async def test_the_admin_app_mounts_on_the_host() -> None:
    guarded = edge()
    host = Starlette(routes=[Mount("/ops", app=guarded.admin_app), Mount("/", app=guarded)])
    async with guarded.lifespan(), client(host) as c:
        await c.post("/mcp", json=call(), headers=headers())
        ready = await c.get("/ops/readyz")
        metrics = await c.get("/ops/metrics")
    assert ready.json()["status"] == "ready"
    assert 'mcp_edge_requests_total{method="tools/call",route="default",status="200"}' in (
        metrics.text
    )


async def test_jwt_callers_are_sent_to_the_edges_metadata() -> None:
    """In jwt mode the Edge challenges a caller without a token (the app never sees it) and
    serves the protected resource metadata the challenge points to, for its public URL."""
    guarded = edge(
        anonymous=False,
        gateway={"public_url": "https://tools.example.com"},
        security={"allowed_hosts": ["127.0.0.1:*"]},
        auth={
            "mode": "jwt",
            "jwt": {"issuer": "https://as.example.com", "jwks_url": "https://as.example.com/jwks"},
        },
    )
    async with guarded.lifespan(), client(guarded) as c:
        refused = await c.post("/mcp", json=call(), headers=headers())
        document = await c.get("/.well-known/oauth-protected-resource/mcp")
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert (
        'resource_metadata="https://tools.example.com/.well-known/oauth-protected-resource/mcp"'
        in (challenge)
    )
    assert document.json()["resource"] == "https://tools.example.com/mcp"
    assert document.json()["authorization_servers"] == ["https://as.example.com"]


async def test_whatever_escapes_the_edge_is_a_json_rpc_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The route net of ``serve`` guards the in-process routes too: a layer that raises gives
    the client ``-32603`` (HTTP 500) for its request's id, never the host's plain-text 500."""
    from mcp_edge.edge.flow import FlowMiddleware

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("something broke")

    guarded = edge()
    async with LifespanDriver(guarded), client(guarded) as c:
        monkeypatch.setattr(FlowMiddleware, "__call__", failing)
        answer = await c.post("/mcp", json=call(request_id=41), headers=headers())
    assert answer.status_code == 500
    assert answer.json() == {
        "jsonrpc": "2.0",
        "id": 41,
        "error": {"code": -32603, "message": "Internal error", "data": {"reason": "internal"}},
    }
