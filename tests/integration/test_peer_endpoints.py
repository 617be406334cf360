"""The replicas' own endpoints under attack: ``/.mcp-edge/forward`` (retries for calls parked on
another replica) and ``/.mcp-edge/legacy`` (2025-era requests relayed to the replica holding a
stdio virtual session), and the relay target a client might try to choose.

Real processes: two gateway replicas (A and B) in front of a 2025-era HTTP server
(``tests/servers/legacy_server.py``, strategy ``park``, its request log proving what reached
it) and the same server over stdio (one process per replica). B advertises itself at a
``Recorder`` (a listening socket the test reads): what A sends B for a parked call or a virtual
session lands there, so the test holds genuine messages between replicas, as an attacker on that
network would, and replays them to B with other bodies, methods or sizes.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from mcp_edge.cluster.forward import BODY_PURPOSE, open_payload
from mcp_edge.cluster.relay import Relay
from mcp_edge.core.seal import KeyRing, StateKey, b64u_encode, parse_key_spec
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.stdio.config import StdioUpstreamConfig
from mcp_edge.upstream.stdio.front import LegacyFront
from mcp_edge.upstream.stdio.processes import StdioSessions
from mcp_edge.upstream.stdio.spec import build_spec
from tests.conftest import Running, start_gateway
from tests.support.legacy import open_legacy_session, require_legacy, start_legacy
from tests.support.processes import run_bounded, venv_command
from tests.support.raw_http import Captured, Conn, Recorder, new_marker
from tests.support.sandbox import stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
CAPS = {"elicitation": {"form": {}}}
FORWARD = "/.mcp-edge/forward"
RELAY = "/.mcp-edge/legacy"
HUGE = 12 * 1024 * 1024


def routes(legacy_url: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "park",
            "path": "/park",
            "upstream": legacy_url,
            "era": "legacy",
            "bridge": {"strategy": "park"},
        },
        {
            "name": "stdio",
            "path": "/stdio",
            "upstream": {"command": stdio_server_command("legacy_server.py", "--stdio")},
        },
    ]


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    require_legacy()
    log = module_tmp / "legacy-requests.jsonl"
    with ExitStack() as stack:
        recorder = stack.enter_context(Recorder())
        legacy = start_legacy(stack, module_tmp, "--instance", "peer", "--log", str(log))
        a = start_gateway(stack, module_tmp, keys=state_key, config={"routes": routes(legacy.url)})
        b = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={"routes": routes(legacy.url), "cluster": {"advertise_url": recorder.url}},
        )
        for gw in (a, b):
            wait_ready(gw)
        yield {"a": a, "b": b, "recorder": recorder, "log": log, "key": state_key}


def wait_ready(gw: Running, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(gw.base + "/readyz", timeout=5).status_code == 200:
            return
        time.sleep(0.2)
    raise TimeoutError(f"not ready\n{gw.process.log_tail()}")


def call(
    gw: Running, route: str, name: str, arguments: dict, request_id: int | str = 1, **extra: Any
) -> dict:
    params = {
        "name": name,
        "arguments": arguments,
        **extra,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": CAPS,
        },
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    r = httpx.post(
        f"{gw.base}/{route}",
        timeout=30,
        json=message,
        headers={
            "Accept": ACCEPT,
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
        },
    )
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")][
            -1
        ]
    return r.json()


def forwarded_id(env: dict, captured: Captured) -> Any:
    """The client's request id in a captured forward (its body is sealed with the ring)."""
    ring = KeyRing([parse_key_spec(env["key"])])
    payload = open_payload(
        ring, BODY_PURPOSE, captured.body.decode(), now=time.time(), max_chars=1 << 20
    )
    return None if payload is None else payload.get("id")


def capture_forward(env: dict, size: int) -> Captured:
    """A retry for a call parked on B, as A forwards it to B (round 1 on B, round 2 on A); found
    at the recorder by the request id the test gave it."""
    first = call(env["b"], "park", "book_table", {"date": f"2026-01-{size % 28 + 1:02d}"})["result"]
    (key,) = first["inputRequests"]
    marker = new_marker("forward")
    answer = {key: {"action": "accept", "content": {"size": size}}}
    lost = call(
        env["a"],
        "park",
        "book_table",
        {"date": f"2026-01-{size % 28 + 1:02d}"},
        request_id=marker,
        inputResponses=answer,
        requestState=first["requestState"],
    )
    assert lost["error"]["data"]["reason"] == "flow_lost"  # the recorder did not deliver it
    captured = env["recorder"].wait_until(
        lambda c: c.path == FORWARD and forwarded_id(env, c) == marker
    )
    assert captured.method == "POST"
    return captured


def legacy_session(gw: Running) -> str:
    with httpx.Client(timeout=30) as http:
        headers = open_legacy_session(
            http,
            f"{gw.base}/stdio",
            client="old",
            capabilities={"elicitation": {}},
            initialized=False,
        )
    return headers["Mcp-Session-Id"]


