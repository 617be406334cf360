"""Replica-to-replica messages (mcp_edge.core.peer), the gate in front of the replicas' endpoints
(mcp_edge.cluster.gate), listener roles (mcp_edge.cluster.listeners) and their configuration."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_edge.cluster.gate import PeerEndpoint, PeerGate
from mcp_edge.cluster.listeners import ADMIN, CLUSTER, PUBLIC, Listener, Roles, path_role
from mcp_edge.core import peer
from mcp_edge.core.seal import KeyRing, StateKey, seal_blob
from mcp_edge.edge.body import BodyBudget
from mcp_edge.server.config import ConfigError, load_config


def ring(*secrets: bytes) -> KeyRing:
    return KeyRing([StateKey.from_secret(s) for s in secrets or (os.urandom(32),)])


# ---------------------------------------------------------------- sealed messages


def test_a_message_opens_for_its_method_path_and_body_only():
    r = ring()
    token = peer.seal_message(
        r, peer.RELAY, {"r": "a", "p": "alice"}, method="POST", path="/x", body=b"one", now=1000.0
    )
    claims = peer.open_message(r, peer.RELAY, token, method="POST", path="/x", now=1010.0)
    assert claims is not None and claims["r"] == "a" and claims["exp"] == 1000 + peer.TTL_SECONDS
    assert peer.body_matches(claims, b"one")
    assert not peer.body_matches(claims, b"one ") and not peer.body_matches(claims, b"")
    assert peer.open_message(r, peer.RELAY, token, method="DELETE", path="/x", now=1010.0) is None
    assert peer.open_message(r, peer.RELAY, token, method="POST", path="/y", now=1010.0) is None
    assert peer.open_message(r, peer.FORWARD, token, method="POST", path="/x", now=1010.0) is None
    assert (
        peer.open_message(r, peer.RELAY, token, method="POST", path="/x", now=1000.0 + 31) is None
    )
    assert (
        peer.open_message(ring(), peer.RELAY, token, method="POST", path="/x", now=1010.0) is None
    )
    assert peer.open_message(r, peer.RELAY, None, method="POST", path="/x", now=1010.0) is None
    assert (
        peer.open_message(r, peer.RELAY, token + "A", method="POST", path="/x", now=1010.0) is None
    )


def test_a_token_without_the_fields_is_refused():
    r = ring()
    for doc in (
        b'{"m":"POST","u":"/x","exp":2000}',
        b'{"m":"POST","u":"/x","d":"x","j":"y"}',
        b"[]",
    ):
        token = seal_blob(r, peer.RELAY, doc)
        assert peer.open_message(r, peer.RELAY, token, method="POST", path="/x", now=1000.0) is None


def test_each_message_is_acted_on_once_until_it_expires():
    seen = peer.SeenIds(max_entries=2)
    a, b, c = ({"j": j, "exp": 100} for j in "abc")
    assert seen.first_time(a, 90) and not seen.first_time(a, 95)
    assert seen.first_time(b, 90)
    assert not seen.first_time(c, 95)  # full of unexpired ids: refused (fail closed)
    assert seen.first_time(c, 101) and len(seen) == 1  # the expired ones are forgotten


# ---------------------------------------------------------------- the gate


class Exchange:
    """One request through the gate, recording whether the body was asked for and the answer."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        self.body = body
        self.receives = 0
        self.sent: list[dict[str, Any]] = []
        self.handled: tuple[dict[str, Any], bytes] | None = None

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def handler(self, claims: dict[str, Any], body: bytes, receive: Any) -> None:
        self.handled = (claims, body)

    @property
    def status(self) -> int:
        return self.sent[0]["status"] if self.sent else 0

    @property
    def reason(self) -> str:
        return (
            dict(self.sent[0]["headers"]).get(b"x-mcp-edge-refused", b"").decode()
            if self.sent
            else ""
        )


ENDPOINT = PeerEndpoint("relay", peer.RELAY, frozenset({"POST", "DELETE"}), 1000)


