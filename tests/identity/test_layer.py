"""The identity layer in front of a member, and the header plan that sends its token."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcp_edge.auth.base import Principal
from mcp_edge.auth.upstream import MissingUpstreamCredential, UpstreamCredentials
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.identity.layer import Answer, CredentialError, UpstreamIdentityLayer

ALICE = Principal(id='["jwt-sub","i","alice"]', display="alice")


class Source:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    async def credential(self, scope: Any, ctx: RequestContext) -> str:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


async def run(
    layer: UpstreamIdentityLayer,
) -> tuple[list[dict[str, Any]], RequestContext, list[str]]:
    ctx = RequestContext(request_id=7, principal=ALICE, client_token="inbound")
    scope = {"type": "http", "method": "POST", "headers": [], SCOPE_KEY: ctx}
    reached: list[str] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope[SCOPE_KEY].upstream_bearer)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    layer.app = app
    await layer(scope, receive, send)
    return sent, ctx, reached


async def test_the_token_reaches_the_member_in_the_context():
    sent, ctx, reached = await run(
        UpstreamIdentityLayer(None, source=Source("exchanged"), member="r")
    )  # type: ignore[arg-type]
    assert reached == ["exchanged"] and sent == []


async def test_a_failure_answers_with_the_request_id_and_nothing_reaches_the_member():
    error = RpcError(INTERNAL_ERROR, "nope", {"reason": "token_exchange_failed"}, status=502)
    sent, _, reached = await run(
        UpstreamIdentityLayer(None, source=Source(CredentialError(error)), member="r")
    )  # type: ignore[arg-type]
    assert reached == []
    assert sent[0]["status"] == 502
    body = orjson.loads(sent[1]["body"])
    assert body["id"] == 7 and body["error"]["data"]["reason"] == "token_exchange_failed"


async def test_an_answer_is_the_result_and_nothing_reaches_the_member():
    result = {"resultType": "input_required", "requestState": "s"}
    sent, _, reached = await run(
        UpstreamIdentityLayer(None, source=Source(Answer(result)), member="r")
    )  # type: ignore[arg-type]
    assert reached == [] and orjson.loads(sent[1]["body"]) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": result,
    }


def test_the_header_plan_sends_the_obtained_token_never_the_callers():
    credentials = UpstreamCredentials(bearer_from_context=True, principal_header="X-MCP-Principal")
    extra = dict(credentials.extra_headers(ALICE, "inbound", "exchanged"))
    assert extra["authorization"] == "Bearer exchanged"
    assert "inbound" not in " ".join(extra.values())
    assert "authorization" in credentials.drop_headers  # the client's own is always dropped
    with pytest.raises(MissingUpstreamCredential):
        credentials.extra_headers(ALICE, "inbound", None)
    assert "authorization" not in dict(credentials.extra_headers(None))  # the gateway's probes
    with pytest.raises(ValueError, match="exclude"):
        UpstreamCredentials(bearer_from_context=True, forward_client_token=True)
