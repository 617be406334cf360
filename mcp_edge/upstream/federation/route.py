"""A federated route's upstream adapter: one endpoint, several members, nothing kept between
requests.

| method | what the route does |
|---|---|
| `tools/call`, `prompts/get`, `resources/read`, `completion/complete` | routed by name (no list is fetched): the member's own name in the params and `Mcp-Name`, sent to that member only; its answer relayed (mcp_edge.upstream.federation.answers) |
| `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list` | asked of every member at once (each within its `list_timeout_ms`), merged (mcp_edge.core.federation.lists); later pages carry the sealed cursor |
| `server/discover` | asked of every member, merged (mcp_edge.core.federation.discover) |
| `subscriptions/listen` | one stream fanned in from every member's (mcp_edge.upstream.federation.listen) |
| anything else | `-32601` Method not found (tasks name no member; 2025-era methods do not exist in 2026-07-28) |

A fan-out answers with what the members gave within their deadlines: a member that failed,
timed out, answered garbage or a part too large (over ``limits.max_inspect_bytes``, or more than
the merged answer, itself bounded by it, has room left for) is *missing*, told in ``result._meta["io.mcp-edge/federation"]``,
the ``Mcp-Edge-Missing`` header, a log line and ``mcp_edge_federation_missing_total``; the
answer then has ``ttlMs: 0`` and ``cacheScope: private``. When every member is missing the
client gets ``-32603`` (HTTP 502, ``data.reason: members_unavailable``, ``data.missing``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from mcp_edge.core.federation.cursor import CursorRejected, open_cursor, seal_cursor
from mcp_edge.core.federation.discover import merge_discover
from mcp_edge.core.federation.lists import LIST_METHODS, TOO_LARGE, fit_parts, merge_list
from mcp_edge.core.federation.names import Namespace
from mcp_edge.core.federation.parts import Missing, MissingMember, Part
from mcp_edge.core.federation.rewrite import ROUTED_METHODS, NotRouted, route_request
from mcp_edge.core.seal import KeyRing
from mcp_edge.core.uri import not_canonical
from mcp_edge.edge.asgi import Receive, Scope, Send, send_empty, send_json, send_rpc_error
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.draining import Draining
from mcp_edge.edge.responses import ResponseFinished, over_budget
from mcp_edge.upstream.federation.answers import CallAnswer
from mcp_edge.upstream.federation.listen import FanIn
from mcp_edge.upstream.federation.reader import OverBudget, Reply, ask, derive
from mcp_edge.upstream.federation.report import Reporter
from mcp_edge.upstream.member import Member
from mcp_edge.version import __version__

MISSING_HEADER: Final = b"mcp-edge-missing"
_KIND_WORDS: Final = {"tool": "tool", "prompt": "prompt", "resource": "resource"}


@dataclass(slots=True)
class Seat:
    """A member in its route: the member and its deadline in a fan-out."""

    member: Member
    timeout: float


def unknown_error(kind: str | None, name: str | None) -> RpcError:
    """The spec's error for an unknown tool, prompt or resource, naming what was asked."""
    if kind == "resource":
        return RpcError(INVALID_PARAMS, f"Resource not found: {name}", {"uri": name})
    word = _KIND_WORDS.get(kind or "", "name")
    return RpcError(INVALID_PARAMS, f"Unknown {word}: {name}", {"name": name})