def sealed(
    r: KeyRing, body: bytes, *, method: str = "POST", path: str = "/p", now: float = 1000.0
) -> str:
    return peer.seal_message(
        r, peer.RELAY, {"r": "a"}, method=method, path=path, body=body, now=now
    )


@pytest.mark.parametrize(
    "case,status,reason",
    [
        ("no header", 403, "seal"),
        ("another key", 403, "seal"),
        ("another path", 403, "seal"),
        ("wrong method", 405, "method"),
        ("no length", 411, "length"),
        ("chunked", 411, "length"),
        ("too large", 413, "size"),
    ],
)
async def test_refused_before_the_body_is_read(case: str, status: int, reason: str):
    r = ring()
    gate = PeerGate(r, budget=BodyBudget(10_000), body_timeout=5, clock=lambda: 1000.0)
    body = b"x" * 10
    headers = {"x-mcp-edge-peer": sealed(r, body), "content-length": str(len(body))}
    method = "POST"
    if case == "no header":
        del headers["x-mcp-edge-peer"]
    elif case == "another key":
        headers["x-mcp-edge-peer"] = sealed(ring(), body)
    elif case == "another path":
        headers["x-mcp-edge-peer"] = sealed(r, body, path="/q")
    elif case == "wrong method":
        method = "PUT"
    elif case == "no length":
        del headers["content-length"]
    elif case == "chunked":
        headers["transfer-encoding"] = "chunked"
    elif case == "too large":
        headers["content-length"] = "1001"
    ex = Exchange(method, "/p", headers, body)
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert (ex.status, ex.reason, ex.receives, ex.handled) == (status, reason, 0, None)
    assert (b"connection", b"close") in ex.sent[0]["headers"]


async def test_the_body_must_be_the_sealed_one_and_is_taken_once():
    r = ring()
    budget = BodyBudget(10_000)
    gate = PeerGate(r, budget=budget, body_timeout=5, clock=lambda: 1000.0)
    token = sealed(r, b"honest")
    ex = Exchange("POST", "/p", {"x-mcp-edge-peer": token, "content-length": "6"}, b"forged")
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert (ex.status, ex.reason, ex.handled) == (403, "body", None)
    ex = Exchange("POST", "/p", {"x-mcp-edge-peer": token, "content-length": "6"}, b"honest")
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert ex.handled is not None and ex.handled[1] == b"honest" and ex.sent == []
    ex = Exchange("POST", "/p", {"x-mcp-edge-peer": token, "content-length": "6"}, b"honest")
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert (ex.status, ex.reason, ex.handled) == (403, "replayed", None)
    assert budget.in_use == 0  # every reservation given back


async def test_peer_bodies_count_against_the_body_budget():
    r = ring()
    budget = BodyBudget(1000)
    budget.try_take(995)  # client requests in flight
    gate = PeerGate(r, budget=budget, body_timeout=5, clock=lambda: 1000.0)
    body = b"x" * 10
    ex = Exchange("POST", "/p", {"x-mcp-edge-peer": sealed(r, body), "content-length": "10"}, body)
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert (ex.status, ex.reason, ex.receives) == (503, "body_budget", 0)
    assert budget.in_use == 995


async def test_a_bodyless_method_binds_the_empty_body():
    r = ring()
    gate = PeerGate(r, budget=BodyBudget(1000), body_timeout=5, clock=lambda: 1000.0)
    ex = Exchange("DELETE", "/p", {"x-mcp-edge-peer": sealed(r, b"", method="DELETE")})
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert ex.handled is not None and ex.handled[1] == b""
    ex = Exchange("DELETE", "/p", {"x-mcp-edge-peer": sealed(r, b"", method="POST")})
    await gate.serve(ENDPOINT, ex.scope, ex.receive, ex.send, ex.handler)
    assert (ex.status, ex.reason) == (403, "seal")


# ---------------------------------------------------------------- listeners