def capture_relay(env: dict) -> Captured:
    """A 2025-era ``tools/list`` for a virtual session held by B, as A relays it to B; found at
    the recorder by the request id the test gave it."""
    session = legacy_session(env["b"])
    marker = new_marker("relay")
    httpx.post(
        f"{env['a'].base}/stdio",
        timeout=30,
        json={"jsonrpc": "2.0", "id": marker, "method": "tools/list"},
        headers={"Accept": ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"},
    )
    captured = env["recorder"].wait_until(lambda c: c.path == RELAY and marker.encode() in c.body)
    assert captured.method == "POST" and json.loads(captured.body)["id"] == marker
    return captured


def head_only(
    port: int, data: bytes, timeout: float = 5.0
) -> tuple[int, dict[str, str], float, bool]:
    """Send a request head (no body) and read the answer: status, headers, seconds, closed after."""
    with Conn.open(port, timeout=timeout) as conn:
        started = time.monotonic()
        conn.send(data)
        response = conn.read_response()
        elapsed = time.monotonic() - started
        return response.status, response.headers, elapsed, conn.wait_closed(2.0)


def forged(prefix: str, key: str) -> str:
    """A token with the right prefix and a real key id of the ring (key ids are public: every
    sealed requestState shows one), without the key."""
    return f"{prefix}.{parse_key_spec(key).kid}.{b64u_encode(os.urandom(96))}"


def raw_post(path: str, length: int, *headers: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: text/plain",
        f"Content-Length: {length}",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def upstream_log(env: dict) -> str:
    return env["log"].read_text() if env["log"].exists() else ""


def completed_on_b(env: dict) -> int:
    """A call parked on B and completed on B, its answer a number no other request carries; its
    answer has reached the upstream (the legacy server's log) when this returns."""
    size = 800_000 + int.from_bytes(os.urandom(3), "big") % 99_999
    first = call(env["b"], "park", "book_table", {"date": "2026-02-01"})["result"]
    (key,) = first["inputRequests"]
    done = call(
        env["b"],
        "park",
        "book_table",
        {"date": "2026-02-01"},
        requestState=first["requestState"],
        inputResponses={key: {"action": "accept", "content": {"size": size}}},
    )
    assert "result" in done, done
    deadline = time.monotonic() + 30
    while str(size) not in upstream_log(env):
        assert time.monotonic() < deadline, f"{size} never reached the upstream"
        time.sleep(0.02)
    return size


def side_effects(gw: Running) -> dict[str, int]:
    """What the stdio process of ``gw`` executed (its own counters, asked through ``gw``)."""
    doc = call(gw, "stdio", "stats_snapshot", {})
    return json.loads(doc["result"]["content"][0]["text"])["side_effects"]


# ---- refused before the body is read -------------------------------------------------------


@pytest.mark.parametrize("path", [FORWARD, RELAY])
@pytest.mark.parametrize(
    "case", ["no header", "forged header", "captured header, oversized", "captured header, chunked"]
)
def test_refused_before_the_body_is_sent(env, path, case):
    """Headers only, announcing 12 MiB: the refusal arrives at once, without a byte of body, and
    the connection is closed."""
    b = env["b"]
    if case == "no header":
        status, headers, elapsed, closed = head_only(b.port, raw_post(path, HUGE))
        expected = 403
    elif case == "forged header":
        token = forged("mcpef2" if path == FORWARD else "mcper2", env["key"])
        status, headers, elapsed, closed = head_only(
            b.port, raw_post(path, HUGE, f"X-MCP-Edge-Peer: {token}")
        )
        expected = 403
    else:
        captured = capture_forward(env, 40) if path == FORWARD else capture_relay(env)
        if case == "captured header, oversized":
            data, expected = captured.replay(body=b"", length=HUGE), 413
        else:
            data, expected = (
                captured.replay(body=b"").replace(
                    b"Content-Length: 0", b"Transfer-Encoding: chunked"
                ),
                411,
            )
        status, headers, elapsed, closed = head_only(b.port, data)
    assert status == expected, (status, headers)
    assert elapsed < 3.0 and closed
    assert headers.get("content-length") == "0"


def test_many_slow_oversized_bodies_leave_memory_alone(env):
    """40 callers without the ring announce 12 MiB each: each is refused at its head, and what
    they go on sending is not read, so the gateway's memory does not move."""
    b = env["b"]
    before = rss(b.process.pid)
    conns = []
    try:
        for i in range(40):
            path, prefix = (FORWARD, "mcpef2") if i % 2 else (RELAY, "mcper2")
            conn = Conn.open(b.port, timeout=5)
            conn.send(raw_post(path, HUGE, f"X-MCP-Edge-Peer: {forged(prefix, env['key'])}"))
            conns.append(conn)
        assert [conn.read_response().status for conn in conns] == [403] * 40
        chunk = b"x" * 65536
        for _ in range(32):  # up to 2 MiB more from each, as long as anything takes it
            for conn in conns:
                try:
                    conn.sock.settimeout(0.05)
                    conn.sock.send(chunk)
                except OSError:  # closed by the gateway (or the buffers are full)
                    pass
        grew = rss(b.process.pid) - before
    finally:
        for conn in conns:
            conn.close()
    assert grew < 16 * 1024 * 1024, f"RSS grew by {grew / 2**20:.1f} MiB"


# ---- a captured message authorizes its own body, once -------------------------------------


def test_a_captured_relay_header_does_not_authorize_another_request(env):
    b = env["b"]
    captured = capture_relay(env)
    marker = f"relay-marker-{os.urandom(4).hex()}"
    other = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "side_effect", "arguments": {"key": marker}},
        }
    ).encode()
    with Conn.open(b.port) as conn:
        conn.send(captured.replay(body=other))
        assert conn.read_response().status == 403  # another body
    with Conn.open(b.port) as conn:
        conn.send(captured.replay(method="DELETE", body=b""))
        assert conn.read_response().status == 403  # another method (it would end the session)
    with Conn.open(b.port) as conn:
        conn.send(captured.replay(drop=("mcp-session-id",)))
        assert conn.read_response().status == 403  # without the session it names
    with Conn.open(b.port) as conn:  # the message itself is genuine: accepted, once
        conn.send(captured.replay())
        response = conn.read_response()
        assert response.status == 200 and b"book_table" in response.body
    with Conn.open(b.port) as conn:
        conn.send(captured.replay())
        assert conn.read_response().status == 403
    assert marker not in side_effects(b)  # the other body never reached the process