class FederatedRoute:
    """ASGI app serving one route from its members (mcp_edge.upstream.member)."""

    def __init__(
        self,
        *,
        route: str,
        audience: str,
        seats: Sequence[Seat],
        namespace: Namespace,
        ring: KeyRing,
        reporter: Reporter,
        max_bytes: int,
        clock: Callable[[], float] = time.time,
        on_list_changed: Callable[[Member], Awaitable[None]] | None = None,
        draining: Draining | None = None,
        budget: AnswerBudget | None = None,
        on_over_budget: Callable[[], None] | None = None,
    ) -> None:
        self.route = route
        self.audience = audience
        self.seats = list(seats)
        self.by_name = {s.member.name: s for s in self.seats}
        self.namespace = namespace
        self.ring = ring
        self.reporter = reporter
        self.max_bytes = max_bytes
        self.clock = clock
        self.on_list_changed = on_list_changed
        #: The process's graceful shutdown, which ends listen streams (None: they never end).
        self.draining = draining
        #: The process's answer pool: member answers, parts and fan-in notifications draw from
        #: it (mcp_edge.edge.body); ``on_over_budget`` counts a refusal for it.
        self.budget = budget
        self.on_over_budget = on_over_budget
        self.server_info = {
            "name": "mcp-edge",
            "title": f"mcp-edge {route}",
            "version": __version__,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        rpc = ctx.rpc
        if rpc is None or not ctx.modern:
            # The edge refuses 2025-era traffic on federated routes (legacy_clients: deny).
            await send_rpc_error(
                send,
                RpcError(-32600, "This route serves MCP 2026-07-28 requests only", status=400),
                ctx.request_id,
            )
            return
        if rpc.is_notification:
            await send_empty(send, 202)
            return
        method = rpc.method
        try:
            if method in ROUTED_METHODS:
                await self._routed(scope, receive, send, ctx, method)
            elif method in LIST_METHODS:
                await self._list(scope, send, ctx, method)
            elif method == "server/discover":
                await self._discover(scope, send, ctx)
            elif method == "subscriptions/listen":
                await FanIn(self, scope, receive, send, ctx).run()
            else:
                raise RpcError(METHOD_NOT_FOUND, "Method not found", {"method": method})
        except RpcError as err:
            await send_rpc_error(send, err, ctx.request_id)

    # ------------------------------------------------------------ routed by name

    async def _routed(
        self, scope: Scope, receive: Receive, send: Send, ctx: RequestContext, method: str
    ) -> None:
        assert ctx.rpc is not None
        raw = ctx.rpc.raw  # as the flow and the policy left it (the member's own state inside)
        routed = route_request(self.namespace, method, raw.get("params"))
        if isinstance(routed, NotRouted):
            if routed.reason == "invalid_params":
                raise RpcError(INVALID_PARAMS, "Invalid params", {"method": method})
            if routed.reason == "not_canonical":
                raise not_canonical(routed.name or "", routed.canonical)
            raise unknown_error(routed.kind, routed.name)
        seat = self.by_name[routed.member]
        inner_scope, inner = derive(
            scope,
            ctx,
            {**raw, "params": routed.params},
            mcp_name=routed.mcp_name,
            keep_flow=True,
        )
        answer = CallAnswer(
            send,
            outer=ctx,
            inner=inner,
            member=seat.member,
            namespace=self.namespace,
            method=method,
            max_bytes=self.max_bytes,
            on_dropped=self.reporter.dropped,
            asked=routed.asked,
            reservation=Reservation(self.budget, kind="member_answer"),
            on_over_budget=self.on_over_budget,
        )
        try:
            await seat.member.app(inner_scope, receive, answer)
        except ResponseFinished:
            if not answer.refused:
                raise
        finally:
            answer.release()

    # ------------------------------------------------------------ fan-outs

    async def ask_all(
        self,
        scope: Scope,
        ctx: RequestContext,
        method: str,
        targets: Sequence[tuple[str, dict[str, Any]]],
        held: list[Reservation],
    ) -> list[tuple[str, Part]]:
        """Ask each (member, params) at once, each within its deadline; their parts in order,
        each that does not fit in the merged answer's bound (``max_bytes``) missing
        (``too_large``). What the parts hold is counted in ``held`` (the caller releases it once
        the merged answer is sent); the client gets 503 ``answer_budget`` when the process's
        budget has no room for them."""
        for _ in targets:
            held.append(Reservation(self.budget, kind="member_part"))
        replies = await asyncio.gather(
            *(
                self._ask(scope, ctx, self.by_name[name], method, params, reservation=held[i])
                for i, (name, params) in enumerate(targets)
            ),
            return_exceptions=True,
        )
        for reply in replies:
            if isinstance(reply, OverBudget):
                if self.on_over_budget is not None:
                    self.on_over_budget()
                raise over_budget()
            if isinstance(reply, BaseException):
                raise reply
        done = [r for r in replies if isinstance(r, Reply)]
        parts = [(name, reply.result) for (name, _), reply in zip(targets, done, strict=True)]
        return fit_parts(parts, [reply.size for reply in done], self.max_bytes)

    async def _ask(
        self,
        scope: Scope,
        ctx: RequestContext,
        seat: Seat,
        method: str,
        params: dict[str, Any],
        *,
        reservation: Reservation,
        uncached: bool = False,
    ) -> Reply:
        member = seat.member
        reply = await ask(
            (member.adapter or member.app) if uncached else member.app,
            scope,
            ctx,
            method,
            params,
            timeout=seat.timeout,
            max_bytes=self.max_bytes,
            reservation=reservation,
        )
        if reply.missing == "unavailable":
            seat.member.health.mark(False, reply.reason or "unavailable")
        elif reply.missing != "timeout":
            seat.member.health.mark(True)
        return reply

    async def _list(self, scope: Scope, send: Send, ctx: RequestContext, method: str) -> None:
        assert ctx.rpc is not None
        params = ctx.rpc.params
        principal_id = ctx.principal.id if ctx.principal else ""
        base = {k: v for k, v in params.items() if k != "cursor"}
        private = False
        cursor = params.get("cursor")
        if cursor is not None:
            try:
                page = open_cursor(
                    self.ring,
                    cursor,
                    audience=self.audience,
                    method=method,
                    principal_id=principal_id,
                    members=self.by_name.keys(),
                    now=self.clock(),
                )
            except CursorRejected as rej:
                raise RpcError(INVALID_PARAMS, "Invalid cursor", {"reason": rej.reason}) from None
            private = page.private
            targets = [(name, {**base, "cursor": own}) for name, own in page.pending]
        else:
            targets = [(s.member.name, base) for s in self.seats]
        held: list[Reservation] = []
        try:
            parts = await self.ask_all(scope, ctx, method, targets, held)
            self._all_missing(parts)
            while True:
                merged = merge_list(self.namespace, method, parts, private=private)
                result = merged.result
                if merged.pending:
                    result["nextCursor"] = seal_cursor(
                        self.ring,
                        audience=self.audience,
                        method=method,
                        principal_id=principal_id,
                        pending=merged.pending,
                        private=merged.private,
                        now=self.clock(),
                    )
                body = self._body(ctx, result)
                if len(body) <= self.max_bytes or not _drop_last_present(parts):
                    break  # (a member's renamed items took the merged page past its bound)
            self.reporter.missing(method, merged.missing)
            self.reporter.dropped(d for d in merged.dropped if d.reason != "filtered")
            missing = merged.missing
            # Merged: the parts are given up (and back) before the merged answer is sent, which
            # the edge counts as it holds it until the client has taken it.
            del parts, merged, result
            _release(held)
            await self._send_answer(send, body, missing)
        finally:
            _release(held)

    async def _discover(self, scope: Scope, send: Send, ctx: RequestContext) -> None:
        assert ctx.rpc is not None
        params = ctx.rpc.params
        held: list[Reservation] = []
        try:
            parts = await self.ask_all(
                scope, ctx, "server/discover", [(s.member.name, params) for s in self.seats], held
            )
            self._all_missing(parts)
            merged = merge_discover(self.namespace, parts, server_info=self.server_info)
            self.reporter.missing("server/discover", merged.missing)
            body, missing = self._body(ctx, merged.result), merged.missing
            del parts, merged  # (as for a list: the parts are given up before it is sent)
            _release(held)
            await self._send_answer(send, body, missing)
        finally:
            _release(held)

    def _all_missing(self, parts: list[tuple[str, Part]]) -> None:
        if parts and all(isinstance(p, Missing) for _, p in parts):
            missing = [MissingMember(n, p.reason) for n, p in parts if isinstance(p, Missing)]
            self.reporter.missing("(all)", missing)
            raise RpcError(
                INTERNAL_ERROR,
                "No member of this route answered",
                {
                    "reason": "members_unavailable",
                    "missing": [{"member": m.member, "reason": m.reason} for m in missing],
                },
                status=502,
            )

    @staticmethod
    def _body(ctx: RequestContext, result: dict[str, Any]) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": result})

    async def _send_answer(self, send: Send, body: bytes, missing: list[MissingMember]) -> None:
        extra = (
            [(MISSING_HEADER, ",".join(m.member for m in missing).encode("ascii"))]
            if missing
            else None
        )
        await send_json(send, 200, body, extra)


def _release(held: list[Reservation]) -> None:
    for reservation in held:
        reservation.release()


def _drop_last_present(parts: list[tuple[str, Part]]) -> bool:
    """The last member with a part is missing (``too_large``) instead; False when none has."""
    for i in range(len(parts) - 1, -1, -1):
        if not isinstance(parts[i][1], Missing):
            parts[i] = (parts[i][0], TOO_LARGE)
            return True
    return False
