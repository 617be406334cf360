"""A legacy (2025-era) Streamable HTTP session, as the bridge drives it: thin I/O over aiohttp.

One session = ``initialize`` (+ ``notifications/initialized``), then requests, each answered by
JSON or by an SSE stream that may carry the server's own requests before the response; answers
to those are POSTed separately; ``GET`` + ``Last-Event-ID`` resumes a stream on a server with an
event store; ``DELETE`` ends the session. What the messages mean is decided in
:mod:`mcp_edge.upstream.legacy.wire` and :mod:`mcp_edge.upstream.legacy.driver`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from mcp_edge.core.sse import Event as SSEEvent
from mcp_edge.core.sse import SSESplitter, event_id_of
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.errors import (
    AnswerOverBudget,
    NotSent,
    SessionGone,
    UpstreamBusy,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcp_edge.upstream.legacy.standalone import Standalone

__all__ = [
    "ACCEPT",
    "AnswerOverBudget",
    "EventStream",
    "LegacyHttpSession",
    "NotSent",
    "ResumedStream",
    "SessionGone",
    "UpstreamBusy",
    "UpstreamRefused",
    "UpstreamUnavailable",
]

ACCEPT = "application/json, text/event-stream"
#: How long the gateway waits for a DELETE or a POSTed answer to be acknowledged.
SHORT_TIMEOUT = aiohttp.ClientTimeout(total=10.0)


class EventStream:
    """The messages of one upstream response, JSON or SSE, with the SSE event ids.

    Reading can stop after any message and go on later (a parked call is read round after
    round): what has been received but not yet read stays here, never in a suspended generator.
    ``close()`` drops the connection (it is not returned to the pool half read), which is also
    what tells an SDK server the stream is gone.

    What it holds (an event or a JSON body as it arrives, messages received and not yet read,
    the message read last until the next read) is counted in ``reservation``, the client
    request's share of the process's answer budget (or the session's own, for what the session
    asks itself): past the first ``UNCOUNTED_BYTES``, a read that would go over the budget raises
    :class:`AnswerOverBudget` (and reads no more). A parked call's stream is read again for its
    retry: the retry's reservation replaces the first request's (:attr:`reservation`).
    """

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        max_event_bytes: int,
        reservation: Reservation,
        *,
        resume_from: str | None = None,
    ) -> None:
        self.response = response
        self.headers = response.headers
        self._max = max_event_bytes
        ctype = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        self.sse = ctype == "text/event-stream"
        self.json = ctype == "application/json"
        #: The id of the last SSE event seen (priming events included).
        self.last_event_id: str | None = None
        #: Did any event carry an ``id:`` (the server has an event store)?
        self.has_event_ids = False
        #: The id of the last event everything up to which has been read (where a resumed
        #: stream must continue so that nothing unread is skipped).
        self.consumed_id: str | None = resume_from
        #: A resumed stream continues from a known event: its own priming events (which a store
        #: need not keep) never become the resume point.
        self._resumed = resume_from is not None
        self.before_last: str | None = resume_from
        self.seen_any = False
        self.finished = False
        self._pending: deque[tuple[str | None, Any]] = deque()
        self._splitter = SSESplitter(max_event_bytes)
        #: The client request's share of the answer budget.
        self.reservation = reservation
        #: Bytes received and not yet split into events; of the messages not yet read (by
        #: item); of the message read last.
        self._partial = 0
        self._sizes: deque[int] = deque()
        self._last = 0

    async def next(self) -> tuple[str | None, Any] | None:
        """The next ``(event id, message)``, or None at the end of the response. Priming events
        (no data) only update the id."""
        if self._last:
            self._last = 0  # the message read before is the reader's now (it counts it)
            self._hold()
        try:
            while not self._pending:
                if self.finished:
                    self._hold()
                    return None
                if not self.sse:
                    await self._read_body()
                    continue
                chunk = await self.response.content.readany()
                try:
                    if not chunk:  # the end completes what its last byte ends (a lone CR)
                        self.finished = True
                        self._take(self._splitter.finish())
                        self._partial = 0
                        continue
                    self._partial += len(chunk)
                    self._take(self._splitter.feed(chunk))
                except ValueError:
                    raise UpstreamRefused(self.response.status, "SSE event too large") from None
                self._hold()
        except TimeoutError:
            raise UpstreamUnavailable("timeout") from None
        except aiohttp.ClientError:
            raise UpstreamUnavailable("broken_stream") from None
        #: Where a stream resumed now would continue so as to give this item again.
        self.before_last = self.consumed_id
        item = self._pending.popleft()
        self._last = self._sizes.popleft()
        self._hold()
        if item[0] is not None:
            self.consumed_id = item[0]
        return item

    async def _read_body(self) -> None:
        """A JSON body, whole (within ``max_event_bytes``), counted as it arrives."""
        parts: list[bytes] = []
        size = 0
        while chunk := await self.response.content.readany():
            size += len(chunk)
            if size > self._max:
                raise UpstreamRefused(self.response.status, "response too large")
            parts.append(chunk)
            self._partial = size
            self._hold()
        body = b"".join(parts)
        del parts
        self._partial = 0
        if body.strip():
            self._pending.append((None, _loads(body)))
            self._sizes.append(len(body))
        self.finished = True
        self._hold()

    @property
    def last_size(self) -> int:
        """Bytes of the message read last (what its reader holds of it until it reads again)."""
        return self._last

    def _hold(self) -> None:
        """Count what this stream holds now (none of it up to ``UNCOUNTED_BYTES``)."""
        held = self._partial + sum(self._sizes) + self._last
        if not self.reservation.resize(held if held > UNCOUNTED_BYTES else 0):
            raise AnswerOverBudget

    def _take(self, events: list[SSEEvent]) -> None:
        for ev in events:
            self.seen_any = True
            ev_id = event_id_of(ev.raw)
            if ev_id is not None:
                self.has_event_ids = True
                self.last_event_id = ev_id
            self._partial = max(0, self._partial - len(ev.raw))
            if ev.data:
                self._pending.append((ev_id, _loads(ev.data)))  # (a str: no copy as bytes)
                self._sizes.append(len(ev.raw))
            elif ev_id is not None and not self._pending and not self._resumed:
                self.consumed_id = ev_id  # a priming event, nothing unread before it

    def close(self) -> None:
        """Drop the connection, and what was read and not taken (what is done with the call
        afterwards, a cancellation posted in the background, holds none of it)."""
        if self.finished:
            self.response.release()
        else:
            self.response.close()
        self._splitter = SSESplitter(self._max)
        self._pending.clear()
        self._sizes.clear()
        self._partial = self._last = 0


def _loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


class LegacyHttpSession:
    """One upstream session (or none, for servers that run without sessions)."""

    #: A request the server sends on a call's own stream is that call's (2025 Streamable HTTP
    #: ties them so); one on the standalone stream is not.
    ties_requests = True

    def __init__(
        self,
        client: aiohttp.ClientSession,
        endpoint: str,
        *,
        host: str,
        headers: Sequence[tuple[str, str]] = (),
        max_event_bytes: int = 16 * 1024 * 1024,
        session_id: str | None = None,
        version: str | None = None,
        budget: AnswerBudget | None = None,
    ) -> None:
        self.client = client
        #: The process's answer pool: what the session reads for itself (its initialize, its
        #: standalone stream) draws from it as kind ``bridge``, as a call's answer does.
        self.budget = budget
        self.endpoint = endpoint
        self.host = host
        self.extra_headers = list(headers)
        self.max_event_bytes = max_event_bytes
        self.session_id = session_id
        self.version = version
        self.init_result: dict[str, Any] = {}
        #: The server answered initialize with JSON: it runs in JSON-response mode and cannot
        #: send a question mid-call (it would be swallowed).
        self.json_mode = False
        self.closed = False
        #: The session's standalone GET stream, where SDK servers send what they do not tie to
        #: a call (``roots/list`` of their own, most 1.x servers' questions, list changes), and
        #: what reads it for the session's life (``standalone.Standalone``; not for a listen
        #: stream's session, whose feed reads it itself).
        self.side: EventStream | None = None
        self.standalone: Standalone | None = None
        #: What the session declared at initialize (what the bridge answers for, between calls).
        self.capabilities: dict[str, Any] = {}
        #: The keys (``wire.request_key``) of the server's requests handled in this session:
        #: none is answered twice.
        self.answered: set[str] = set()

    # ------------------------------------------------------------------ plumbing

    def _headers(
        self, *, sse_only: bool = False, last_event_id: str | None = None
    ) -> dict[str, str]:
        headers = {"Host": self.host, "Accept": "text/event-stream" if sse_only else ACCEPT}
        if not sse_only:
            headers["Content-Type"] = "application/json"
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version is not None:
            headers["MCP-Protocol-Version"] = self.version
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        for name, value in self.extra_headers:
            headers[name] = value
        return headers

    async def _send(
        self,
        method: str,
        headers: dict[str, str],
        body: bytes | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        try:
            kwargs: dict[str, Any] = {"headers": headers, "data": body, "allow_redirects": False}
            if timeout is not None:
                kwargs["timeout"] = timeout
            return await self.client.request(method, self.endpoint, **kwargs)
        except TimeoutError:
            raise UpstreamUnavailable("timeout") from None
        except (aiohttp.ClientError, OSError):
            raise UpstreamUnavailable("unreachable") from None

    async def _check(self, response: aiohttp.ClientResponse) -> None:
        if response.status < 400:
            return
        detail = ""
        with contextlib.suppress(Exception):
            raw = await asyncio.wait_for(response.content.read(4096), 5.0)
            doc = _loads(raw)
            if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
                detail = str(doc["error"].get("message", ""))
            else:
                detail = raw.decode("utf-8", "replace")[:200]
        response.close()
        if response.status == 404 and self.session_id is not None:
            raise SessionGone
        challenge = response.headers.get("WWW-Authenticate") if response.status == 401 else None
        raise UpstreamRefused(response.status, detail or response.reason or "", challenge)

    # ------------------------------------------------------------------ the session

    async def open(
        self, capabilities: dict[str, Any], info: dict[str, Any], level: str | None = None
    ) -> None:
        """``initialize`` + ``notifications/initialized`` (+ ``logging/setLevel``)."""
        init_id = wire.new_id()
        self.capabilities = capabilities
        own = self.own()
        stream = await self.request(wire.initialize_message(init_id, capabilities, info), own)
        try:
            response = None
            while (item := await stream.next()) is not None:
                incoming = wire.classify(item[1])
                if isinstance(incoming, wire.Response) and incoming.id == init_id:
                    response = incoming
                    break
            self.json_mode = stream.json
            sid = stream.headers.get("mcp-session-id")
        finally:
            stream.close()
            own.release()
        if response is None:
            raise UpstreamRefused(200, "no answer to initialize")
        if response.error is not None or response.result is None:
            raise UpstreamRefused(
                200, f"initialize failed: {(response.error or {}).get('message', '')}"
            )
        version = wire.negotiated_version(response.result)
        if version is None:
            raise UpstreamRefused(
                200, f"unsupported protocol version {response.result.get('protocolVersion')!r}"
            )
        self.session_id = sid
        self.version = version
        self.init_result = response.result
        await self.post(wire.INITIALIZED)
        caps = response.result.get("capabilities")
        if level is not None and isinstance(caps, dict) and "logging" in caps:
            own = self.own()
            stream = await self.request(
                wire.request_message(wire.new_id(), "logging/setLevel", {"level": level}), own
            )
            try:
                await stream.next()
            finally:
                stream.close()
                own.release()

    @property
    def server_info(self) -> dict[str, Any] | None:
        info = self.init_result.get("serverInfo")
        return info if isinstance(info, dict) else None

    @property
    def initialized_here(self) -> bool:
        """Did this object run the session's initialize (and so know all it said)?"""
        return "capabilities" in self.init_result

    @property
    def stateless(self) -> bool:
        """No session id after initialize: answers POSTed later land nowhere."""
        return self.session_id is None

    def own(self) -> Reservation:
        """A reservation for what the session reads for itself (released by the caller)."""
        return Reservation(self.budget, kind="bridge")

    async def request(self, message: dict[str, Any], reservation: Reservation) -> EventStream:
        """POST a request; the caller reads (and closes) the answer, which is counted in
        ``reservation`` as it is read."""
        response = await self._send("POST", self._headers(), orjson.dumps(message))
        await self._check(response)
        return EventStream(response, self.max_event_bytes, reservation)

    async def post(self, message: dict[str, Any]) -> None:
        """POST a response or notification (202 expected)."""
        response = await self._send("POST", self._headers(), orjson.dumps(message), SHORT_TIMEOUT)
        try:
            await self._check(response)
        finally:
            response.release()

    async def resume(self, last_event_id: str, reservation: Reservation) -> EventStream:
        """GET the rest of a stream after ``last_event_id`` (servers with an event store),
        counted in ``reservation`` as it is read."""
        response = await self._send(
            "GET", self._headers(sse_only=True, last_event_id=last_event_id)
        )
        await self._check(response)
        return EventStream(response, self.max_event_bytes, reservation, resume_from=last_event_id)

    async def close(self) -> None:
        """End the session (DELETE). Never raises: the upstream's idle timeout is the backstop."""
        self.drop_side()
        if self.closed or self.session_id is None:
            self.closed = True
            return
        self.closed = True
        with contextlib.suppress(
            UpstreamUnavailable, aiohttp.ClientError, OSError, asyncio.TimeoutError
        ):
            response = await self._send("DELETE", self._headers(sse_only=True), None, SHORT_TIMEOUT)
            response.release()

    async def open_side(
        self,
        last_event_id: str | None = None,
        *,
        busy_wait: float = 0.0,
        read: bool = True,
        attach: bool = False,
    ) -> None:
        """Listen on the session's standalone stream (resumed after ``last_event_id`` if given).
        A server that has none (405) is simply not listened to. One that still has a listener
        (409: another replica's, closed a moment ago, not yet noticed) is asked again for up to
        ``busy_wait`` seconds. ``read``: the session reads it from now on (a listen stream's feed
        reads it itself); ``attach``: what arrives is for the call about to be made."""
        if self.standalone is not None and self.standalone.ended:
            self.drop_side()  # the server ended it (2025-11-25 servers may): ask again
        if self.side is not None or self.session_id is None or self.json_mode:
            if attach:
                self.expect_questions()
            return
        delay, waited = 0.05, 0.0
        while True:
            response = await self._send(
                "GET", self._headers(sse_only=True, last_event_id=last_event_id)
            )
            if response.status == 409 and waited < busy_wait:
                response.close()
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 0.5)
                continue
            break
        if response.status >= 400 or "text/event-stream" not in response.headers.get(
            "content-type", ""
        ):
            response.close()
            return
        # What it holds is the session's own (a listen stream's feed gives it the listen
        # request's, :meth:`HttpFeed.open`).
        self.side = EventStream(
            response, self.max_event_bytes, self.own(), resume_from=last_event_id
        )
        if read:
            self.standalone = Standalone(
                self.side,
                post=self.post,
                capabilities=self.capabilities,
                answered=self.answered,
                reservation=self.own(),
            )
            if attach:
                self.standalone.attach()

    def expect_questions(self) -> None:
        """A call that may ask is about to be made: what the standalone stream brings is its."""
        if self.standalone is not None:
            self.standalone.attach()

    def end_questions(self) -> None:
        if self.standalone is not None:
            self.standalone.detach()

    def drop_side(self) -> None:
        """Stop listening on the standalone stream (what was handed to a call and not taken is
        dropped: a resumed call picks it up again from ``Standalone.resume_id``)."""
        if self.standalone is not None:
            self.standalone.close()
            self.standalone = None
        if self.side is not None:
            self.side.close()
            self.side.reservation.release()
            self.side = None


