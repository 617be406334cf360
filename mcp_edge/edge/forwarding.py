"""A route's rule for what its HTTP upstream gets: the headers it drops from each request and
those it adds (credential, the caller's identity, a forwarded token).

One :class:`Forwarding` per route is given to both the upstream adapter, which sends what
:meth:`Forwarding.describe` returns, and the edge cache, which keys on the same description
(``mcp_edge.core.forwarded``): the key and the forwarded request come from one place. An HTTP
upstream gets ``Host`` rewritten to the endpoint's (one upstream: left out of the key); an app in
this process gets the client's (``client_host``), which is then part of the description, and so
of the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from mcp_edge.core.forwarded import Forwarded, describe
from mcp_edge.edge.asgi import Scope
from mcp_edge.edge.context import RequestContext

#: Extra headers for the upstream request, computed per request (credentials, identity).
HeaderHook = Callable[[RequestContext], Sequence[tuple[str, str]]]


class Forwarding:
    __slots__ = ("client_host", "drop", "hook")

    def __init__(
        self,
        *,
        drop_headers: Iterable[str] = (),
        header_hook: HeaderHook | None = None,
        client_host: bool = False,
    ) -> None:
        self.drop = tuple(sorted(drop_headers))
        self.hook = header_hook
        #: The upstream gets the client's ``Host`` (an app in this process: no hop to name).
        self.client_host = client_host

    def describe(self, scope: Scope, ctx: RequestContext, host: str | None = None) -> Forwarded:
        """The upstream request for this client request (``host``: the chosen endpoint's; None
        for the cache key, which leaves it out). With ``client_host``, ``Host`` is the client's
        (none if it sent none), for the upstream and the key alike."""
        if self.client_host:
            host = ctx.headers.get(b"host")
        method = scope["method"]
        post = method == "POST"
        # (Positional: this runs for every request the proxy forwards.)
        return describe(
            method,
            scope.get("query_string", b""),
            scope["headers"],
            ctx.forward_body if post else b"",
            ctx.message if post else None,
            self.drop,
            self.hook(ctx) if self.hook is not None else (),
            ctx.modern,
            host,
        )
