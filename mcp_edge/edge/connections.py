"""Client connections: how many one process keeps, and how long and how much a client may take to
send the head of a request.

uvicorn's httptools protocol leaves three openings to a slow or hostile client:

* no deadline for the request head. A connection that sends nothing, or one header byte every few
  seconds (slowloris), is kept for ever: the keep-alive timer runs only between requests, and any
  byte stops it;
* no limit on the size of the head: httptools buffers header bytes without bound;
* no cap on connections short of the file-descriptor limit. uvicorn's ``limit_concurrency`` is no
  cure: it counts idle connections too, and answers 503 to new *requests* once it is reached, so
  slow connections would starve honest ones.

:class:`GuardedHttpToolsProtocol` (uvicorn's protocol with these added) closes them:

* **head deadline**: the head must be complete ``header_timeout`` seconds after the connection
  opened, or after the first byte of each later request; otherwise 408 and close (a connection
  that sent nothing at all is closed silently);
* **head size**: more than ``max_header_bytes`` before the head ends gets 431 and close;
* **connection cap**: a connection over ``max_connections`` makes room by closing the connection
  that has waited longest *without a request in progress* (idle between requests, still sending
  its head, or sending the rest of a body already answered), if it has waited at least half a
  second. Otherwise (every connection has a request in progress, or just opened) the new one's
  request gets 503 and the connection is closed: a request being served is never cut off, and a
  burst of connections is not mistaken for slow ones;
* **timers**: the head and body deadlines are coarse timers (mcp_edge.edge.timers: they fire at most
  50 ms late, and arming one costs a dict entry, not a loop timer). A timer is armed only when a
  head or a body is still incomplete once a read has been handled: a request that arrives whole in
  one read (most do) arms none;
* **body deadline**: a request's body must have arrived ``body_timeout`` seconds (plus a few of
  grace) after its head, or the connection is closed. On the MCP routes the transport middleware answers
  408 with the JSON-RPC error at ``body_timeout`` (``mcp_edge.edge.body``); this is the
  backstop for every other path, and for the rest of a body the gateway answered early (413,
  503), which uvicorn reads and drops so the connection stays usable;
* **write deadline**: a client that takes nothing of its answer while the server holds more of
  it than the transport's high-water mark, for ``write_timeout`` seconds, has its connection
  aborted (what it had not taken is dropped). uvicorn waits for such a client for ever, and
  what the gateway holds of the answer meanwhile counts against the process's answer budget
  (mcp_edge.edge.responses): a client that stops reading would hold it for good.
"""

from __future__ import annotations

import asyncio
import functools
import http
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST
from mcp_edge.edge.asgi import send_json
from mcp_edge.edge.timers import wheel
from mcp_edge.observability.logs import event


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 2048
    header_timeout: float = 10.0
    max_header_bytes: int = 64 * 1024
    body_timeout: float = 30.0
    write_timeout: float = 60.0


#: A connection younger than this is not closed to make room for another (see _make_room).
FRESH_SECONDS = 0.5
#: Past body_timeout, the transport middleware answers 408 itself; the connection is closed this much later.
BODY_GRACE_SECONDS = 5.0

#: Connections closed by this module in this process, by reason (logged, at most every 10 s).
closed: Counter[str] = Counter()
_last_logged: dict[str, float] = {}
_LOG_EVERY = 10.0


def _count(reason: str) -> None:
    closed[reason] += 1
    now = time.monotonic()
    if now - _last_logged.get(reason, 0.0) >= _LOG_EVERY:
        _last_logged[reason] = now
        event(logging.WARNING, "client connection closed", reason=reason, total=closed[reason])


