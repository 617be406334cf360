"""A 2026-07-28 MCP upstream (``mcp`` 2.x low-level ``Server``) whose results carry cache hints.

    python tests/servers/cache_hints.py --port N [--ttl-ms 60000]

Every handler sets ``ttlMs`` / ``cacheScope`` on its own result:

* ``tools/list``: public, ``--ttl-ms``; each tool's description says which upstream fetch this
  is (``fetch #n``), and the tool ``ask`` is listed only to clients that declare elicitation;
* ``prompts/list``: private, ``--ttl-ms``; one prompt named after the caller (the
  ``X-MCP-Principal`` header the gateway sends), ``for-<principal>``;
* ``resources/list``: public with ``ttlMs: 0`` (must never be cached);
* ``resources/templates/list``: no hints set by the handler (the SDK fills ``ttlMs: 0``);
* ``server/discover``: public, ``--ttl-ms``;
* ``resources/read``: ``cache://public`` public, ``cache://private`` private (text names the
  caller), ``cache://ask`` asks a question first (``input_required``) and completes on the retry
  with a public result (the retry's answer must not be cached all the same); and two that mark a
  per-request answer ``public`` as a careless upstream would: ``cache://caller`` (text names the
  caller) and ``cache://tenant`` (text names the ``X-Tenant`` header and the
  ``_meta["com.example/tenant"]`` of the request), and ``cache://query`` (text names the
  ``tenant`` query parameter of the request's URL);
* ``tools/call``: ``echo`` and ``whoami``, no hints (tool results are not cacheable).

``GET /stats`` answers ``{"posts", "methods": {method: n}, "calls": {tool: n}}``: what reached
this process, so a test can prove that a cached answer never did.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import logging
from typing import Any

import mcp.types as types
import uvicorn
from body_replay import read_body, replaying
from mcp.server.caching import CacheHint
from mcp.server.lowlevel.server import Server
from starlette.types import ASGIApp, Receive, Scope, Send

CAPS = "io.modelcontextprotocol/clientCapabilities"
_fetches = itertools.count(1)


def _principal(ctx: Any) -> str:
    headers = getattr(ctx.request, "headers", None) or {}
    return headers.get("x-mcp-principal") or "nobody"


def _capabilities(params: Any) -> dict[str, Any]:
    meta = getattr(params, "meta", None) or {}
    caps = meta.get(CAPS) if isinstance(meta, dict) else getattr(meta, "client_capabilities", None)
    if caps is None and not isinstance(meta, dict):
        caps = (getattr(meta, "model_extra", None) or {}).get(CAPS)
    if hasattr(caps, "model_dump"):
        caps = caps.model_dump(exclude_none=True)
    return caps if isinstance(caps, dict) else {}


def _meta(params: Any) -> dict[str, Any]:
    meta = getattr(params, "meta", None) or {}
    if isinstance(meta, dict):
        return meta
    return {**(getattr(meta, "model_extra", None) or {})}


def build_server(ttl_ms: int) -> Server:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        n = next(_fetches)
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        tools = [
            types.Tool(name="echo", description=f"echo (fetch #{n})", input_schema=schema),
            types.Tool(
                name="whoami", description=f"whoami (fetch #{n})", input_schema={"type": "object"}
            ),
        ]
        if "elicitation" in _capabilities(params):
            tools.append(
                types.Tool(
                    name="ask", description=f"ask (fetch #{n})", input_schema={"type": "object"}
                )
            )
        return types.ListToolsResult(tools=tools, ttl_ms=ttl_ms, cache_scope="public")

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        n = next(_fetches)
        prompt = types.Prompt(name=f"for-{_principal(ctx)}", description=f"fetch #{n}")
        return types.ListPromptsResult(prompts=[prompt], ttl_ms=ttl_ms, cache_scope="private")

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        n = next(_fetches)
        resource = types.Resource(name="public", uri="cache://public", description=f"fetch #{n}")
        return types.ListResourcesResult(resources=[resource], ttl_ms=0, cache_scope="public")

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        n = next(_fetches)
        uri = str(params.uri)
        if uri == "cache://public":
            text, scope = f"public (fetch #{n})", "public"
        elif uri == "cache://private":
            text, scope = f"private for {_principal(ctx)} (fetch #{n})", "private"
        elif uri == "cache://caller":
            text, scope = f"public answer for {_principal(ctx)} (fetch #{n})", "public"
        elif uri == "cache://tenant":
            headers = getattr(ctx.request, "headers", None) or {}
            meta = _meta(params)
            text = (
                f"tenant {headers.get('x-tenant')} / {meta.get('com.example/tenant')} (fetch #{n})"
            )
            scope = "public"
        elif uri == "cache://query":
            query = getattr(ctx.request, "query_params", None) or {}
            text, scope = f"query tenant {query.get('tenant')} (fetch #{n})", "public"
        elif uri == "cache://ask":
            answer = (params.input_responses or {}).get("colour")
            if answer is None:
                schema = {"type": "object", "properties": {"colour": {"type": "string"}}}
                ask = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(message="Colour?", requested_schema=schema)
                )
                return types.InputRequiredResult(
                    input_requests={"colour": ask}, request_state="asked-colour"
                )
            content = getattr(answer, "content", None) or {}
            text, scope = f"colour {content.get('colour')} (fetch #{n})", "public"
        else:
            raise ValueError(f"unknown resource {uri}")
        contents = [types.TextResourceContents(uri=uri, text=text, mime_type="text/plain")]
        return types.ReadResourceResult(contents=contents, ttl_ms=ttl_ms, cache_scope=scope)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "whoami":
            text = _principal(ctx)
        else:
            text = str((params.arguments or {}).get("text", ""))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server(
        "mcp-edge-cache-hints",
        version="1.0.0",
        cache_hints={"server/discover": CacheHint(ttl_ms=ttl_ms, scope="public")},
        on_list_tools=list_tools,
        on_list_prompts=list_prompts,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_call_tool=call_tool,
    )


class Stats:
    """Pure ASGI middleware counting the POSTs that reach the server; serves them on GET /stats."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.posts = 0
        self.methods: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == "/stats":
            body = json.dumps(
                {"posts": self.posts, "methods": self.methods, "calls": self.calls}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, _ = await read_body(receive)
        self.posts += 1
        try:
            doc = json.loads(body)
            self.methods[str(doc.get("method"))] += 1
            if doc.get("method") == "tools/call":
                self.calls[str((doc.get("params") or {}).get("name"))] += 1
        except (ValueError, AttributeError):
            pass
        await self.app(scope, replaying(body, receive), send)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ttl-ms", type=int, default=60_000, help="ttlMs of the cacheable results")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    app = build_server(args.ttl_ms).streamable_http_app(json_response=True, host=args.host)
    # h11: httptools keeps trailing header whitespace, which the SDK's Mcp-Name check rejects.
    uvicorn.run(Stats(app), host=args.host, port=args.port, http="h11", log_level="warning")


if __name__ == "__main__":
    main()