def test_a_captured_forward_does_not_carry_another_body(env):
    b = env["b"]
    marker = 900_000 + int.from_bytes(os.urandom(3), "big") % 99_999
    x, y = capture_forward(env, 41), capture_forward(env, marker)
    assert str(marker) not in upstream_log(env)
    with Conn.open(b.port) as conn:  # X's header, Y's (genuine, sealed) body
        conn.send(x.replay(body=y.body))
        assert conn.read_response().status == 403
    assert str(marker) not in upstream_log(env)  # Y's answer never reached the upstream
    with Conn.open(b.port) as conn:  # X as it was sent: acted on, once
        conn.send(x.replay())
        response = conn.read_response()
        assert response.status == 200 and response.body.startswith(b"mcpefa2.")
    with Conn.open(b.port) as conn:
        conn.send(x.replay())
        assert conn.read_response().status == 403
    completed_on_b(env)  # the positive control: sent last, it reached the upstream
    assert str(marker) not in upstream_log(env)


# ---- the relay target comes from a sealed session id only ---------------------------------


def test_unsealed_sessions_on_a_stdio_route_are_refused(module_tmp: Path, state_key: str):
    """A stdio route whose session ids are not sealed would relay to whatever a client wrote
    after the '@' of its Mcp-Session-Id: check-config and serve refuse it, in one line."""
    path = module_tmp / "unsealed.yaml"
    path.write_text(
        json.dumps(
            {
                "auth": {"mode": "anonymous"},
                "routes": [
                    {"name": "files", "upstream": {"command": ["true"]}, "seal_sessions": False}
                ],
            }
        )
    )
    env = {"MCP_EDGE_STATE_KEYS": state_key}
    for command in (["check-config"], ["serve", "--port", "0"]):
        out = run_bounded(
            [*venv_command("mcp-edge"), *command, "--config", str(path)], timeout=60, env=env
        )
        assert out.returncode == 2, out.output
        lines = out.output.strip().splitlines()
        assert (
            len(lines) == 1
            and "routes.0: seal_sessions: a stdio route needs sealed session ids" in lines[0]
        )


def test_a_client_chosen_relay_target_is_never_contacted(env):
    with Recorder() as target:
        for session in (f"x@{target.url}/", f"@{target.url}", f"mcpes1.x.y@{target.url}"):
            r = httpx.post(
                f"{env['a'].base}/stdio",
                timeout=10,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "Accept": ACCEPT,
                    "Mcp-Session-Id": session,
                    "MCP-Protocol-Version": "2025-11-25",
                },
            )
            assert r.status_code == 404, r.text
        capture_relay(
            env
        )  # the positive control: A relays a genuine session's request, to B's address
        assert target.connections == 0


async def test_the_front_never_relays_to_an_address_from_the_client():
    """Behind the guard, the stdio front takes the replica to relay to from the session id the
    guard opened from a sealed token, never from the request's own header (even on a route whose
    guard does not seal session ids, which the configuration refuses)."""
    ring = KeyRing([StateKey.from_secret(os.urandom(32))])
    sessions = StdioSessions("files", build_spec(StdioUpstreamConfig(command=["true"])), Metrics())
    with Recorder() as target:
        async with aiohttp.ClientSession() as client:
            front = LegacyFront(
                "files", sessions, owner="http://127.0.0.1:1", relay=Relay(ring, lambda: client)
            )
            sent: list[dict[str, Any]] = []
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            scope = {
                "type": "http",
                "method": "POST",
                "path": "/mcp",
                "headers": [(b"mcp-session-id", f"x@{target.url}".encode())],
            }
            # As the transport middleware leaves it: the body read and parsed once, no sealed id opened.
            scope[SCOPE_KEY] = RequestContext(body=body, parsed=True, message=json.loads(body))
            await front(scope, receive, send)
        assert sent[0]["status"] == 404
        assert target.connections == 0
