"""``subscriptions/listen`` on a federated route: one client stream fanned in from a listen
stream on each member.

- Each member gets the client's filter for the lists (``toolsListChanged``, ...) and, of the
  ``resourceSubscriptions``, only the URIs it owns, in its own form; a member with nothing to
  listen to gets no stream.
- The client is acknowledged once, when every member acknowledged or its ``list_timeout_ms``
  passed: the acknowledgement names what some member honours (URIs in the client's form).
- Every member notification is relayed with the client's subscription id in
  ``_meta["io.modelcontextprotocol/subscriptionId"]``, ``notifications/resources/updated`` URIs
  in federated form. A member's ``list_changed`` first drops that member's cached list parts
  (on every replica, with the Redis cache), then reaches the client.
- A member stream that ends or fails is opened again after 0.5 s, doubling to 30 s, with jitter;
  the client's stream goes on (a keep-alive comment every 15 s keeps it open). The client
  leaving closes every member stream.
- When the process begins draining (mcp_edge.edge.draining) every member stream is closed and
  the client's ends without a response: the client listens again, elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING, Any, Final

import orjson

from mcp_edge.core.federation.rewrite import RESOURCE_UPDATED, federate_resource_updated
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import SSE_HEADERS, Receive, Scope, Send, start_response
from mcp_edge.edge.context import RequestContext
from mcp_edge.upstream.federation.reader import Capture, _close, derive, fresh_id

if TYPE_CHECKING:
    # The route (mcp_edge.upstream.federation.route) imports this module: typed loosely here.
    FederatedRoute = Any
    Seat = Any

SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
LIST_FLAGS: Final = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
LIST_CHANGED: Final = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)
KEEPALIVE_SECONDS: Final = 15.0
BACKOFF_START: Final = 0.5
BACKOFF_MAX: Final = 30.0
#: A member stream that lasted this long starts its backoff over.
STEADY_SECONDS: Final = 30.0
MAX_URIS: Final = 64


def backoff(delay: float) -> float:
    """The next delay: doubled up to BACKOFF_MAX, with up to a quarter of jitter either way."""
    return min(delay * 2, BACKOFF_MAX)


def jittered(delay: float) -> float:
    return delay * random.uniform(0.75, 1.25)  # noqa: S311 - spreading retries, not a secret


class FanIn:
    def __init__(
        self, route: FederatedRoute, scope: Scope, receive: Receive, send: Send, ctx: RequestContext
    ) -> None:
        self.route = route
        self.scope = scope
        self.receive = receive
        self.send = send
        self.ctx = ctx
        self.subscription_id = ctx.request_id
        self._lock = asyncio.Lock()
        self._acked: dict[str, dict[str, Any]] = {}
        self._ack_events: dict[str, asyncio.Event] = {}
        self._client_acked = False

    def _filters(self) -> dict[str, dict[str, Any]]:
        assert self.ctx.rpc is not None
        wanted = self.ctx.rpc.params.get("notifications")
        wanted = wanted if isinstance(wanted, dict) else {}
        flags = {f: True for f in LIST_FLAGS if wanted.get(f) is True}
        filters: dict[str, dict[str, Any]] = {s.member.name: dict(flags) for s in self.route.seats}
        uris = wanted.get("resourceSubscriptions")
        if isinstance(uris, list):
            for uri in uris[:MAX_URIS]:
                target = self.route.namespace.route_uri(uri)
                if target is None:
                    continue
                own = filters[target.member].setdefault("resourceSubscriptions", [])
                if target.original not in own:
                    own.append(target.original)
        return {name: f for name, f in filters.items() if f}

    async def run(self) -> None:
        filters = self._filters()
        base = {
            k: v
            for k, v in (self.ctx.rpc.params if self.ctx.rpc else {}).items()
            if k != "notifications"
        }
        tasks = []
        for name, wanted in filters.items():
            seat = self.route.by_name[name]
            self._ack_events[name] = asyncio.Event()
            tasks.append(
                asyncio.ensure_future(self._member(seat, {**base, "notifications": wanted}))
            )
        gone = asyncio.ensure_future(self._client_gone())
        keepalive: asyncio.Future[Any] | None = None
        drained = self.route.draining.future() if self.route.draining is not None else None
        try:
            await self._acknowledge(filters)
            keepalive = asyncio.ensure_future(self._keepalive())
            await asyncio.wait(
                [gone] if drained is None else [gone, drained],
                return_when=asyncio.FIRST_COMPLETED,
            )
            left = gone.done()
        finally:
            for task in [*tasks, gone, *([keepalive] if keepalive else [])]:
                task.cancel()
            for task in [*tasks, *([keepalive] if keepalive else [])]:
                with contextlib.suppress(BaseException):
                    await task
        if not left:
            # The process drains: the stream ends (nothing else sends on it any more).
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _client_gone(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return

    async def _acknowledge(self, filters: dict[str, dict[str, Any]]) -> None:
        waits = [
            asyncio.wait_for(self._ack_events[name].wait(), self.route.by_name[name].timeout)
            for name in filters
        ]
        for outcome in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, TimeoutError):
                raise outcome
        honoured: dict[str, Any] = {}
        uris: list[str] = []
        for name, ack in self._acked.items():
            found = ack.get("notifications")
            notes: dict[str, Any] = found if isinstance(found, dict) else {}
            for flag in LIST_FLAGS:
                if notes.get(flag) is True:
                    honoured[flag] = True
            for uri in notes.get("resourceSubscriptions") or []:
                federated = self.route.namespace.federate("resource", name, uri)
                if federated is not None and federated not in uris:
                    uris.append(federated)
        if uris:
            honoured["resourceSubscriptions"] = uris
        ack_doc = {
            "jsonrpc": "2.0",
            "method": ACKNOWLEDGED,
            "params": {"notifications": honoured, "_meta": {SUBSCRIPTION_ID: self.subscription_id}},
        }
        async with self._lock:
            await start_response(self.send, 200, list(SSE_HEADERS))
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(orjson.dumps(ack_doc)),
                    "more_body": True,
                }
            )
            self._client_acked = True

    async def _keepalive(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            async with self._lock:
                await self.send(
                    {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
                )

    async def _member(self, seat: Seat, params: dict[str, Any]) -> None:
        """One member's listen stream, opened again whenever it ends."""
        loop = asyncio.get_running_loop()
        delay = BACKOFF_START
        name = seat.member.name
        while True:
            queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=256)
            request_id = fresh_id()
            doc = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "subscriptions/listen",
                "params": params,
            }
            inner, _ = derive(self.scope, self.ctx, doc)

            def on_message(message: Any, queue: asyncio.Queue[dict[str, Any]] = queue) -> None:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(message)

            capture = Capture(on_message, self.route.max_bytes)
            closing = asyncio.Event()

            async def never(closing: asyncio.Event = closing) -> Any:
                await closing.wait()
                return {"type": "http.disconnect"}

            opened = loop.time()
            task = asyncio.ensure_future(seat.member.app(inner, never, capture))
            ended = asyncio.ensure_future(capture.ended.wait())
            getter: asyncio.Future[dict[str, Any]] | None = None
            try:
                while True:
                    getter = asyncio.ensure_future(queue.get())
                    done, _ = await asyncio.wait(
                        {getter, task, ended}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                        while not queue.empty():
                            await self._relay(seat, queue.get_nowait(), request_id)
                        break
                    await self._relay(seat, getter.result(), request_id)
            finally:
                # Cancelled (the client left) while waiting: the getter is left on the queue,
                # and would be destroyed pending with it.
                if getter is not None:
                    getter.cancel()
                ended.cancel()
                await _close(task, closing)
            if not self._ack_events[name].is_set():
                self._ack_events[name].set()  # it will not acknowledge: do not wait for it
            if loop.time() - opened >= STEADY_SECONDS:
                delay = BACKOFF_START
            await asyncio.sleep(jittered(delay))
            delay = backoff(delay)

    async def _relay(self, seat: Seat, message: dict[str, Any], request_id: str) -> None:
        name = seat.member.name
        method = message.get("method")
        if message.get("id") == request_id:
            return  # the member ended its stream (a graceful close): it is opened again
        if method == ACKNOWLEDGED:
            seat.member.health.mark(True)
            if name not in self._acked:
                params = message.get("params")
                self._acked[name] = params if isinstance(params, dict) else {}
                self._ack_events[name].set()
            return
        if not isinstance(method, str) or not method.startswith("notifications/"):
            return
        if method in LIST_CHANGED and self.route.on_list_changed is not None:
            await self.route.on_list_changed(seat.member)  # before the client hears of it
        if method == RESOURCE_UPDATED:
            rewritten, dropped = federate_resource_updated(self.route.namespace, name, message)
            if dropped:
                self.route.reporter.dropped(dropped)
            if not isinstance(rewritten, dict):
                return
            message = rewritten
        params = message.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        meta = params.get("_meta")
        params["_meta"] = {
            **(meta if isinstance(meta, dict) else {}),
            SUBSCRIPTION_ID: self.subscription_id,
        }
        out = {"jsonrpc": "2.0", "method": method, "params": params}
        if not self._client_acked:
            # Before the client's acknowledgement nothing may be sent: wait for it.
            while not self._client_acked:
                await asyncio.sleep(0.05)
        async with self._lock:
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(orjson.dumps(out)),
                    "more_body": True,
                }
            )