def test_roles_by_listener():
    assert (path_role("/.mcp-edge/forward"), path_role("/metrics"), path_role("/mcp")) == (
        CLUSTER,
        ADMIN,
        PUBLIC,
    )
    one = Roles([Listener(PUBLIC, "0.0.0.0", 8080)])
    assert not one.split and one.allows(
        {"path": "/.mcp-edge/forward", "server": ("10.0.0.1", 8080)}
    )
    two = Roles([Listener(PUBLIC, "0.0.0.0", 8080), Listener(CLUSTER, "10.0.0.1", 9090)])
    public, cluster = {"server": ("10.0.0.1", 8080)}, {"server": ("10.0.0.1", 9090)}
    assert not two.allows({**public, "path": "/.mcp-edge/forward"})
    assert not two.allows({**public, "path": "/.mcp-edge/legacy"})
    assert two.allows({**public, "path": "/mcp"}) and two.allows({**public, "path": "/metrics"})
    assert two.allows({**cluster, "path": "/.mcp-edge/forward"})
    assert not two.allows({**cluster, "path": "/mcp"}) and not two.allows(
        {**cluster, "path": "/healthz"}
    )
    assert not two.allows({"server": None, "path": "/.mcp-edge/forward"})  # unknown: public


def write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_cluster_listener_config(tmp_path: Path):
    from mcp_edge.server.app import advertise_url

    route = [{"name": "a", "upstream": "http://127.0.0.1:1/mcp"}]
    config = load_config(
        write(
            tmp_path,
            {
                "listen": {"host": "127.0.0.1", "port": 8080},
                "cluster": {"listen": {"port": 9090}},
                "routes": route,
            },
        ),
        env={},
    )
    assert [(x.role, x.host, x.port) for x in config.listeners()] == [
        (PUBLIC, "127.0.0.1", 8080),
        (CLUSTER, "127.0.0.1", 9090),
    ]
    assert advertise_url(config) == "http://127.0.0.1:9090"
    env = load_config(write(tmp_path, {"routes": route}), env={"MCP_EDGE_CLUSTER_PORT": "9191"})
    assert env.cluster.listen is not None and env.cluster.listen.port == 9191
    links = load_config(
        write(tmp_path, {"routes": route}), env={"MCP_EDGE_CLUSTER_PORT": "tcp://10.0.0.1:9"}
    )
    assert links.cluster.listen is None  # a Kubernetes service link, not a setting
    with pytest.raises(ConfigError, match=r"cluster\.listen\.port: must differ from listen\.port"):
        load_config(
            write(
                tmp_path,
                {"listen": {"port": 9090}, "cluster": {"listen": {"port": 9090}}, "routes": route},
            ),
            env={},
        )


def test_a_stdio_route_with_unsealed_sessions_is_refused(tmp_path: Path):
    route = {"name": "files", "upstream": {"command": ["server"]}, "seal_sessions": False}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"routes": [route]}), env={})
    assert str(err.value).startswith(
        "routes.0: seal_sessions: a stdio route needs sealed session ids"
    )
    assert "\n" not in str(err.value)
    # An HTTP upstream's sessions are never relayed between replicas: it may stay unsealed.
    ok = load_config(
        write(
            tmp_path,
            {
                "routes": [
                    {"name": "h", "upstream": "http://127.0.0.1:1/mcp", "seal_sessions": False}
                ]
            },
        ),
        env={},
    )
    assert ok.routes[0].seal_sessions is False


async def test_a_body_that_does_not_arrive_in_time_gets_408():
    r = ring()
    budget = BodyBudget(1000)
    gate = PeerGate(r, budget=budget, body_timeout=0.2, clock=lambda: 1000.0)
    ex = Exchange("POST", "/p", {"x-mcp-edge-peer": sealed(r, b"x" * 10), "content-length": "10"})

    async def trickle() -> dict[str, Any]:
        await asyncio.sleep(0.1)
        return {"type": "http.request", "body": b"x", "more_body": True}

    await gate.serve(ENDPOINT, ex.scope, trickle, ex.send, ex.handler)
    assert (ex.status, ex.reason, ex.handled) == (408, "body_timeout", None)
    assert budget.in_use == 0
