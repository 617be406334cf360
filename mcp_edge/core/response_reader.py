"""Reading an upstream's answer to one 2026-07-28 request, sans-I/O (the h11 shape): the caller
hands over the answer's head (:meth:`ResponseReader.head`) and its body as it arrives
(:meth:`ResponseReader.feed`) and gets events back; it does every read and write itself.

What the reader knows (the rules themselves are in :mod:`mcp_edge.core.upstream_rules`):

- **Framing.** The head's status, ``Content-Type`` and ``Content-Encoding`` decide how the body
  is read: one JSON body, an SSE stream, or not at all (another type: the status speaks); an
  answer a client could not read is :class:`Refused`.
- **Newline-delimited messages under ``application/json``** (:mod:`mcp_edge.core.json_lines`):
  the first line of a 2xx JSON body decides; such a body is read one message per line from
  then on (:class:`Lines`).
- **Messages.** Each JSON-RPC message comes with its bytes as the upstream framed them (the SSE
  event; for a line, the line as one SSE event; the JSON body) and its JSON text
  (:class:`Message`); SSE events without data are :class:`Filler`. The response for the
  request's id is :class:`Final`.
- **Bounds.** No message (JSON body, SSE event, line) is held past ``max_bytes`` (an SSE
  event: one byte more, its last, or the lone CR that ends it, held until the next byte says
  whether a LF follows) (:class:`TooLarge`); once a problem is reported the reader holds
  nothing more.

Two ways of reading:

- ``strict`` (the default): the answer as a 2026-07-28 client must be able to read it. Every
  message is parsed; a message that is not a JSON object is :class:`Malformed`, so is a
  JSON-RPC request (servers send none on a response stream), a JSON body that is no response
  for the id, and anything after the final response; a stream that ends without it is
  :class:`EndedEarly`. An error response with a null id answers the request: it gets the
  request's id (``Final.claimed``). A response for another id is a :class:`Message` (a client
  drops it).
- lenient (``strict=False``): the answer passes by and only what may matter is read. A body or
  event is parsed only when ``body_filter`` / ``event_filter`` (a cheap test of its text) says
  so; what is not JSON, or not an object, is a :class:`Message` without ``doc``. Still refused:
  a JSON-RPC request on the stream (when parsed), a line that is not JSON, a body or event the
  filter picked that is not JSON to this parser (another parser may read it: a lone surrogate
  escape, bytes that are no UTF-8), and too much held.
  Every response for the id is a :class:`Final` (nothing checks there is only one).

The events are the same however the body is cut into chunks. ``own=True`` on :meth:`feed`
marks bytes the caller added itself (its own error event for a stream that broke): after the
final response they are dropped instead of refused.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from mcp_edge.core import json_lines
from mcp_edge.core import upstream_rules as rules
from mcp_edge.core.errors import RpcError
from mcp_edge.core.sse import Event as SSEEvent
from mcp_edge.core.sse import SSESplitter, encode_event

BodyKind = Literal["json", "sse", "other"]


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Framing:
    """The head was accepted: how the body is read (``other``: not at all, it passes as bytes)."""

    #: The ``Content-Type`` without parameters, lower case (``b""`` when there is none).
    media_type: bytes
    body: BodyKind


@dataclass(slots=True)
class Lines:
    """The 2xx JSON body is newline-delimited messages: from here on one :class:`Message` per
    line, its ``raw`` the line as one SSE event (what a client that reads SSE gets)."""


@dataclass(slots=True)
class Message:
    """One JSON-RPC message that is not the final response (a notification, a response for
    another id; in a lenient reader also what it did not parse)."""

    #: As the upstream framed it: the SSE event (with its blank line), the line as one SSE
    #: event, or the whole JSON body.
    raw: bytes
    #: Its JSON text (str for an event or a line, bytes for a JSON body).
    data: str | bytes
    #: The parsed object; None when it was not parsed or is not a JSON object.
    doc: dict[str, Any] | None

    @property
    def is_response(self) -> bool:
        doc = self.doc
        return doc is not None and "method" not in doc and ("result" in doc or "error" in doc)


@dataclass(slots=True)
class Final:
    """The response for the request's id (as :class:`Message`; ``doc`` always parsed)."""

    raw: bytes
    data: str | bytes
    doc: dict[str, Any]
    #: An error response with a null id, given the request's id (``doc`` has it; ``raw`` not).
    claimed: bool