def raise_fd_limit(wanted: int, *, margin: int = 256) -> int:
    """Raise this process's soft open-files limit towards ``wanted`` (+ a margin for upstream
    connections, logs and the like) as far as the hard limit allows; the limit in force.

    Each client connection and each pooled upstream connection is a file descriptor; a soft limit
    of 1024 (a common default) would make the process refuse connections long before
    ``listen.max_connections``."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted + margin
    if soft != resource.RLIM_INFINITY and soft < target:
        new = target if hard == resource.RLIM_INFINITY else min(target, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
        if soft < target:
            event(
                logging.WARNING,
                "open-files limit below listen.max_connections plus the upstream pool; "
                "connections over it will be refused by the kernel",
                limit=soft,
                wanted=target,
            )
    return soft


def protocol_factory(limits: ConnectionLimits) -> Any:
    """What ``uvicorn.Config(http=...)`` takes (picklable, for worker processes)."""
    return functools.partial(GuardedHttpToolsProtocol, limits=limits)


_OVER_CAPACITY = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": INTERNAL_ERROR,
            "message": "The gateway has as many connections with requests in progress as it may; retry shortly",
            "data": {"reason": "connections"},
        },
    }
)


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    await send_json(send, 503, _OVER_CAPACITY, [(b"retry-after", b"1"), (b"connection", b"close")])


class _Waiting:
    """One server's connections without a request in progress, longest waiting first, and those
    closed to make room that are not gone yet."""

    def __init__(self) -> None:
        self.queue: OrderedDict[GuardedHttpToolsProtocol, None] = OrderedDict()
        self.evicted: set[GuardedHttpToolsProtocol] = set()
        self.trim_pending = False

    def oldest_settled(self, settled: float, skip: Any = None) -> GuardedHttpToolsProtocol | None:
        for conn in self.queue:
            if conn is skip:
                continue
            # In waiting order: if this one opened too recently, so did all after it.
            return conn if conn.waiting_since <= settled else None
        return None

    def evict(self, conn: GuardedHttpToolsProtocol) -> None:
        _count("evicted")
        self.queue.pop(conn, None)
        self.evicted.add(conn)
        conn.transport.close()


_servers: WeakKeyDictionary[Any, _Waiting] = WeakKeyDictionary()

_Base = HttpToolsProtocol


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._max_head = limits.max_header_bytes
        waiting = _servers.get(self.server_state)
        if waiting is None:
            waiting = _servers[self.server_state] = _Waiting()
        self._waiting = waiting
        self._reading_head = True  # between the end of one request and the end of the next head
        self._head_bytes = 0
        self._heads = 0  # heads completed on this connection
        self._in_message = False  # a request's bytes are arriving (head or body)
        self._head_timer: Any = None
        self._body_timer: Any = None
        self._write_timer: Any = None
        #: Since when the connection has had no request in progress (eviction: oldest first).
        self.waiting_since = 0.0

    # ------------------------------------------------------------------ connection

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._now_waiting()
        self._arm_head_timer()
        if len(self.connections) - len(self._waiting.evicted) > self.limits.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._waiting.queue.pop(self, None)
        self._waiting.evicted.discard(self)
        super().connection_lost(exc)

    def busy(self) -> bool:
        """A request is in progress (its response not complete)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _now_waiting(self) -> None:
        self.waiting_since = time.monotonic()
        self._waiting.queue[self] = None
        self._waiting.queue.move_to_end(self)

    def _make_room(self) -> None:
        # A connection that opened a moment ago has not had the time to send its head (in a
        # burst the server accepts many before it reads any): it is not taken for a slow one.
        victim = self._waiting.oldest_settled(time.monotonic() - self._fresh, skip=self)
        if victim is not None:
            self._waiting.evict(victim)
            return
        # Every connection has a request in progress (or has just opened): this one's request is
        # answered 503 once its head is in (so that the client reads the answer rather than a
        # reset connection). Whatever is still over the cap a moment later and waiting is closed.
        _count("over_capacity")
        self.app = _over_capacity
        if not self._waiting.trim_pending:
            self._waiting.trim_pending = True
            self.loop.call_later(
                self._fresh,
                self._trim,
                self._waiting,
                self.connections,
                self.limits.max_connections,
                self._fresh,
            )

    @staticmethod
    def _trim(waiting: _Waiting, connections: Any, cap: int, fresh: float) -> None:
        """Close connections over the cap that wait without a request in progress."""
        waiting.trim_pending = False
        now = time.monotonic()
        for _ in range(len(connections) - len(waiting.evicted) - cap):
            victim = waiting.oldest_settled(now - fresh)
            if victim is None:  # still over, with connections too new to judge: look again then
                first = next(iter(waiting.queue), None)
                if first is not None:
                    waiting.trim_pending = True
                    asyncio.get_running_loop().call_later(
                        max(0.01, first.waiting_since + fresh - now),
                        GuardedHttpToolsProtocol._trim,
                        waiting,
                        connections,
                        cap,
                        fresh,
                    )
                return
            waiting.evict(victim)

    @property
    def _fresh(self) -> float:
        return min(FRESH_SECONDS, self.limits.header_timeout)

    # ------------------------------------------------------------------ the head

    # The overrides below run on every request: they call uvicorn's methods directly (not through
    # ``super()``) and touch only flags until something is actually incomplete or over a bound.

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            room = self._max_head - self._head_bytes
            if len(data) > room:
                heads = self._heads
                self._head_bytes = self.limits.max_header_bytes
                if room > 0:
                    super().data_received(data[:room])
                if self.transport.is_closing():
                    return
                if self._heads == heads and self._reading_head:  # the head went on past the limit
                    _count("header_too_large")
                    self._answer_and_close(
                        431, f"Request head exceeds {self.limits.max_header_bytes} bytes"
                    )
                    return
                self.data_received(data[max(room, 0) :])  # a body, or the next request
                return
            self._head_bytes += len(data)
        _Base.data_received(self, data)
        if self._in_message:
            self._arm_for_the_rest()

    def _arm_for_the_rest(self) -> None:
        """A request is still arriving after a read: the deadline of what it has yet to send,
        armed as of the read that started it (in the same turn of the loop)."""
        if self.transport.is_closing():
            return
        if self._reading_head:
            if self._head_timer is None:
                self._arm_head_timer()
        elif self._body_timer is None:
            self._body_timer = wheel(self.loop).call_later(
                self.limits.body_timeout + BODY_GRACE_SECONDS, self._body_expired
            )

    def on_message_begin(self) -> None:
        _Base.on_message_begin(self)
        self._in_message = True

    def on_headers_complete(self) -> None:
        self._waiting.queue.pop(self, None)  # a request is in progress
        self._reading_head = False
        self._head_bytes = 0
        self._heads += 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        _Base.on_headers_complete(self)

    def on_message_complete(self) -> None:
        _Base.on_message_complete(self)
        self._in_message = False
        self._reading_head = True
        self._head_bytes = 0
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def on_response_complete(self) -> None:
        _Base.on_response_complete(self)
        cycle = self.cycle  # no pipelined request started (see busy)
        if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
            self._now_waiting()

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = wheel(self.loop).call_later(
            self.limits.header_timeout, self._head_expired
        )

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.busy() or not (self._in_message or self._head_bytes):
            # Nothing of a request arrived (an idle new connection), or a response is under way
            # on it (a pipelined head trickling behind it): close without an answer.
            _count("header_timeout")
            self.transport.close()
            return
        _count("header_timeout")
        self._answer_and_close(
            408, f"Request head not received within {self.limits.header_timeout:g} s"
        )

    def _body_expired(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or not self._in_message or self._reading_head:
            return
        _count("body_timeout")
        if self.busy() and not self.cycle.response_started:  # the app is still reading it
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._write_timer = None

    # ------------------------------------------------------------------ writing

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark: the client must take some of it
        within ``write_timeout``."""
        _Base.pause_writing(self)
        if self._write_timer is None:
            self._write_timer = wheel(self.loop).call_later(
                self.limits.write_timeout, self._write_expired
            )

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        _Base.resume_writing(self)

    def _write_expired(self) -> None:
        self._write_timer = None
        if self.transport.is_closing() and not self.flow.write_paused:
            return
        _count("write_timeout")
        # Not close(): that would wait to hand the client what it does not take.
        self.transport.abort()

    # ------------------------------------------------------------------ answers

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse (conflicting framing headers and the like)."""
        self._answer_and_close(400, "Invalid HTTP request")

    def _answer_and_close(self, status: int, message: str) -> None:
        self._cancel_timers()
        if self.busy():
            if self.cycle.response_started:  # nothing can be added to a response under way
                self.transport.close()
                return
            # The request's task is still reading: it sees a disconnect, and nothing it sends
            # after this answer goes out.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        body = orjson.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
        )
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, http.HTTPStatus(status).phrase.encode()),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
        ]
        self.transport.write(b"".join(head) + b"\r\n" + body)
        self.transport.close()
