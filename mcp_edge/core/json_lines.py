"""Several JSON-RPC messages in one ``application/json`` answer, one per line (NDJSON).

The streamable HTTP transport allows two answers to a request: ``application/json`` carrying one
JSON-RPC response, or ``text/event-stream`` carrying notifications and then the response. Some
servers stream under ``application/json`` anyway, one message per line (a progress notification,
then the response; or a ``subscriptions/listen`` stream that never ends). Neither SDK client reads
that (both parse the whole body as one JSON document, so a stream that never ends is never read
at all); the gateway recognises it by its first line and relays the messages as SSE events, which
every client reads (``mcp_edge.edge.responses``).

Pure functions and a bounded splitter; no I/O.
"""

from __future__ import annotations

from typing import Literal

import orjson

#: What the first line of an ``application/json`` answer says about the body:
#: ``message``: a complete JSON-RPC message that is not a response (a notification or a request):
#: the body is a stream of messages, relayed as they come;
#: ``response``: a complete response: one JSON body (with a trailing newline) unless more follows;
#: ``json``: not a message on its own line: an ordinary (perhaps pretty-printed) JSON body.
FirstLine = Literal["message", "response", "json"]


def first_line(buffer: bytes) -> tuple[FirstLine, int] | None:
    """Classify the first non-blank line of ``buffer`` and return where it ends; None while no
    non-blank line has ended yet."""
    start = len(buffer) - len(buffer.lstrip())
    end = buffer.find(b"\n", start)
    if end < 0:
        return None
    try:
        doc = orjson.loads(buffer[start:end])
    except orjson.JSONDecodeError:
        return "json", end + 1
    if not isinstance(doc, dict):
        return "json", end + 1
    if "method" in doc:
        return "message", end + 1
    if "result" in doc or "error" in doc:
        return "response", end + 1
    return "json", end + 1


def is_json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def as_event_data(line: bytes) -> bytes:
    """A line's message as the ``data`` of one SSE event. A carriage return between two JSON
    tokens is whitespace to JSON but a line break to SSE: such a message is written again."""
    if b"\r" in line:
        return orjson.dumps(orjson.loads(line))
    return line


class LineTooLong(ValueError):
    """A line longer than the limit; ``lines``: the complete lines before it in the same feed."""

    def __init__(self, lines: list[bytes]) -> None:
        super().__init__("a line exceeds the size limit")
        self.lines = lines


class LineSplitter:
    """Feed bytes, get complete non-blank lines back (surrounding whitespace removed).

    A line longer than ``max_line_bytes`` (without its newline; complete or not) raises
    :class:`LineTooLong`, so a body without newlines is not held without bound, and where the
    limit is passed does not depend on how the bytes were cut into chunks."""

    def __init__(self, max_line_bytes: int) -> None:
        self._buffer = bytearray()
        self._max = max_line_bytes
        #: Bytes already searched for a newline (a long line arriving in many chunks is scanned once).
        self._scanned = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        buffer = self._buffer
        lines: list[bytes] = []
        start = 0
        search_from = self._scanned
        while True:
            end = buffer.find(b"\n", search_from)
            if end < 0:
                break
            if end - start > self._max:
                raise LineTooLong(lines)
            line = bytes(buffer[start:end]).strip()
            if line:
                lines.append(line)
            start = search_from = end + 1
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) > self._max:
            raise LineTooLong(lines)
        return lines

    @property
    def pending(self) -> int:
        """Bytes held for what is not complete yet."""
        return len(self._buffer)

    def rest(self) -> bytes:
        """The last line, when the body ended without a newline after it (NDJSON allows that)."""
        rest = bytes(self._buffer).strip()
        self._buffer = bytearray()
        self._scanned = 0
        return rest