@dataclass(slots=True)
class Filler:
    """An SSE event without data (a comment, a keep-alive): bytes that carry no message."""

    raw: bytes


@dataclass(slots=True)
class End:
    """The answer ended. ``rest``: the bytes of an unterminated last SSE event, in a lenient
    reader (a strict one drops them: clients never dispatch such an event)."""

    rest: bytes


@dataclass(slots=True)
class Problem:
    """The answer cannot be read on: ``error`` (from :mod:`mcp_edge.core.upstream_rules`) is what
    the client gets for its id. Nothing follows a problem."""

    error: RpcError

    @property
    def reason(self) -> str:
        """``data.reason`` or ``data.violation`` of the error."""
        data = self.error.data if isinstance(self.error.data, dict) else {}
        return str(data.get("reason") or data.get("violation") or "")


@dataclass(slots=True)
class Refused(Problem):
    """The head: a framing a client cannot read (content type, encoding, a 2xx other than 200)."""


@dataclass(slots=True)
class TooLarge(Problem):
    """A message (JSON body, SSE event, line) longer than ``max_bytes``."""


@dataclass(slots=True)
class Malformed(Problem):
    """Not what a 2026-07-28 answer may carry: not JSON, not one object, a JSON-RPC request, no
    response for the id in a JSON body, a message after the final response."""


@dataclass(slots=True)
class EndedEarly(Problem):
    """The stream ended without the final response (strict reading)."""


Head = Framing | Refused
Event = Lines | Message | Final | Filler | End | TooLarge | Malformed | EndedEarly

#: A cheap test of a message's text: parse it? (lenient reading; ``True`` for all when None).
BodyFilter = Callable[[bytes], bool]
EventFilter = Callable[[str], bool]

_NOTHING: tuple[()] = ()
_LINES = Lines()
_END = End(b"")
_JSON_BODY = Framing(rules.JSON, "json")
_SSE_BODY = Framing(rules.SSE, "sse")

_HEADLESS, _JSON, _SSE, _LINE_STREAM, _OTHER, _DONE = range(6)
#: The NDJSON sniff of a 2xx JSON body: off, the first line not seen yet, the first line was a
#: lone response (anything but whitespace after it makes the body a stream).
_SNIFF_OFF, _SNIFF_FIRST, _SNIFF_AFTER = range(3)


def _first_non_blank(data: bytes) -> int:
    """How many bytes of ``data`` it takes to see something other than whitespace (a number
    past its length when there is none)."""
    return len(data) - len(data.lstrip()) + 1 if not data.isspace() else sys.maxsize


def same_id(a: Any, b: Any) -> bool:
    """JSON-RPC ids match: equal, and a boolean never stands for 1 or 0."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def claim(doc: dict[str, Any], request_id: Any) -> bool:
    """An error response with a null id answers this request (one request per POST): it gets
    the request's id, so the client can match it. True when ``doc`` was changed."""
    if "error" in doc and doc.get("id") is None and "result" not in doc:
        doc["id"] = request_id
        return True
    return False


# ---------------------------------------------------------------------------------- reader


