"""``mcp_server_operation_duration_seconds``: the OpenTelemetry semantic conventions' MCP server
metric (``mcp.server.operation.duration``) in Prometheus form, one observation per request when
its response is complete, with label values kept to bounded sets.

- ``mcp_method_name``: the request's method, from a fixed list (other methods: ``other``, any
  notification: ``notifications``, a request refused before its body was read: ``-``).
- ``gen_ai_tool_name``: ``tools/call`` only. A name gets its own value once the upstream has
  answered a call of it without a JSON-RPC error (a complete result, ``tool_error`` or an
  ``input_required`` round), up to ``observability.max_tool_names`` names per route; any other
  name is ``_OTHER``, so callers inventing names cannot grow the series.
- ``error_type``: ``tool_error`` (a ``tools/call`` result with ``isError: true``), the JSON-RPC
  error code the client got when the gateway read it (its own errors, and the final responses
  of ``tools/call`` / ``resources/read`` / ``prompts/get``, which it parses anyway; other codes
  than the spec's: ``_OTHER``), else the HTTP status class (``4xx``, ``5xx``) of an answer it did
  not parse, else empty. Other methods' JSON-RPC errors inside HTTP 200 answers are not seen:
  those bodies are never parsed.
- ``mcp_protocol_version``: the request's ``MCP-Protocol-Version`` header (a known version,
  ``_OTHER``, or empty when absent).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Histogram

from gateway.core.envelope import LEGACY_VERSIONS, SUPPORTED_VERSIONS
from gateway.observability.observer import Observer

OTHER = "_OTHER"
TOOL_ERROR = "tool_error"

#: The semantic conventions' advisory boundaries (0.01 s to 300 s), with three more below 10 ms:
#: refusals at the edge and edge-cache answers take about a millisecond.
OPERATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    30,
    60,
    120,
    300,
)

#: JSON-RPC codes that get their own ``error_type`` value: JSON-RPC's, MCP's, the legacy ones
#: still seen from older servers, and the gateway's rate-limit code.
KNOWN_CODES = frozenset(
    {
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
        -32000,
        -32001,
        -32002,
        -32020,
        -32021,
        -32022,
        -32042,
        -31429,
    }
)
PROTOCOL_VERSIONS = frozenset(LEGACY_VERSIONS) | frozenset(SUPPORTED_VERSIONS)
MAX_TOOL_NAME_CHARS = 128


def error_type(code: Any, tool_error: bool, status: int) -> str:
    if code is not None:
        return (
            str(code)
            if isinstance(code, int) and not isinstance(code, bool) and code in KNOWN_CODES
            else OTHER
        )
    if tool_error:
        return TOOL_ERROR
    if status >= 500:
        return "5xx"
    if status >= 400:
        return "4xx"
    return ""


def protocol_version(header: str | None) -> str:
    if not header:
        return ""
    header = header.strip()
    return header if header in PROTOCOL_VERSIONS else OTHER


class OperationMetrics:
    """One route's share of the histogram; labelled children are kept, so each label set costs
    one dict lookup after its first use."""

    def __init__(self, histogram: Histogram, route: str, max_tool_names: int = 100) -> None:
        self._histogram = histogram
        self._route = route
        self._max_tools = max_tool_names
        self._tools: set[str] = set()
        self._children: dict[tuple[str, str, str, str], Any] = {}

    def tool_label(self, name: Any, error: str, *, answer_read: bool) -> str:
        """The ``gen_ai_tool_name`` value for a ``tools/call`` of ``name``."""
        if not isinstance(name, str):
            return OTHER
        if name in self._tools:
            return name
        if (
            answer_read
            and error in ("", TOOL_ERROR)
            and len(self._tools) < self._max_tools
            and 0 < len(name) <= MAX_TOOL_NAME_CHARS
        ):
            self._tools.add(name)
            return name
        return OTHER

    def child(self, method: str, tool: str, error: str, version: str) -> Observer:
        """The histogram's child for these labels, resolved once."""
        key = (method, tool, error, version)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = Observer(
                self._histogram.labels(self._route, method, tool, error, version)
            )
        return child
