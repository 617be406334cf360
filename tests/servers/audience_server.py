"""An MCP server protected by its own OAuth audience: every HTTP request must carry a bearer JWT
that the authorization server signed (its JWKS) for this server's audience, or it is refused
with 401 before the SDK sees it. Runs with the published SDK of either era:

    python tests/servers/audience_server.py --port N --jwks-url U --issuer I --audience A --log F
    uv run --isolated --no-project --with mcp==1.30.0 python tests/servers/audience_server.py ...

(``mcp`` 2.x: a 2026-07-28 server, ``MCPServer``; ``mcp`` 1.x: a 2025-era server, ``FastMCP``,
which the gateway reaches through its bridge.)

``--audience`` may repeat (any one matches). ``--log F``: one JSON line per HTTP request: the method, ``token_sha256`` (a digest of the
bearer token received, never the token), what verification found (``sub``, ``aud``,
``client_id``, ``act``, ``scope``, or ``refused`` with why), and ``marker``: the ``marker``
argument of a ``tools/call`` in the body (or ``params._meta["test.mcp-edge/marker"]`` of a
request without arguments), so a test finds its own requests. ``--introspect URL``
(with ``--introspect-client ID`` and ``--introspect-secret-file F``): a token that is no JWT
(an opaque access token) is introspected (RFC 7662) instead, and refused unless the server
says it is active (so a token revoked at the server is refused from then on). ``--prm-issuer I``:
the server publishes its protected-resource metadata (RFC 9728, at
``/.well-known/oauth-protected-resource/mcp``, without a token) naming ``I`` as its
authorization server. Tool: ``whoami(marker)``
answers ``{"marker": ..., "server": "audience"}``; resource ``audience://info``; prompt ``hello``.
``--ask`` (``mcp`` 1.x): the tool ``confirm(marker)`` asks the client to confirm (a form
elicitation ``{"ok": bool}``) mid-call, then answers ``{"marker", "confirmed", "era"}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from typing import Any

import jwt
import uvicorn
from body_replay import read_body, replaying
from pydantic import BaseModel

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer

    ERA = "modern"
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context

    MCPServer = None  # type: ignore[assignment,misc]
    ERA = "legacy"

_lock = threading.Lock()


class Confirm(BaseModel):
    ok: bool


def _marker(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    params = doc.get("params") if isinstance(doc, dict) else None
    args = params.get("arguments") if isinstance(params, dict) else None
    marker = args.get("marker") if isinstance(args, dict) else None
    if marker is None and isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        marker = params["_meta"].get(META_MARKER)  # a request without arguments (a list)
    return marker if isinstance(marker, str) else None


#: Where a request without arguments carries its marker: ``params._meta``.
META_MARKER = "test.mcp-edge/marker"


class RequireAudience:
    """The resource server's check in front of the SDK app (RFC 6750 / RFC 9068 style)."""

    def __init__(
        self, app: Any, *, jwks_url: str, issuer: str, audience: list[str], log: str
    ) -> None:
        self.app = app
        self.jwks = jwt.PyJWKClient(jwks_url, cache_keys=True, timeout=10)
        self.issuer = issuer
        self.audience = audience
        self.log = log

    #: RFC 7662: (endpoint, client id, secret), when tokens are introspected too.
    introspect: tuple[str, str, str] | None = None

    async def _introspected(self, token: str) -> dict[str, Any] | None:
        """The claims of an active opaque token, or None (inactive, revoked, unknown)."""
        import httpx

        assert self.introspect is not None
        url, client, secret = self.introspect
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(url, data={"token": token}, auth=(client, secret))
        doc = r.json() if r.status_code == 200 else {}
        return doc if doc.get("active") is True else None

    def _write(self, entry: dict[str, Any]) -> None:
        with _lock, open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    #: RFC 9728: (this server's resource URL, its authorization server), when published.
    prm: tuple[str, str] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.prm is not None and scope["path"] == "/.well-known/oauth-protected-resource/mcp":
            resource, issuer = self.prm
            doc = json.dumps({"resource": resource, "authorization_servers": [issuer]}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": doc})
            return
        body, _ = await read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        entry: dict[str, Any] = {
            "method": scope["method"],
            "rpc": (json.loads(body).get("method") if body.startswith(b"{") else None),
            "marker": _marker(body),
            "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
        }
        claims = None
        if scheme.lower() != "bearer" or not token:
            entry["refused"] = "no bearer token"
        else:
            try:
                key = self.jwks.get_signing_key_from_jwt(token)
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=["RS256", "PS256", "ES256"],
                    audience=self.audience,
                    issuer=self.issuer,
                    options={"require": ["exp", "sub", "aud", "iss"]},
                )
            except Exception as exc:  # noqa: BLE001  (any failure: refused, and why)
                entry["refused"] = f"{type(exc).__name__}: {exc}"[:200]
        if claims is None and self.introspect is not None and token and token.count(".") != 2:
            claims = await self._introspected(token)
            if claims is None:
                entry["refused"] = "inactive (introspection)"
            else:
                del entry["refused"]
        if claims is not None:
            entry.update(
                {k: claims.get(k) for k in ("sub", "aud", "client_id", "act", "scope", "exp")}
            )
        self._write(entry)
        if claims is None:
            payload = b'{"error":"invalid_token"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        await self.app(scope, replaying(body, receive), send)


def build(host: str, port: int, *, ask: bool = False) -> Any:
    if MCPServer is not None:
        server = MCPServer("audience", version="1.0.0")
    else:
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("audience", host=host, port=port)

    @server.tool()
    def whoami(marker: str = "") -> str:
        """Says which server answered, and the caller's marker."""
        return json.dumps({"marker": marker, "server": "audience", "era": ERA})

    if ask and MCPServer is None:  # a 2025-era question mid-call (the bridge parks it)

        @server.tool()
        async def confirm(ctx: Context, marker: str = "") -> str:
            """Asks the caller to confirm, then says what they answered, and the marker."""
            reply = await ctx.elicit("Go ahead?", Confirm)
            ok = reply.action == "accept" and reply.data.ok
            return json.dumps({"marker": marker, "confirmed": ok, "era": ERA})

    @server.resource("audience://info")
    def info() -> str:
        return "an audience-protected server"

    @server.prompt()
    def hello() -> str:
        return "Hello from the audience server"

    if MCPServer is not None:
        return server.streamable_http_app(host=host)
    return server.streamable_http_app()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--jwks-url", required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--audience", required=True, action="append", help="repeatable")
    parser.add_argument("--log", required=True)
    parser.add_argument("--introspect", help="the introspection endpoint (RFC 7662)")
    parser.add_argument("--introspect-client")
    parser.add_argument("--introspect-secret-file")
    parser.add_argument("--prm-issuer", help="publish RFC 9728 metadata naming this server")
    parser.add_argument("--ask", action="store_true", help="the confirm tool (mcp 1.x only)")
    args = parser.parse_args()
    app = RequireAudience(
        build(args.host, args.port, ask=args.ask),
        jwks_url=args.jwks_url,
        issuer=args.issuer,
        audience=args.audience,
        log=args.log,
    )
    if args.prm_issuer:
        app.prm = (f"http://{args.host}:{args.port}/mcp", args.prm_issuer)
    if args.introspect:
        with open(args.introspect_secret_file, encoding="utf-8") as f:
            app.introspect = (args.introspect, args.introspect_client, f.read().strip())
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
