"""Where the bridge gets its legacy sessions: the contract, and the one for HTTP upstreams.

The bridge asks for a session for one caller (``acquire``), gives it back when the request is
done (``release``) or drops it (``discard``), and for a call that goes on elsewhere rebuilds a
session from what the sealed state says (``reattach``). A ``subscriptions/listen`` stream reads a
``Feed`` (``listen``): what the server pushes on its own, for as long as the client listens. Over HTTP a session is an upstream
``Mcp-Session-Id``, pooled per caller (see :mod:`mcp_edge.upstream.legacy.pool`); over stdio it is a lease
on a child process (see :mod:`mcp_edge.upstream.stdio.processes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import RequestContext
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.http_session import (
    LegacyHttpSession,
    SessionGone,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcp_edge.upstream.legacy.pool import SessionPool

PoolKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a session is opened for, and with what: a legacy session declares its capabilities
    and client info once, at initialize, and the gateway adds per-caller upstream headers."""

    principal_id: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any]
    log_level: str | None
    headers: tuple[tuple[str, str], ...]


def key_digest(key: PoolKey) -> str:
    return hashlib.sha256(orjson.dumps(key)).hexdigest()[:24]


#: How long a ``resources/subscribe`` may take before the URI is left out of a listen stream.
SUBSCRIBE_TIMEOUT = 10.0
#: A standalone stream the server ends is asked for again at most this many times in a row.
MAX_RECONNECTS = 3


class Feed(Protocol):
    """What a ``subscriptions/listen`` stream reads: the messages an upstream sends on its own
    (a legacy session's standalone stream; a stdio route's processes)."""

    @property
    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities (its ``initialize`` result)."""
        ...

    @property
    def server_info(self) -> dict[str, Any] | None: ...

    async def open(self) -> bool:
        """Start listening; False when the server can push nothing (no standalone stream)."""
        ...

    def hold_in(self, reservation: Reservation) -> None:
        """Count what the feed holds of what it reads in ``reservation`` (the listen request's
        share of the answer budget); AnswerOverBudget from :meth:`next` when it has no room."""
        ...

    async def subscribe(self, uri: str) -> bool:
        """``resources/subscribe``; False when the server did not accept it."""
        ...

    async def next(self) -> Any | None:
        """The next message pushed; None once nothing more can come (the session or process
        is gone)."""
        ...

    async def post(self, message: dict[str, Any]) -> None:
        """Answer a request the server pushed."""
        ...

    async def close(self) -> None: ...


class Sessions(Protocol):
    async def acquire(
        self, caller: Caller, ctx: RequestContext, *, for_call: bool
    ) -> tuple[PoolKey | None, Any, bool]:
        """``(pool key, session, reused)``; ``for_call``: a call that may ask the client."""
        ...

    def release(self, key: PoolKey | None, session: Any) -> None: ...

    def discard(self, session: Any) -> None: ...

    def suspend(self, session: Any) -> None:
        """A call on ``session`` waits (parked) for its client's answer."""
        ...

    async def reacquire(self, session: Any) -> None:
        """A parked call's answer arrived: it runs again on ``session``."""
        ...

    def reuse_key(self, caller: Caller, endpoint: str, digest: str | None) -> PoolKey | None: ...

    def reattach(
        self, endpoint: str, caller: Caller, session_id: str | None, version: str | None
    ) -> Any | None:
        """A session object for a call that goes on here after another replica held it, or None
        where that cannot be (a stdio process lives in one replica)."""
        ...

    async def listen(self, caller: Caller, ctx: RequestContext) -> Feed:
        """A feed for one listen stream (closed by the caller when the stream ends)."""
        ...

    async def aclose(self) -> None: ...


class Endpoints(Protocol):
    """Where an HTTP route's upstream lives (the route's HTTP proxy provides this)."""

    def choose(self, ctx: Any) -> str | None: ...

    def host_for(self, endpoint: str) -> str: ...


class _Unpinned:
    """A context view without the affinity pin: a fresh legacy session may go to any endpoint."""

    __slots__ = ("pinned_endpoint", "session_endpoint")

    def __init__(self) -> None:
        self.pinned_endpoint = None
        self.session_endpoint = None


class HttpFeed:
    """A listen stream's own legacy session: its standalone (GET) stream, asked again when the
    server ends it (2025-11-25 servers may, to be polled), ended with ``DELETE``."""

    def __init__(self, session: LegacyHttpSession) -> None:
        self.session = session
        #: What the feed holds of what it reads (the listen request's share of the budget, given
        #: by :meth:`hold_in`; the session's own until then).
        self.reservation = session.own()

    def hold_in(self, reservation: Reservation) -> None:
        """Count what the feed reads from now on in ``reservation`` (the listen request's)."""
        self.reservation = reservation
        if self.session.side is not None:
            self.session.side.reservation = reservation

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.session.init_result.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.session.server_info

    async def open(self) -> bool:
        await self.session.open_side(read=False)  # read by this feed
        self._count_side()
        return self.session.side is not None

    def _count_side(self) -> None:
        side = self.session.side
        if side is not None and side.reservation is not self.reservation:
            side.reservation.release()
            side.reservation = self.reservation

    async def subscribe(self, uri: str) -> bool:
        request_id = wire.new_id()
        message = wire.request_message(request_id, "resources/subscribe", {"uri": uri})
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                own = self.session.own()
                stream = await self.session.request(message, own)
                try:
                    while (item := await stream.next()) is not None:
                        incoming = wire.classify(item[1])
                        if isinstance(incoming, wire.Response) and incoming.id == request_id:
                            return incoming.error is None
                finally:
                    stream.close()
                    own.release()
        except (TimeoutError, UpstreamUnavailable, UpstreamRefused, SessionGone):
            return False
        return False

    async def next(self) -> Any | None:
        failures = 0
        while (side := self.session.side) is not None:
            try:
                item = await side.next()
            except (UpstreamUnavailable, UpstreamRefused):
                item = None
            if item is not None:
                return item[1]
            last = side.last_event_id if side.has_event_ids else None
            self.session.drop_side()
            failures += 1
            if failures > MAX_RECONNECTS:
                return None
            await asyncio.sleep(0.25 * failures)
            try:
                await self.session.open_side(last, read=False)
            except (UpstreamUnavailable, SessionGone, UpstreamRefused):
                return None
            self._count_side()
        return None

    async def post(self, message: dict[str, Any]) -> None:
        await self.session.post(message)

    async def close(self) -> None:
        await self.session.close()


