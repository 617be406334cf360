"""Where the caller's identity at an upstream is applied: a thin ASGI layer in front of one
member's app (its adapter, with the route's edge cache inside), for every member kind that
speaks HTTP (a 2026-07-28 server, a 2025-era server through the bridge, a remote server).

API (stable; the token exchange and the consent flow are both credential sources)::

    class MySource:                       # a CredentialSource
        async def credential(self, scope, ctx) -> str | None:
            ...  # the bearer token for this request's upstream call, or raise
                 # CredentialError(rpc_error) / Answer(result_dict); None only for the
                 # gateway's own requests (no principal: health probes), which go without

    member.app = UpstreamIdentityLayer(member.app, source=MySource(), member=member.key)

For each request the layer asks the source for the bearer token, puts it in the request's
context (``ctx.upstream_bearer``, which the member's header hook sends as
``Authorization: Bearer``, the client's own ``Authorization`` always dropped before:
mcp_edge.auth.upstream), then calls the member. When the source raises:

- :class:`CredentialError`: the client gets its JSON-RPC error with the request's id (and its
  HTTP status); nothing goes upstream.
- :class:`Answer`: the client gets ``result`` as the request's JSON-RPC result (e.g. an
  ``input_required`` asking the user to authorize, which the flow middleware then checks and
  seals like any upstream's); nothing goes upstream.

A request of the gateway's own (no principal: a member's health probe, ``check-config``) gets
no credential and goes without one (the upstream's refusal still says it is reachable); a
caller's request always has one or goes nowhere (the header plan refuses to send it without:
mcp_edge.auth.upstream.MissingUpstreamCredential).

Policy decisions were taken before (the flow middleware): this layer only adds a credential, it
never lets through what policy refused.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from mcp_edge.core.errors import RpcError
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_json, send_rpc_error
from mcp_edge.edge.context import RequestContext, get_context


class CredentialError(Exception):
    """No credential for this request: the client gets ``error`` (a JSON-RPC error)."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(error.message)
        self.error = error


class Answer(Exception):
    """Answer the request with ``result`` instead of forwarding it."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("answered by the identity layer")
        self.result = result


class CredentialSource(Protocol):
    async def credential(self, scope: Scope, ctx: RequestContext) -> str | None:
        """The bearer token this request's upstream gets, or raise CredentialError / Answer;
        None for a request of the gateway's own (``ctx.principal`` None)."""
        ...


class UpstreamIdentityLayer:
    """A member's app with the caller's credential for it (see the module's docstring)."""

    __slots__ = ("app", "member", "source")

    def __init__(self, app: ASGIApp, *, source: CredentialSource, member: str) -> None:
        self.app = app
        self.source = source
        self.member = member

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = get_context(scope)
        try:
            ctx.upstream_bearer = await self.source.credential(scope, ctx)
        except CredentialError as failed:
            await send_rpc_error(send, failed.error, ctx.request_id)
            return
        except Answer as answer:
            body = orjson.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": answer.result})
            await send_json(send, 200, body)
            return
        await self.app(scope, receive, send)