class ResponseReader:
    """Reads one answer to the request ``request_id``: :meth:`head` once, then :meth:`feed`
    each body chunk (``more=False`` with the last, or :meth:`end`)."""

    __slots__ = (
        "_blank",
        "_body_filter",
        "_chunks",
        "_event_filter",
        "_final_seen",
        "_id",
        "_lines",
        "_max",
        "_mode",
        "_size",
        "_sniff",
        "_splitter",
        "_strict",
        "_unread",
    )

    def __init__(
        self,
        request_id: Any,
        *,
        max_bytes: int,
        strict: bool = True,
        body_filter: BodyFilter | None = None,
        event_filter: EventFilter | None = None,
    ) -> None:
        self._id = request_id
        self._max = max_bytes
        self._strict = strict
        self._body_filter = None if strict else body_filter
        self._event_filter = None if strict else event_filter
        self._mode = _HEADLESS
        self._sniff = _SNIFF_OFF
        self._chunks: list[bytes] = []
        self._size = 0
        #: Everything of the JSON body so far is whitespace (the sniff has nothing to look at).
        self._blank = True
        self._splitter: SSESplitter | None = None
        self._lines: json_lines.LineSplitter | None = None
        self._final_seen = False
        self._unread = b""

    # ------------------------------------------------------------------ state

    @property
    def pending(self) -> int:
        """Bytes held for what is not complete yet (the JSON body so far, a partial event or
        line): what the caller's memory budget counts."""
        mode = self._mode
        if mode == _JSON:
            return self._size
        if mode == _SSE:
            assert self._splitter is not None
            return self._splitter.pending
        if mode == _LINE_STREAM:
            assert self._lines is not None
            return self._lines.pending
        return 0

    @property
    def final_seen(self) -> bool:
        """The final response has been reported (strict reading)."""
        return self._final_seen

    @property
    def done(self) -> bool:
        """The answer ended, or a problem ended its reading."""
        return self._mode == _DONE

    def unread(self) -> bytes:
        """After a :class:`Malformed`: the bytes fed from the offending message on (the
        message, and what followed it in the same chunk), for a caller that passes the answer
        on unread from there. Lines come back one per line, without surrounding whitespace.
        Empty otherwise; given once."""
        rest, self._unread = self._unread, b""
        return rest

    # ------------------------------------------------------------------ head

    def head(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> Head:
        """Take the answer's status and headers (``Content-Type`` / ``Content-Encoding``: the
        last of each counts)."""
        if self._mode != _HEADLESS:
            raise RuntimeError("the head of this answer was read already")
        content_type = b""
        encoding = None
        for name, value in headers:
            name = name.lower()
            if name == b"content-type":
                content_type = value
            elif name == b"content-encoding":
                encoding = value
        refused = rules.framing_error(status, content_type, encoding)
        if refused is not None:
            self._mode = _DONE
            return Refused(refused)
        media = rules.media_type(content_type)
        if media == rules.JSON:
            self._mode = _JSON
            if 200 <= status < 300:
                self._sniff = _SNIFF_FIRST
            return _JSON_BODY
        if media == rules.SSE:
            self._mode = _SSE
            # Bounded here, so that events complete before the limit is passed are reported.
            self._splitter = SSESplitter(sys.maxsize)
            return _SSE_BODY
        self._mode = _OTHER
        return Framing(media, "other")

    # ------------------------------------------------------------------ body

    def feed(self, chunk: bytes, more: bool = True, *, own: bool = False) -> Sequence[Event]:
        """Take the next piece of the body (``more=False``: it is the last); the events it
        completes, in order."""
        mode = self._mode
        if mode == _JSON:
            if (
                not more
                and not self._size
                and len(chunk) <= self._max
                and (not self._sniff or b"\n" not in chunk)
            ):
                return self._whole_json(chunk)  # the whole body at once, one line: nothing held
            return self._feed_json(chunk, more)
        if mode == _SSE:
            return self._feed_sse(chunk, more, own)
        if mode == _LINE_STREAM:
            events: list[Event] = []
            self._feed_lines(chunk, more, own, events)
            return events
        if mode == _OTHER:
            if not more:
                self._mode = _DONE
                return [End(b"")]
            return _NOTHING
        if mode == _HEADLESS:
            raise RuntimeError("feed before head")
        return _NOTHING  # done: nothing more is read

    def end(self) -> Sequence[Event]:
        """The body ended."""
        return self.feed(b"", False)

    def _stop(self, problem: TooLarge | Malformed | EndedEarly, events: list[Event]) -> None:
        self._mode = _DONE
        self._chunks = []
        self._size = 0
        self._splitter = None
        self._lines = None
        events.append(problem)

    # ------------------------------------------------------------------ JSON body

    def _feed_json(self, chunk: bytes, more: bool) -> Sequence[Event]:
        if chunk:
            size = self._size + len(chunk)
            if size > self._max:
                switched = self._lines_within_limit(chunk, more) if self._sniff else None
                if switched is not None:
                    return switched
                events: list[Event] = []
                self._stop(TooLarge(rules.too_large()), events)
                return events
            self._size = size
            self._chunks.append(chunk)
            sniff = self._sniff
            if sniff:
                if sniff == _SNIFF_AFTER:  # the first line was a response: anything more?
                    if not chunk.isspace():
                        return self._to_lines(more)
                elif b"\n" in chunk:
                    switched = self._first_line(chunk, more)
                    if switched is not None:
                        return switched
                elif self._blank and not chunk.isspace():
                    self._blank = False
        if more:
            return _NOTHING
        whole = b"".join(self._chunks)
        self._chunks = []
        self._size = 0
        return self._whole_json(whole)

    def _whole_json(self, whole: bytes) -> Sequence[Event]:
        self._mode = _DONE
        found = self._final_body(whole) if self._strict else self._lenient_body(whole)
        if type(found) is Malformed:
            self._unread = whole
            return (found,)
        return (found, _END)

    def _lines_within_limit(self, chunk: bytes, more: bool) -> list[Event] | None:
        """A chunk that takes the JSON body past the limit: the events when the body turned
        into lines before its ``max_bytes``-th byte (as it would have, cut into smaller
        chunks), else None (too large)."""
        if self._sniff == _SNIFF_AFTER:
            decided = self._size + _first_non_blank(chunk)
        else:
            whole = b"".join(self._chunks) + chunk
            found = json_lines.first_line(whole)
            if found is None or found[0] == "json":
                return None
            kind, end = found
            decided = end if kind == "message" else end + _first_non_blank(whole[end:])
        if decided > self._max:
            return None
        self._chunks.append(chunk)
        return self._to_lines(more)

    def _first_line(self, chunk: bytes, more: bool) -> list[Event] | None:
        """A chunk with a newline, while a 2xx JSON body's first line is not known: the events
        once the body turns out to be a stream of messages. (A compact JSON body has no
        newline: it costs one byte scan per chunk.)"""
        if self._blank:
            if chunk.isspace():
                return None  # nothing but whitespace so far: nothing to look at
            self._blank = False
        whole = b"".join(self._chunks)
        self._chunks = [whole]
        found = json_lines.first_line(whole)
        if found is None:
            return None
        kind, end = found
        if kind == "json":
            self._sniff = _SNIFF_OFF
            return None
        if kind == "response" and (end == len(whole) or whole[end:].isspace()):
            self._sniff = _SNIFF_AFTER
            return None
        return self._to_lines(more)

    def _to_lines(self, more: bool) -> list[Event]:
        held = b"".join(self._chunks)
        self._chunks = []
        self._size = 0
        self._sniff = _SNIFF_OFF
        self._mode = _LINE_STREAM
        self._lines = json_lines.LineSplitter(self._max)
        events: list[Event] = [_LINES]
        self._feed_lines(held, more, False, events)
        return events

    def _final_body(self, whole: bytes) -> Final | Malformed:
        """A JSON body, strictly: exactly one response, for this request's id."""
        try:
            doc = orjson.loads(whole)
        except orjson.JSONDecodeError:
            return Malformed(rules.garbage())
        if type(doc) is not dict:
            if isinstance(doc, list):
                return Malformed(rules.no_response("a JSON array instead of one response"))
            return Malformed(rules.garbage())
        if "result" in doc:  # (the common case first: a result for this id)
            rid = doc.get("id")
            if rid == self._id and type(rid) is type(self._id):
                self._final_seen = True
                return Final(whole, whole, doc, False)
        elif "error" not in doc:
            if "method" in doc and "id" in doc:
                return Malformed(rules.server_request(doc.get("method")))
            return Malformed(rules.no_response("a message that is not a response"))
        claimed = claim(doc, self._id)
        if not claimed and not same_id(doc.get("id"), self._id):
            return Malformed(rules.no_response("a response for another id"))
        self._final_seen = True
        return Final(whole, whole, doc, claimed)

    def _lenient_body(self, whole: bytes) -> Final | Message | Malformed:
        body_filter = self._body_filter
        if body_filter is not None and not body_filter(whole):
            return Message(whole, whole, None)
        try:
            doc = orjson.loads(whole)
        except orjson.JSONDecodeError:
            if body_filter is not None:  # it may matter, and a client may read it
                return Malformed(rules.garbage())
            return Message(whole, whole, None)
        if not isinstance(doc, dict):
            return Message(whole, whole, None)
        if "id" in doc and same_id(doc["id"], self._id) and ("result" in doc or "error" in doc):
            return Final(whole, whole, doc, False)
        return Message(whole, whole, doc)

    # ------------------------------------------------------------------ streams

    def _feed_sse(self, chunk: bytes, more: bool, own: bool) -> list[Event]:
        events: list[Event] = []
        splitter = self._splitter
        assert splitter is not None
        limit = self._max + 1  # (an event is held whole but for its last byte, or its lone CR)
        if chunk and not self._on_events(splitter, splitter.feed(chunk), own, events):
            return events
        if not more and not self._on_events(splitter, splitter.finish(), own, events):
            return events
        if splitter.pending > limit:
            self._stop(TooLarge(rules.too_large()), events)
            return events
        if not more:
            self._finish(splitter.rest(), events)
        return events

    def _on_events(
        self, splitter: SSESplitter, found: list[SSEEvent], own: bool, events: list[Event]
    ) -> bool:
        """The complete events of a stream; False when one ended the reading."""
        limit = self._max + 1
        for i, ev in enumerate(found):
            if len(ev.raw) > limit:
                self._stop(TooLarge(rules.too_large()), events)
                return False
            if ev.data is None:
                events.append(Filler(ev.raw))
            elif not self._on_data(ev.raw, ev.data, None, own, events):
                self._unread = b"".join(e.raw for e in found[i:]) + splitter.rest()
                return False
        return True

    def _feed_lines(self, chunk: bytes, more: bool, own: bool, events: list[Event]) -> None:
        splitter = self._lines
        assert splitter is not None
        if chunk:
            try:
                lines = splitter.feed(chunk)
            except json_lines.LineTooLong as too_long:
                lines = too_long.lines
                self._lines = None
            for i, line in enumerate(lines):
                if not self._on_line(line, own, events):
                    self._unread = b"".join(x + b"\n" for x in lines[i:]) + splitter.rest()
                    return
            if self._lines is None:
                self._stop(TooLarge(rules.too_large()), events)
                return
        if not more:
            rest = splitter.rest()  # the last line may end without a newline (NDJSON allows it)
            if rest and not self._on_line(rest, own, events):
                self._unread = rest
                return
            self._finish(b"", events)

    def _on_line(self, line: bytes, own: bool, events: list[Event]) -> bool:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            self._stop(Malformed(rules.garbage()), events)
            return False
        # A carriage return between two JSON tokens is whitespace to JSON but a line break to
        # SSE: such a message is written again (json_lines.as_event_data).
        data = orjson.dumps(doc) if b"\r" in line else line
        return self._on_data(
            encode_event(data), data.decode("utf-8", errors="replace"), (doc,), own, events
        )

    def _on_data(
        self,
        raw: bytes,
        data: str,
        parsed: tuple[Any] | None,
        own: bool,
        events: list[Event],
    ) -> bool:
        """One message of a stream (``parsed``: its document, when a line was parsed already);
        False when it ended the reading."""
        if self._final_seen:
            if own:
                return True  # the caller's own error event after the final response: dropped
            self._stop(Malformed(rules.after_final()), events)
            return False
        strict = self._strict
        if not strict:
            event_filter = self._event_filter
            if event_filter is not None and not event_filter(data):
                events.append(Message(raw, data, None))
                return True
        if parsed is not None:
            doc = parsed[0]
        else:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                if strict or self._event_filter is not None:  # (picked: it may matter)
                    self._stop(Malformed(rules.garbage()), events)
                    return False
                events.append(Message(raw, data, None))
                return True
        if not isinstance(doc, dict):
            if strict:
                self._stop(
                    Malformed(rules.no_response("a JSON array instead of one message")), events
                )
                return False
            events.append(Message(raw, data, None))
            return True
        if "method" in doc:
            if "id" in doc:
                self._stop(Malformed(rules.server_request(doc["method"])), events)
                return False
            events.append(Message(raw, data, doc))  # a notification
            return True
        if "result" not in doc and "error" not in doc:
            events.append(Message(raw, data, doc))
            return True
        rid = self._id
        if strict:
            claimed = claim(doc, rid)
            if not claimed and not same_id(doc.get("id"), rid):
                events.append(Message(raw, data, doc))  # never the client's: another id
                return True
            self._final_seen = True
            events.append(Final(raw, data, doc, claimed))
        elif "id" in doc and same_id(doc["id"], rid):
            events.append(Final(raw, data, doc, False))
        else:
            events.append(Message(raw, data, doc))
        return True

    def _finish(self, rest: bytes, events: list[Event]) -> None:
        """The stream ended (after its last complete message)."""
        if self._strict and not self._final_seen:
            self._stop(EndedEarly(rules.no_response("the stream ended without it")), events)
            return
        self._mode = _DONE
        self._splitter = None
        self._lines = None
        # Strict: an unterminated last event is never dispatched by clients: dropped.
        events.append(End(b"" if self._strict else rest))
