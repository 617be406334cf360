"""A store that answers ``WAIT`` with garbage (a tiny RESP server: no real Redis misbehaves so),
behind a gateway process: the spend of an approval is unknown, so the retry gets the documented
refusal (HTTP 503, ``-32603`` with ``data.reason: state_store_unavailable``, ``Retry-After``,
the request's id), logged once and without a traceback; never a plain-text 500."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Running, start_gateway
from tests.support.fake_redis import GARBAGE, FakeRedis, fake_redis
from tests.support.raw_http import Response, exchange, request, rpc

pytestmark = pytest.mark.integration

APPROVAL = "mcp-edge/approval"


@pytest.fixture(scope="module")
def store() -> Iterator[FakeRedis]:
    with fake_redis() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(module_tmp: Path, state_key: str, store: FakeRedis) -> Iterator[Running]:
    config = {
        "store": {
            "type": "redis",
            "url": f"redis://:pw@127.0.0.1:{store.port}/0",
            "spend_replicas": 1,
            "timeout_seconds": 2.0,
        },
        "routes": [
            {
                "name": "approved",
                "path": "/mcp",
                "upstream": "http://127.0.0.1:1/mcp",
                "era": "modern",
                "legacy_clients": "deny",
                "policy": {"rules": [{"when": 'name == "deploy"', "action": "approve"}]},
            }
        ],
    }
    with ExitStack() as stack:
        yield start_gateway(stack, module_tmp, config=config, keys=state_key)


def call(port: int, rid: str, **params: Any) -> Response:
    body = rpc(rid, "tools/call", name="deploy", arguments={"to": "prod"}, **params)
    return exchange(port, request(body, "tools/call", name="deploy"))


def test_a_spend_the_store_answers_with_garbage_is_refused_as_documented(
    gateway: Running, store: FakeRedis, module_tmp: Path
) -> None:
    for n in range(len(GARBAGE)):
        asked = call(gateway.port, f"ask-{n}")
        assert asked.status == 200, asked
        result = asked.json()["result"]
        assert result["resultType"] == "input_required" and APPROVAL in result["inputRequests"]
        approved = {APPROVAL: {"action": "accept", "content": {"approve": True}}}
        retry = call(
            gateway.port,
            f"retry-{n}",
            inputResponses=approved,
            requestState=result["requestState"],
        )
        assert retry.status == 503, retry
        assert retry.headers["content-type"] == "application/json"
        assert retry.headers["retry-after"] == "1"
        assert retry.json() == {
            "jsonrpc": "2.0",
            "id": f"retry-{n}",
            "error": {
                "code": -32603,
                "message": "Single-use state store unavailable; retry shortly",
                "data": {"reason": "state_store_unavailable"},
            },
        }
    assert store.waits == len(GARBAGE) and "SET" in store.commands, store.commands
    log = next(module_tmp.glob(f"gateway-{gateway.port}.log"))
    deadline = time.monotonic() + 10
    while log.read_text().count("single-use store unavailable") < len(GARBAGE):
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    text = log.read_text()
    assert "Traceback" not in text and "Exception in ASGI application" not in text
    lines = [json.loads(line) for line in text.splitlines() if "store unavailable" in line]
    assert len(lines) == len(GARBAGE)
