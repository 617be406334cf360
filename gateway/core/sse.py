"""An incremental Server-Sent Events splitter that keeps each event's raw bytes, so events the
gateway does not touch are forwarded byte for byte."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(slots=True)
class Event:
    raw: bytes  # the event including its terminating blank line
    data: str | None  # joined ``data:`` lines, None for comment-only events

    @property
    def is_comment(self) -> bool:
        return self.data is None


def _data_of(block: bytes) -> str | None:
    lines = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    data = [
        line[5:].removeprefix(b" ").decode("utf-8", errors="replace")
        for line in lines
        if line.startswith(b"data:")
    ]
    return "\n".join(data) if data else None


class SSESplitter:
    """Feed bytes, get complete events back in order."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._max = max_event_bytes
        #: Where the next boundary search starts: an event arriving in many chunks is scanned
        #: once, not once per chunk (a boundary may straddle two chunks: 3 bytes back).
        self._scanned = 0

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer
        buffer += chunk
        events: list[Event] = []
        start = 0
        search_from = max(0, self._scanned - 3)
        while True:
            match = _BOUNDARY.search(buffer, search_from)
            if match is None:
                break
            raw = bytes(buffer[start : match.end()])
            events.append(Event(raw=raw, data=_data_of(raw[: match.start() - start])))
            start = search_from = match.end()
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) > self._max:
            raise ValueError("SSE event exceeds the size limit")
        return events

    @property
    def pending(self) -> int:
        """Bytes held for what is not complete yet."""
        return len(self._buffer)

    def rest(self) -> bytes:
        """Bytes of an unterminated last event (the stream ended mid-event)."""
        rest = bytes(self._buffer)
        self._buffer = bytearray()
        self._scanned = 0
        return rest


def event_id_of(raw: bytes) -> str | None:
    """The ``id:`` field of one event (the last one wins, as in the SSE spec), if it has one."""
    found = None
    for line in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if line.startswith(b"id:"):
            found = line[3:].removeprefix(b" ").decode("utf-8", errors="replace")
    return found


def encode_event(data: bytes) -> bytes:
    """A message event carrying one JSON-RPC message, framed the way SDK servers frame theirs."""
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"