class HttpSessions:
    """Pooled legacy sessions on an HTTP upstream's endpoints."""

    def __init__(
        self,
        *,
        route: str,
        endpoints: Endpoints,
        client: Callable[[], aiohttp.ClientSession],
        pool: SessionPool[LegacyHttpSession] | None = None,
        max_event_bytes: int = 16 * 1024 * 1024,
        metrics: Metrics | None = None,
        budget: AnswerBudget | None = None,
    ) -> None:
        self.route = route
        self.endpoints = endpoints
        self._client = client
        self.pool: SessionPool[LegacyHttpSession] = pool or SessionPool()
        self.max_event_bytes = max_event_bytes
        self.metrics = metrics or Metrics()
        #: The process's answer pool, which what the sessions read for themselves draws from.
        self.budget = budget

    def key(self, caller: Caller, endpoint: str) -> PoolKey:
        headers = hashlib.sha256(orjson.dumps(sorted(caller.headers))).hexdigest()
        return (
            endpoint,
            caller.principal_id,
            orjson.dumps(caller.capabilities, option=orjson.OPT_SORT_KEYS).decode(),
            caller.client_info["name"],
            caller.client_info["version"],
            caller.log_level or "",
            headers,
        )

    def session(
        self,
        endpoint: str,
        headers: Sequence[tuple[str, str]],
        *,
        session_id: str | None = None,
        version: str | None = None,
    ) -> LegacyHttpSession:
        return LegacyHttpSession(
            self._client(),
            endpoint,
            host=self.endpoints.host_for(endpoint),
            headers=headers,
            max_event_bytes=self.max_event_bytes,
            session_id=session_id,
            version=version,
            budget=self.budget,
        )

    async def acquire(
        self, caller: Caller, ctx: RequestContext, *, for_call: bool
    ) -> tuple[PoolKey, LegacyHttpSession, bool]:
        endpoint = self.endpoints.choose(_Unpinned())
        assert endpoint is not None  # an unpinned choice always has one
        ctx.answered_by = endpoint
        key = self.key(caller, endpoint)

        async def create() -> LegacyHttpSession:
            session = self.session(endpoint, caller.headers)
            await session.open(caller.capabilities, caller.client_info, caller.log_level)
            # Listened to from the start: what the server sends there between calls (its own
            # roots/list after initialize, say) is answered at once, never left waiting.
            try:
                await session.open_side()
            except BaseException:
                await session.close()
                raise
            self.metrics.bridge_sessions.labels(self.route).inc()
            return session

        opened = self.pool.opened
        session = await self.pool.acquire(key, create)
        return key, session, self.pool.opened == opened

    def release(self, key: PoolKey | None, session: LegacyHttpSession) -> None:
        if key is not None and session.initialized_here:
            self.pool.release(key, session)
        else:
            self.pool.discard(session)

    def discard(self, session: LegacyHttpSession) -> None:
        self.pool.discard(session)

    def suspend(self, session: LegacyHttpSession) -> None:
        return None  # an HTTP session is this call's alone

    async def reacquire(self, session: LegacyHttpSession) -> None:
        return None

    def reuse_key(self, caller: Caller, endpoint: str, digest: str | None) -> PoolKey | None:
        """The pool key to give a finished call's session back under: only one equal to the key
        it was opened under (same caller, capabilities, client info, headers)."""
        key = self.key(caller, endpoint)
        return key if digest is not None and key_digest(key) == digest else None

    def reattach(
        self, endpoint: str, caller: Caller, session_id: str | None, version: str | None
    ) -> LegacyHttpSession:
        return self.session(endpoint, caller.headers, session_id=session_id, version=version)

    async def listen(self, caller: Caller, ctx: RequestContext) -> HttpFeed:
        """A fresh session of the listener's own (never a pooled one: it holds the standalone
        stream and the subscriptions until the listen stream ends, then it is deleted)."""
        endpoint = self.endpoints.choose(_Unpinned())
        assert endpoint is not None
        ctx.answered_by = endpoint
        session = self.session(endpoint, caller.headers)
        try:
            await session.open(caller.capabilities, caller.client_info)
        except BaseException:
            with contextlib.suppress(Exception):
                await session.close()
            raise
        self.metrics.bridge_sessions.labels(self.route).inc()
        return HttpFeed(session)

    async def aclose(self) -> None:
        await self.pool.aclose()
