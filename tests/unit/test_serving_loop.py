"""The event loop a request runs on is looked up once per process, not per request: the app's
lifespan puts it in the lifespan state, which the server copies into every request's scope."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge import context
from mcp_edge.edge.context import LOOP_STATE_KEY, get_context, serving_loop
from mcp_edge.edge.deadline import Deadline
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config


async def test_the_lifespan_state_carries_the_loop_the_app_started_on() -> None:
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    app = GatewayApp(config, KeyRing([parse_key_spec(generate_key())]))
    messages = asyncio.Queue[dict[str, Any]]()
    for kind in ("lifespan.startup", "lifespan.shutdown"):
        messages.put_nowait({"type": kind})
    sent: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    state: dict[str, Any] = {}
    await asyncio.wait_for(app({"type": "lifespan", "state": state}, messages.get, send), 30)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert state[LOOP_STATE_KEY] is asyncio.get_running_loop()


async def test_a_request_takes_the_loop_from_its_scope_and_looks_it_up_only_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    lookups: list[int] = []

    def counted() -> asyncio.AbstractEventLoop:
        lookups.append(1)
        return loop

    monkeypatch.setattr(context.asyncio, "get_running_loop", counted)
    assert serving_loop({"type": "http", "state": {LOOP_STATE_KEY: loop}}) is loop
    assert lookups == []
    assert serving_loop({"type": "http", "state": {}}) is loop
    assert serving_loop({"type": "http"}) is loop
    assert len(lookups) == 2


async def test_a_deadline_given_the_loop_still_cancels_its_task() -> None:
    scope: dict[str, Any] = {"type": "http"}
    get_context(scope).loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError), Deadline(0.01, get_context(scope).loop):
        await asyncio.sleep(5)
