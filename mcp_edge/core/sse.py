"""An incremental Server-Sent Events splitter that keeps each event's raw bytes, so events the
gateway does not touch are forwarded byte for byte."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The end of an event: a line's end followed by an empty line. A line ends with CRLF, LF or
#: CR (a CR followed by LF is one end), so these may mix: ``\n\r\n`` and ``\r\n\r`` end an
#: event as ``\n\n`` does. (A CR as the buffer's last byte may be the start of a CRLF: the
#: splitter waits for the next byte.)
_BOUNDARY = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
#: A UTF-8 byte order mark at the start of a stream is not part of its first line.
_BOM = b"\xef\xbb\xbf"


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
        if line.startswith(b"data:") or line == b"data"  # (a field without a colon is empty)
    ]
    return "\n".join(data) if data else None


class SSESplitter:
    """Feed bytes, get complete events back in order, split where an SSE client splits them
    (any mix of CRLF, LF and CR line ends; a byte order mark before the first line ignored), and
    the same events however the bytes are cut into chunks."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._max = max_event_bytes
        #: Where the next boundary search starts: an event arriving in many chunks is scanned
        #: once, not once per chunk (a boundary may straddle two chunks: 3 bytes back).
        self._scanned = 0
        #: No event has been completed yet (a byte order mark may begin the buffer).
        self._first = True

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer
        buffer += chunk
        return self._split(buffer, False)

    def finish(self) -> list[Event]:
        """The stream ended: the event its last byte completes (a lone CR, the empty line that
        ends an event, is known to be no CRLF only now). What stays is :meth:`rest`."""
        return self._split(self._buffer, True)

    def _split(self, buffer: bytearray, ended: bool) -> list[Event]:
        events: list[Event] = []
        start = 0
        search_from = max(0, self._scanned - 3)
        size = len(buffer)
        while True:
            match = _BOUNDARY.search(buffer, search_from)
            if match is None:
                break
            stop = match.end()
            if stop == size and buffer[-1] == 13 and not ended:
                break  # (a CR that may be the start of a CRLF: wait for the next byte)
            raw = bytes(buffer[start:stop])
            block = raw[: match.start() - start]
            if self._first:
                self._first = False
                block = block.removeprefix(_BOM)
            events.append(Event(raw=raw, data=_data_of(block)))
            start = search_from = stop
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
