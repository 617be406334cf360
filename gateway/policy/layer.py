"""List results filtered to what the caller may use, and tool definition pinning, as a small ASGI
layer between a route's edge middlewares and the rest of its layers (so a result the edge cache answers
is filtered for each caller too).

Installed only on routes with a policy. Requests of other methods pass straight through; the
answers of ``tools/list``, ``prompts/list``, ``resources/list`` and ``resources/templates/list``
(a JSON body or the final SSE event for the request's id) are parsed, filtered, marked
``cacheScope: "private"`` (what the caller sees now depends on who it is) and sent on.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import orjson

from gateway.auth.base import Principal
from gateway.core.errors import INTERNAL_ERROR, RpcError
from gateway.core.sse import SSESplitter, encode_event
from gateway.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from gateway.edge.context import get_context
from gateway.observability.logs import event
from gateway.policy.hook import RoutePolicy
from gateway.policy.pins import PinStoreUnavailable
from gateway.policy.rules import LIST_METHODS

#: Largest list answer the layer holds to filter; a larger one is refused (never passed unfiltered).
MAX_LIST_BYTES = 16 * 1024 * 1024


def _content_type(headers: Any) -> bytes:
    for k, v in headers:
        if k.lower() == b"content-type":
            return v.split(b";", 1)[0].strip().lower()
    return b""


class PolicyListLayer:
    def __init__(
        self, app: ASGIApp, policy: RoutePolicy, *, max_bytes: int = MAX_LIST_BYTES
    ) -> None:
        self.app = app
        self.policy = policy
        self.max_bytes = max_bytes
        self.filters = policy.config.has_rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        method = ctx.rpc_method
        if (
            scope["type"] != "http"
            or not ctx.modern
            or method not in LIST_METHODS
            or ctx.request_id is None
        ):
            await self.app(scope, receive, send)
            return
        if method != "tools/list" and not self.filters:
            await self.app(scope, receive, send)  # pinning only: nothing to do for other lists
            return
        await self.app(
            scope, receive, _Filtering(send, self, method, ctx.principal, ctx.request_id)
        )

    async def rewrite(
        self, method: str, principal: Principal | None, doc: dict[str, Any]
    ) -> bytes | None:
        """The filtered message, or None when it passes unchanged."""
        result = doc.get("result")
        if not isinstance(result, dict) or result.get("resultType", "complete") != "complete":
            return None
        removed = 0
        if method == "tools/list" and self.policy.pins is not None:
            removed += await self._pin_filter(result)
        if self.filters:
            hidden = self.policy.rules.filter_result(principal, method, result)
            if hidden:
                self.policy.metrics.list_hidden.labels(self.policy.route, method, "policy").inc(
                    hidden
                )
            removed += hidden
            # What the caller sees depends on who it is: no shared cache may hand it to another.
            result["cacheScope"] = "private"
        elif not removed:
            return None
        return orjson.dumps(doc)

    async def _pin_filter(self, result: dict[str, Any]) -> int:
        pins = self.policy.pins
        assert pins is not None
        tools = result.get("tools")
        if not isinstance(tools, list):
            return 0
        observed: dict[str, str] = {}
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                observed[tool["name"]] = pins.digest(
                    orjson.dumps(tool, option=orjson.OPT_SORT_KEYS), tool
                )
        try:
            changed = await pins.changed(observed)
        except PinStoreUnavailable:
            self.policy.metrics.store_unavailable.labels(self.policy.route).inc()
            return 0
        if not changed:
            return 0
        route = self.policy.route
        for name in sorted(changed):
            self.policy.metrics.pin_changes.labels(route).inc()
            if self.policy._log_once(f"pin:{name}:{observed[name]}"):
                event(
                    logging.WARNING,
                    "tool definition changed; hidden until accepted",
                    route=route,
                    tool=name,
                    digest=observed[name],
                )
        result["tools"] = [
            t for t in tools if not (isinstance(t, dict) and t.get("name") in changed)
        ]
        self.policy.metrics.list_hidden.labels(route, "tools/list", "pinned").inc(len(changed))
        return len(changed)


class _Filtering:
    """Wraps ``send`` for one list request."""

    def __init__(
        self,
        send: Send,
        layer: PolicyListLayer,
        method: str,
        principal: Principal | None,
        request_id: Any,
    ) -> None:
        self.send = send
        self.layer = layer
        self.method = method
        self.principal = principal
        self.request_id = request_id
        self.mode = "pass"
        self.start: MutableMapping[str, Any] | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.splitter: SSESplitter | None = None

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            ctype = _content_type(message.get("headers", []))
            if ctype == b"application/json":
                self.mode, self.start = "json", message
                return
            if ctype == b"text/event-stream":
                self.mode, self.splitter = "sse", SSESplitter(self.layer.max_bytes)
            await self.send(message)
            return
        if kind != "http.response.body" or self.mode == "pass":
            await self.send(message)
            return
        if self.mode == "drain":
            return
        if self.mode == "json":
            await self._json(message)
        else:
            await self._sse(message)

    async def _refuse(self) -> None:
        err = RpcError(
            INTERNAL_ERROR,
            "List result too large to filter",
            {"reason": "upstream_response_too_large"},
            status=502,
        )
        await send_rpc_error(self.send, err, self.request_id)
        self.mode = "drain"

    async def _filtered(self, payload: bytes) -> bytes | None:
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict) or doc.get("id") != self.request_id or "result" not in doc:
            return None
        return await self.layer.rewrite(self.method, self.principal, doc)

    async def _json(self, message: MutableMapping[str, Any]) -> None:
        body = message.get("body", b"")
        self.size += len(body)
        if self.size > self.layer.max_bytes:
            await self._refuse()
            return
        self.chunks.append(body)
        if message.get("more_body", False):
            return
        whole = b"".join(self.chunks)
        self.chunks = []
        assert self.start is not None
        new = await self._filtered(whole)
        if new is None:
            await self.send(self.start)
            await self.send({"type": "http.response.body", "body": whole})
            return
        headers = [
            (k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(new)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": new})

    async def _sse(self, message: MutableMapping[str, Any]) -> None:
        assert self.splitter is not None
        body = message.get("body", b"")
        more = message.get("more_body", False)
        try:
            events = self.splitter.feed(body) if body else []
        except ValueError:
            err = RpcError(
                INTERNAL_ERROR,
                "List result too large to filter",
                {"reason": "upstream_response_too_large"},
            )
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(err.body(self.request_id)),
                    "more_body": False,
                }
            )
            self.mode = "drain"
            return
        out: list[bytes] = []
        for ev in events:
            if ev.data is not None and '"result"' in ev.data:
                new = await self._filtered(ev.data.encode())
                out.append(ev.raw if new is None else encode_event(new))
            else:
                out.append(ev.raw)
        if not more:
            out.append(self.splitter.rest())
        chunk = b"".join(out)
        if chunk or not more:
            await self.send({"type": "http.response.body", "body": chunk, "more_body": more})
