"""Driving the `survey` tool of tests/servers/mrtr_upstream.py round by round over raw HTTP.

A flow is round 1 (no state) and three retries, each answering the question the round before
asked and carrying the requestState it returned: four requests, three `input_required` rounds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.raw_http import MARKER_HEADER

PROTOCOL = "2026-07-28"
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "survey",
}
_ids = itertools.count(1)


def survey_call(topic: str, responses: dict[str, Any] | None, state: str | None) -> dict[str, Any]:
    return tool_call("survey", {"topic": topic}, responses, state)


def tool_call(
    name: str, arguments: dict[str, Any], responses: dict[str, Any] | None, state: str | None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": name,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}


async def post(
    client: httpx.AsyncClient, url: str, message: dict[str, Any], marker: str | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``message``; ``marker`` (the ``X-Test-Marker`` header) finds it in nginx's access log."""
    headers = {**HEADERS, "Mcp-Name": message["params"].get("name", "")}
    if marker is not None:
        headers[MARKER_HEADER] = marker
    response = await client.post(url, json=message, headers=headers)
    assert response.headers.get("content-type", "").startswith("application/json"), (
        f"not a JSON-RPC answer from {url}: HTTP {response.status_code} {response.text[:300]}"
    )
    return response.status_code, response.json()


@dataclass
class SurveyFlow:
    topic: str
    url: str
    #: The next request to send: answers to the last question and the state that asked it.
    responses: dict[str, Any] | None = None
    state: str | None = None
    requests: int = 0
    states: list[str] = field(default_factory=list)
    result: str | None = None
    error: dict[str, Any] | None = None
    status: int = 0
    #: Sent with the next requests, if set.
    marker: str | None = None

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def next_message(self) -> dict[str, Any]:
        return survey_call(self.topic, self.responses, self.state)

    async def advance(self, client: httpx.AsyncClient) -> None:
        """Send this flow's next request and take in the answer."""
        assert not self.done
        message = self.next_message()
        self.status, doc = await post(client, self.url, message, self.marker)
        self.requests += 1
        assert doc.get("id") == message["id"], doc
        if "error" in doc:
            self.error = doc["error"]
            return
        result = doc["result"]
        if result.get("resultType") == "input_required":
            (key,) = result["inputRequests"]
            self.state = result["requestState"]
            self.states.append(self.state)
            self.responses = {
                key: {"action": "accept", "content": {"answer": f"{self.topic}-{key}"}}
            }
        else:
            self.result = result["content"][0]["text"]

    async def run(self, client: httpx.AsyncClient, max_requests: int = 8) -> None:
        while not self.done and self.requests < max_requests:
            await self.advance(client)

    @property
    def completed(self) -> bool:
        """Finished with the three answers given, in order."""
        expected = f"{self.topic}: {self.topic}-q1, {self.topic}-q2, {self.topic}-q3 | served by "
        return self.result is not None and self.result.startswith(expected)

    @property
    def served_by(self) -> str:
        """The upstream instance(s) that ran the tool, from the final result."""
        assert self.result is not None
        return self.result.split(" | served by ", 1)[1]