class ResumedStream:
    """A call's stream picked up with ``GET`` + ``Last-Event-ID``, reconnected when it goes quiet.

    An SDK server notices a dropped stream only when its connection really closes; a resume that
    arrives before that replays what is stored but the live events still go to the old stream. So
    when nothing comes for a while (or the GET ends without the call's response), it is asked again
    from the last event read: the event store replays what was missed, nothing twice.
    """

    def __init__(
        self,
        session: LegacyHttpSession,
        stream: EventStream,
        *,
        quiet: float = 1.0,
        max_quiet: float = 8.0,
    ) -> None:
        self.session = session
        self.stream = stream
        self.quiet = quiet
        self.max_quiet = max_quiet
        self.has_event_ids = True
        self.reconnects = 0
        self._reservation = stream.reservation
        self._read: asyncio.Future[tuple[str | None, Any] | None] | None = None

    @property
    def consumed_id(self) -> str | None:
        return self.stream.consumed_id

    @property
    def reservation(self) -> Reservation:
        return self._reservation

    @reservation.setter
    def reservation(self, value: Reservation) -> None:
        self._reservation = self.stream.reservation = value

    @property
    def finished(self) -> bool:
        return self.stream.finished

    async def next(self) -> tuple[str | None, Any] | None:
        wait = self.quiet
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(self.stream.next())
            done, _ = await asyncio.wait([self._read], timeout=wait)
            if done:
                read, self._read = self._read, None
                item = read.result()
                if item is not None:
                    return item
            # Quiet for ``wait`` seconds, or the GET ended without the response: ask again.
            self._drop()
            assert self.stream.consumed_id is not None
            self.stream = await self.session.resume(self.stream.consumed_id, self._reservation)
            self.reconnects += 1
            wait = min(wait * 2, self.max_quiet)

    def _drop(self) -> None:
        if self._read is not None:
            self._read.cancel()
            self._read = None
        self.stream.close()

    def close(self) -> None:
        self._drop()
