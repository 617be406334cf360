"""``mcp_server_operation_duration_seconds``: the OpenTelemetry semantic conventions' MCP server
metric (``mcp.server.operation.duration``) in Prometheus form, one observation per request when
its response is complete, with label values kept to bounded sets.

- ``mcp_method_name``: the request's method, from a fixed list (other methods: ``other``, any
  notification: ``notifications``, a request refused before its body was read: ``-``).
- ``gen_ai_tool_name``: ``tools/call`` only. A name gets its own value once the upstream has
  shown the tool to exist: listed it in a ``tools/list`` answer that passed the gateway, or
  answered a call of it with a complete result that is not ``isError`` (many SDK servers answer
  a call of a tool they do not have with ``isError: true``, so that proves nothing), up to
  ``observability.max_tool_names`` names per route, and only a name of printable characters (no
  control or format character reaches the exposition); any other name is ``_OTHER``, so callers
  inventing names can neither grow the series nor take the real tools' places.
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

import orjson
from prometheus_client import Histogram

from mcp_edge.core.envelope import LEGACY_VERSIONS, SUPPORTED_VERSIONS
from mcp_edge.core.memo import BoundedMemo
from mcp_edge.observability.observer import Observer

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
#: ``tools/list`` results already read, by length and hash: the same list again is not parsed.
_SEEN_LISTINGS = 16


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


def labellable(name: Any) -> bool:
    """A tool name that may become a label value: a string of 1 to MAX_TOOL_NAME_CHARS
    printable characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_TOOL_NAME_CHARS and name.isprintable()


def listed_tools(listing: bytes | str, request_id: Any) -> list[Any]:
    """The tool names of a ``tools/list`` response for ``request_id`` (a JSON text), or none
    when it is not one."""
    try:
        doc = orjson.loads(listing)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(doc, dict) or doc.get("id") != request_id:
        return []
    result = doc.get("result")
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return []
    return [tool.get("name") for tool in tools if isinstance(tool, dict)]


class OperationMetrics:
    """One route's share of the histogram; labelled children are kept, so each label set costs
    one dict lookup after its first use."""

    def __init__(self, histogram: Histogram, route: str, max_tool_names: int = 100) -> None:
        self._histogram = histogram
        self._route = route
        self._max_tools = max_tool_names
        self._tools: set[str] = set()
        self._children: dict[tuple[str, str, str, str], Any] = {}
        self._listings: BoundedMemo[tuple[int, int], bool] = BoundedMemo(_SEEN_LISTINGS)

    @property
    def known(self) -> int:
        """How many tool names have a label of their own (grows, never shrinks)."""
        return len(self._tools)

    def _admit(self, name: Any) -> bool:
        if len(self._tools) < self._max_tools and labellable(name):
            self._tools.add(name)
            return True
        return False

    def tool_label(self, name: Any, error: str, *, completed: bool) -> str:
        """The ``gen_ai_tool_name`` value for a ``tools/call`` of ``name`` whose answer the
        gateway read as a complete result (``completed``) with this ``error_type``."""
        if not isinstance(name, str):
            return OTHER
        if name in self._tools:
            return name
        if completed and error == "" and self._admit(name):
            return name
        return OTHER

    def learn(self, listing: bytes | str, request_id: Any) -> list[str]:
        """Give the tools a ``tools/list`` answer lists their labels (while there is room); the
        names that got one. The same answer again is not parsed."""
        if len(self._tools) >= self._max_tools:
            return []
        # From the result on: the same list answered to another request id is the same list.
        if isinstance(listing, bytes):
            result: bytes | str = listing[listing.find(b'"result"') :]
        else:
            result = listing[listing.find('"result"') :]
        seen = (len(result), hash(result))
        if self._listings.get(seen):
            return []
        self._listings.put(seen, True)
        added = []
        for name in listed_tools(listing, request_id):
            if name not in self._tools:
                if self._admit(name):
                    added.append(name)
                elif len(self._tools) >= self._max_tools:
                    break
        return added

    def child(self, method: str, tool: str, error: str, version: str) -> Observer:
        """The histogram's child for these labels, resolved once."""
        key = (method, tool, error, version)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = Observer(
                self._histogram.labels(self._route, method, tool, error, version)
            )
        return child
