"""``subscriptions/listen`` on a federated route: one client stream fanned in from a listen
stream on each member.

- Each member gets the client's filter for the lists (``toolsListChanged``, ...) and, of the
  ``resourceSubscriptions``, only the URIs it owns, in its own form; a member with nothing to
  listen to gets no stream.
- The client is acknowledged once, when every member acknowledged or its ``list_timeout_ms``
  passed: the acknowledgement names what the client asked for and some member honours (the
  list flags; the URIs as the client spelt them, whose member acknowledged them). What else a
  member names is not read past :data:`MAX_ACK_ITEMS` items, and never reaches the client.
- Backpressure: a member's message is relayed inside the member's own ``send``, so a member is
  not read while the client does not read (nothing queues); what is held meanwhile counts in
  the answer budget (kind ``fan_in``). When the budget has no room, the client's stream ends
  with ``-32603`` ``data.reason: answer_budget`` as its last event (nothing is dropped silently).
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
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import RequestContext
from mcp_edge.edge.responses import over_budget
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
#: Items of a member's acknowledgement (``resourceSubscriptions``) read, at most (a set lookup
#: each): a member honours at most the MAX_URIS it was asked for, so what lies past this many
#: is noise, never read.
MAX_ACK_ITEMS: Final = 65_536


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
        #: Per member: its own URIs the client asked for, each with the client's URIs for it.
        self._asked: dict[str, dict[str, dict[str, None]]] = {}
        self._client_acked = asyncio.Event()
        #: Set when the client's stream ended with an error event (the budget had no room).
        self._failed = asyncio.Event()

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
                asked = self._asked.setdefault(target.member, {})
                asked.setdefault(target.original, {})[uri] = None
        for member, asked in self._asked.items():
            filters[member]["resourceSubscriptions"] = list(asked)
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
        failed = asyncio.ensure_future(self._failed.wait())
        keepalive: asyncio.Future[Any] | None = None
        drained = self.route.draining.future() if self.route.draining is not None else None
        try:
            await self._acknowledge(filters)
            keepalive = asyncio.ensure_future(self._keepalive())
            await asyncio.wait(
                [gone, failed] if drained is None else [gone, failed, drained],
                return_when=asyncio.FIRST_COMPLETED,
            )
            left = gone.done() or failed.done()
        finally:
            for task in [*tasks, gone, failed, *([keepalive] if keepalive else [])]:
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

    def honoured(self) -> dict[str, Any]:
        """What the client is acknowledged: the list flags some member honours, and of the URIs
        the client asked for, those their member acknowledged (as the client spelt them). Linear
        in what the members sent: a set lookup per URI a member names, at most
        :data:`MAX_ACK_ITEMS` of them per member."""
        honoured: dict[str, Any] = {}
        uris: dict[str, None] = {}
        for name, ack in self._acked.items():
            found = ack.get("notifications")
            notes: dict[str, Any] = found if isinstance(found, dict) else {}
            for flag in LIST_FLAGS:
                if notes.get(flag) is True:
                    honoured[flag] = True
            asked = self._asked.get(name)
            theirs = notes.get("resourceSubscriptions")
            if not asked or not isinstance(theirs, list):
                continue
            for uri in theirs[:MAX_ACK_ITEMS]:
                clients = asked.get(uri) if type(uri) is str else None
                if clients is not None:
                    uris.update(clients)
        if uris:
            honoured["resourceSubscriptions"] = list(uris)
        return honoured

    async def _acknowledge(self, filters: dict[str, dict[str, Any]]) -> None:
        waits = [
            asyncio.wait_for(self._ack_events[name].wait(), self.route.by_name[name].timeout)
            for name in filters
        ]
        for outcome in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, TimeoutError):
                raise outcome
        ack_doc = {
            "jsonrpc": "2.0",
            "method": ACKNOWLEDGED,
            "params": {
                "notifications": self.honoured(),
                "_meta": {SUBSCRIPTION_ID: self.subscription_id},
            },
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
            self._client_acked.set()

    async def _keepalive(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            async with self._lock:
                if self._failed.is_set():
                    return
                await self.send(
                    {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
                )

    async def _member(self, seat: Seat, params: dict[str, Any]) -> None:
        """One member's listen stream, opened again whenever it ends. Backpressure: each of its
        messages is relayed to the client inside the member's own ``send``, so the member is not
        read further while the client does not read; what is held meanwhile (the message being
        read, the one being relayed) is counted in the answer budget (kind ``fan_in``)."""
        loop = asyncio.get_running_loop()
        delay = BACKOFF_START
        name = seat.member.name
        while True:
            request_id = fresh_id()
            doc = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "subscriptions/listen",
                "params": params,
            }
            inner, _ = derive(self.scope, self.ctx, doc)

            async def deliver(message: dict[str, Any], request_id: str = request_id) -> None:
                await self._relay(seat, message, request_id)

            reservation = Reservation(self.route.budget, kind="fan_in")
            capture = Capture(None, self.route.max_bytes, deliver=deliver, reservation=reservation)
            closing = asyncio.Event()

            async def never(closing: asyncio.Event = closing) -> Any:
                await closing.wait()
                return {"type": "http.disconnect"}

            opened = loop.time()
            task = asyncio.ensure_future(seat.member.app(inner, never, capture))
            ended = asyncio.ensure_future(capture.ended.wait())
            try:
                await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                await _close(task, closing)
                reservation.release()
            if not self._ack_events[name].is_set():
                self._ack_events[name].set()  # it will not acknowledge: do not wait for it
            if capture.over_budget:
                await self._fail()
                return
            if loop.time() - opened >= STEADY_SECONDS:
                delay = BACKOFF_START
            await asyncio.sleep(jittered(delay))
            delay = backoff(delay)

    async def _fail(self) -> None:
        """The answer budget had no room for a member's message: the client's stream ends with
        the budget's error as its last event (nothing is dropped without a word); the client
        listens again."""
        if self.route.on_over_budget is not None:
            self.route.on_over_budget()
        await self._client_acked.wait()
        async with self._lock:
            if self._failed.is_set():
                return
            self._failed.set()
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(over_budget().body(self.subscription_id)),
                    "more_body": False,
                }
            )

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
        # Before the client's acknowledgement nothing may be sent: wait for it (the member is
        # not read meanwhile).
        await self._client_acked.wait()
        async with self._lock:
            if self._failed.is_set():
                return
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(orjson.dumps(out)),
                    "more_body": True,
                }
            )
