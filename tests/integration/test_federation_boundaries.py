"""A hostile member harms only its own answers; nothing is held that is not counted; every URI
check sees the form the server resolves. One gateway for the module, five routes:

- ``/fed``: ``evil`` (tests/support/hostile_upstream.py: what no real server sends), ``docs`` and
  ``files`` (one unmodified ``mcp`` 1.x FastMCP server, tests/servers/legacy_files.py, serving
  ``file:///public/a`` and ``file:///secret/b``; ``docs`` prefixed, ``files`` the unprefixed
  member, both excluding ``file:///secret/*``);
- ``/lists``: ``evil`` and ``big``, each answering a 9 MiB ``tools/list``;
- ``/flood``: ``evil`` alone, whose listen stream acknowledges 30,000 URIs nobody asked for, or
  sends 2000 notifications as fast as it can;
- ``/stall``: ``stall``, which starts each answer and never finishes it (the edge cache on);
- ``/files-policy``: the 1.x server alone (a single-upstream route) behind a CEL rule denying
  ``uri.startsWith("file:///secret/")``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running, start_gateway
from tests.scale.cluster import metric, scrape
from tests.support.answers import rpc_answer
from tests.support.hostile_upstream import Exchange, HostileUpstream, response, sse_event
from tests.support.legacy import start_legacy

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
MIB = 1024 * 1024
FLOOD = 2000
FLOOD_PAD = 16 * 1024
MADE_UP = 30_000

# ---------------------------------------------------------------- the hostile members

#: A resource link to ANOTHER member's URI, with the keys the rewrite relies on spelt every way.
LINK = "docs+file:///public/a"
ESCAPED_FORMS: dict[str, tuple[str, str]] = {
    # tool name: (how "result" is written, how "uri" is written)
    "link_plain": ("result", "uri"),
    "link_u": ("result", "\\u0075ri"),
    "link_r": ("result", "u\\u0072i"),
    "link_i": ("result", "ur\\u0069"),
    "link_all": ("result", "\\u0075\\u0072\\u0069"),
    "link_result": ("\\u0072esult", "uri"),
    "link_result_hex": ("resu\\u006Ct", "\\u0075ri"),
    "link_both": ("r\\u0065sult", "\\u0075r\\u0069"),
}


def link_answer(request_id: Any, result_key: str, uri_key: str) -> bytes:
    rid = json.dumps(request_id)
    return (
        f'{{"jsonrpc":"2.0","id":{rid},"{result_key}":{{"content":[{{"type":"resource_link",'
        f'"name":"x","{uri_key}":"{LINK}"}}],"resultType":"complete"}}}}'
    ).encode()


async def evil_call(x: Exchange) -> None:
    name = (x.doc.get("params") or {}).get("name", "")
    if name.endswith("_sse"):
        result_key, uri_key = ESCAPED_FORMS[name.removesuffix("_sse")]
        await x.start_chunked(b"text/event-stream")
        await x.chunk(b"data: " + link_answer(x.id, result_key, uri_key) + b"\n\n")
        await x.end_chunks()
        return
    result_key, uri_key = ESCAPED_FORMS[name]
    await x.json(link_answer(x.id, result_key, uri_key))


def big_list(prefix: str) -> Any:
    async def script(x: Exchange) -> None:
        pad = "d" * (9 * 1024)
        tools = [
            {"name": f"{prefix}{i}", "description": pad, "inputSchema": {"type": "object"}}
            for i in range(1024)  # 9 MiB and a little
        ]
        body = json.dumps(response(x.id, {"resultType": "complete", "tools": tools})).encode()
        await x.json(body)

    return script


async def evil_listen(x: Exchange) -> None:
    wanted = ((x.doc.get("params") or {}).get("notifications")) or {}
    asked = wanted.get("resourceSubscriptions") or []
    await x.start_chunked(b"text/event-stream")
    if asked:
        # Honours the first URI asked for, and names 30,000 nobody asked for.
        uris = [f"file:///made-up/{i}" for i in range(MADE_UP)] + asked[:1]
        ack = {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": {"resourceSubscriptions": uris}},
        }
        await x.chunk(sse_event(ack))
        await x.hold_open()
        return
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": True}},
    }
    await x.chunk(sse_event(ack))
    pad = "p" * FLOOD_PAD
    try:
        for n in range(FLOOD):
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": {"n": n, "pad": pad}},
            }
            await x.chunk(sse_event(note))
        done = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": {"done": True}},
        }
        await x.chunk(sse_event(done))
    except (ConnectionError, OSError):
        return
    await x.hold_open()


STALL_SECONDS = 4.0


async def hang_up_later(x: Exchange) -> None:
    """Nothing more for a while, then the connection closes (the answer is cut off)."""
    x.keep_alive = False
    await asyncio.sleep(STALL_SECONDS)
    x.writer.close()


async def stall_json(x: Exchange) -> None:
    """An answer whose head announces 4 MiB, of which 1 MiB comes; then nothing, and the
    connection closes."""
    x.keep_alive = False
    start = b'{"jsonrpc":"2.0","id":%s,"result":{"tools":[],"pad":"' % json.dumps(x.id).encode()
    x.writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (4 * MIB)
    )
    x.writer.write(start + b"s" * MIB)
    await x.writer.drain()
    await hang_up_later(x)


async def stall_listen(x: Exchange) -> None:
    """A listen stream whose first event is 1 MiB long and never ends."""
    await x.start_chunked(b"text/event-stream")
    await x.chunk(b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"d":"')
    await x.chunk(b"s" * MIB)
    await hang_up_later(x)


# ---------------------------------------------------------------- the gateway


def start_files(stack: ExitStack, tmp: Path) -> tuple[str, Path]:
    """The unmodified 1.x server, logging every request it receives."""
    log = tmp / "legacy-files.jsonl"
    running = start_legacy(stack, tmp, "--log", str(log), script="legacy_files.py")
    return running.url, log


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    evil = HostileUpstream(
        {
            "tools/list": big_list("e"),
            "subscriptions/listen": evil_listen,
            **{name: evil_call for name in ESCAPED_FORMS},
            **{f"{name}_sse": evil_call for name in ESCAPED_FORMS},
        }
    ).start()
    big = HostileUpstream({"tools/list": big_list("b")}).start()
    stall = HostileUpstream(
        {
            "tools/list": stall_json,
            "resources/read": stall_json,
            "subscriptions/listen": stall_listen,
        }
    ).start()
    with ExitStack() as stack:
        for server in (evil, big, stall):
            stack.callback(server.stop)
        files_url, files_log = start_files(stack, module_tmp)
        hidden = {"exclude": ["file:///secret/*"]}
        config = {
            "routes": [
                {
                    "name": "fed",
                    "path": "/fed",
                    "members": [
                        {"name": "evil", "upstream": evil.url, "era": "modern"},
                        {
                            "name": "docs",
                            "upstream": files_url,
                            "era": "legacy",
                            "resources": hidden,
                        },
                        {
                            "name": "files",
                            "prefix": "",
                            "upstream": files_url,
                            "era": "legacy",
                            "resources": hidden,
                        },
                    ],
                },
                {
                    "name": "lists",
                    "path": "/lists",
                    "members": [
                        {"name": "evil", "upstream": evil.url, "era": "modern"},
                        {"name": "big", "upstream": big.url, "era": "modern"},
                    ],
                },
                {
                    "name": "flood",
                    "path": "/flood",
                    "members": [{"name": "evil", "upstream": evil.url, "era": "modern"}],
                },
                {
                    "name": "stall",
                    "path": "/stall",
                    "cache": {"enabled": True},
                    "members": [
                        {
                            "name": "stall",
                            "upstream": stall.url,
                            "era": "modern",
                            "list_timeout_ms": 30_000,
                        }
                    ],
                },
                {
                    "name": "files-policy",
                    "path": "/files-policy",
                    "upstream": files_url,
                    "era": "legacy",
                    "legacy_clients": "deny",
                    "policy": {
                        "rules": [
                            {
                                "name": "no-secrets",
                                "when": 'uri.startsWith("file:///secret/")',
                                "action": "deny",
                            }
                        ]
                    },
                },
            ]
        }
        gateway = start_gateway(stack, module_tmp, keys=state_key, config=config)
        yield {"gateway": gateway, "files_log": files_log, "stall": stall}


def post(
    gateway: Running, path: str, rid: Any, method: str, params: dict | None = None
) -> httpx.Response:
    params = {"_meta": META, **(params or {})}
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name = params.get("uri") if method == "resources/read" else params.get("name")
    if method in ("tools/call", "prompts/get", "resources/read") and isinstance(name, str):
        headers["Mcp-Name"] = name
    with httpx.Client(timeout=60) as http:
        return http.post(
            gateway.base + path,
            headers=headers,
            json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
        )


# ---------------------------------------------------------------- A: linear in what a member sends


def test_the_acknowledgement_names_only_what_the_client_asked_and_a_member_honours(env):
    asked = ["evil+file:///asked", "evil+file:///not-honoured"]
    params = {"_meta": META, "notifications": {"resourceSubscriptions": asked}}
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
    }
    body = {"jsonrpc": "2.0", "id": "sub-ack", "method": "subscriptions/listen", "params": params}
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", env["gateway"].base + "/flood", headers=headers, json=body) as resp,
    ):
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data:"):
                ack = json.loads(line[5:])
                break
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"resourceSubscriptions": ["evil+file:///asked"]}


def test_a_client_that_does_not_read_slows_its_member_and_loses_nothing(env):
    """2000 notifications of 16 KiB while the client reads nothing for a while: the member is
    not read meanwhile (backpressure), and every notification reaches the client, in order."""
    gateway: Running = env["gateway"]
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "sub-flood",
            "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": {"toolsListChanged": True}},
        }
    ).encode()
    head = (
        b"POST /flood HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        b"Mcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(60)
    try:
        sock.connect(("127.0.0.1", gateway.port))
        sock.sendall(head + body)
        got = b""
        while b"acknowledged" not in got:
            got += sock.recv(4096)
        time.sleep(3)  # the client reads nothing meanwhile
        deadline = time.monotonic() + 90
        while b'"done"' not in got and time.monotonic() < deadline:
            chunk = sock.recv(256 * 1024)
            if not chunk:
                break
            got += chunk
    finally:
        sock.close()
    seen = [int(n) for n in (part.split(b",", 1)[0] for part in got.split(b'"n":')[1:])]
    assert b'"done"' in got
    assert seen == list(range(FLOOD))


# ---------------------------------------------------------------- B: one budget


def test_a_members_part_too_large_for_the_merged_list_is_missing_and_the_others_are_listed(env):
    resp = post(env["gateway"], "/lists", "big-lists", "tools/list")
    assert resp.status_code == 200, resp.text[:300]
    result = resp.json()["result"]
    names = {t["name"] for t in result["tools"]}
    assert {"evil__e0", "evil__e1023"} <= names and not any(n.startswith("big__") for n in names)
    assert result["_meta"]["io.mcp-edge/federation"]["missing"] == [
        {"member": "big", "reason": "too_large"}
    ]
    assert resp.headers["mcp-edge-missing"] == "big"


def held(gateway: Running, kind: str) -> float:
    return metric(scrape(gateway.base), "mcp_edge_held_bytes", pool="answer", kind=kind)


def wait_held(gateway: Running, kinds: tuple[str, ...], at_least: int) -> dict[str, float]:
    deadline = time.monotonic() + 30
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        seen = {kind: held(gateway, kind) for kind in kinds}
        if all(v >= at_least for v in seen.values()):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"not held as expected: {seen}")


@pytest.mark.parametrize(
    ("method", "params", "kinds"),
    [
        ("tools/list", {}, ("member_part", "cache_fill")),
        ("resources/read", {"uri": "stall+file:///x"}, ("member_answer", "cache_fill")),
        ("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, ("fan_in",)),
    ],
)
def test_what_a_member_answer_holds_is_counted_while_it_is_held(env, method, params, kinds):
    """A member answer on its way (1 MiB of 4 held, the member silent) draws from the answer
    budget under its kind, and gives it back when the answer is over (the member hangs up)."""
    gateway: Running = env["gateway"]
    done = threading.Event()

    def ask() -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(5.0, read=None)) as http:
                headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
                if method == "resources/read":
                    headers["Mcp-Name"] = params["uri"]
                body = {
                    "jsonrpc": "2.0",
                    "id": method,
                    "method": method,
                    "params": {"_meta": META, **params},
                }
                with http.stream("POST", gateway.base + "/stall", headers=headers, json=body):
                    done.wait(30)
        except httpx.HTTPError:
            pass

    client = threading.Thread(target=ask, daemon=True)
    client.start()
    try:
        wait_held(gateway, kinds, MIB)
    finally:
        done.set()
        client.join(30)
    deadline = time.monotonic() + 30
    while any(held(gateway, k) for k in kinds) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {k: held(gateway, k) for k in kinds} == dict.fromkeys(kinds, 0)


# ---------------------------------------------------------------- C: one canonical form

STEPPING_OVER = [
    "docs+file:///public/../secret/b",
    "docs+file:///public/%2e%2e/secret/b",
    "docs+FILE:///secret/b",
    "docs+file://localhost/secret/b",
    "file:///public/../secret/b",
    "file:///public/%2E%2E/secret/b",
    "FILE:///secret/b",
]


def files_log(env: Any) -> str:
    path: Path = env["files_log"]
    return path.read_text() if path.exists() else ""


def reaching_files(env: Any, request: Any) -> str:
    """What the 1.x server received while ``request()`` ran (its log grows as it receives)."""
    before = len(files_log(env))
    request()
    return files_log(env)[before:]


@pytest.mark.parametrize("uri", STEPPING_OVER)
def test_no_spelling_of_an_excluded_uri_reads_it(env, uri):
    got: list[httpx.Response] = []
    received = reaching_files(
        env,
        lambda: got.append(post(env["gateway"], "/fed", "read", "resources/read", {"uri": uri})),
    )
    doc = rpc_answer(got[0])
    assert "SECRET" not in got[0].text
    assert doc["error"]["code"] == -32602
    assert doc["error"]["data"]["reason"] == "uri_not_canonical"
    assert doc["error"]["data"]["canonical"] in ("docs+file:///secret/b", "file:///secret/b")
    assert "secret" not in received  # the server never saw it


def test_the_canonical_spellings_read_what_they_may(env):
    shown = rpc_answer(
        post(env["gateway"], "/fed", "pub", "resources/read", {"uri": "docs+file:///public/a"})
    )
    assert shown["result"]["contents"][0]["text"] == "public a"
    assert shown["result"]["contents"][0]["uri"] == "docs+file:///public/a"
    for uri in ("docs+file:///secret/b", "file:///secret/b"):
        hidden = rpc_answer(
            post(env["gateway"], "/fed", f"hidden {uri}", "resources/read", {"uri": uri})
        )
        assert hidden["error"]["code"] == -32602 and hidden["error"]["message"].startswith(
            "Resource not found"
        )


@pytest.mark.parametrize(
    "template",
    ["docs+file:///public/../secret/{name}", "docs+FILE:///secret/{name}", "file:///secret/{name}"],
)
def test_a_hidden_templates_completions_are_reached_by_no_spelling(env, template):
    params = {
        "ref": {"type": "ref/resource", "uri": template},
        "argument": {"name": "name", "value": ""},
    }
    got: list[httpx.Response] = []
    received = reaching_files(
        env,
        lambda: got.append(post(env["gateway"], "/fed", "complete", "completion/complete", params)),
    )
    doc = rpc_answer(got[0])
    assert "SECRET-NAME" not in json.dumps(doc)
    assert doc["error"]["code"] == -32602
    assert "secret" not in received


@pytest.mark.parametrize("uri", ["file:///public/../secret/b", "file:///public/%2E%2E/secret/b"])
def test_a_policy_rule_on_a_single_upstream_route_sees_the_canonical_form(env, uri):
    resp = post(env["gateway"], "/files-policy", f"policy {uri}", "resources/read", {"uri": uri})
    doc = rpc_answer(resp)
    assert "SECRET" not in resp.text
    assert doc["error"]["data"]["reason"] == "uri_not_canonical"
    assert doc["error"]["data"]["canonical"] == "file:///secret/b"
    denied = rpc_answer(
        post(
            env["gateway"],
            "/files-policy",
            "policy-b",
            "resources/read",
            {"uri": "file:///secret/b"},
        )
    )
    assert "SECRET" not in json.dumps(denied) and "error" in denied
    allowed = rpc_answer(
        post(
            env["gateway"],
            "/files-policy",
            "policy-a",
            "resources/read",
            {"uri": "file:///public/a"},
        )
    )
    assert allowed["result"]["contents"][0]["text"] == "public a"


@pytest.mark.parametrize("tool", [*ESCAPED_FORMS, *(f"{t}_sse" for t in ESCAPED_FORMS)])
def test_a_resource_link_is_rewritten_however_its_keys_are_spelt(env, tool):
    resp = post(
        env["gateway"], "/fed", tool, "tools/call", {"name": f"evil__{tool}", "arguments": {}}
    )
    doc = rpc_answer(resp)
    assert doc["result"]["content"][0]["uri"] == "evil+" + LINK, resp.text[:400]
