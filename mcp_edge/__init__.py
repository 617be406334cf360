"""mcp-edge as ASGI middleware: protect a Python MCP server inside its own process.

    from mcp_edge import Edge

    app = Edge(mcp.streamable_http_app(), anonymous=True)          # the app, wrapped
    app = Starlette(..., middleware=[Middleware(Edge, config="edge.yaml")])
    app.add_middleware(Edge, config="edge.yaml")                   # FastAPI

Configuration is ``mcp-edge serve``'s (a YAML file, ``MCP_EDGE_*`` variables, keyword options
mirroring its sections), minus what only a server of its own has; a mistake raises
:class:`EdgeConfigError` naming each setting the way it was given. See the manual's "Inside your
app".

The names below are loaded on first use, and each feature's library when a configuration uses
it (a feature whose extra is not installed is refused, naming it), so ``import mcp_edge`` costs
nothing a program does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_edge.version import __version__

__all__ = ["Edge", "EdgeConfigError", "LifespanFailed", "__version__"]

if TYPE_CHECKING:
    from mcp_edge.server.embed import Edge, EdgeConfigError
    from mcp_edge.upstream.inprocess import LifespanFailed


def __getattr__(name: str) -> Any:
    if name in ("Edge", "EdgeConfigError"):
        from mcp_edge.server import embed

        return getattr(embed, name)
    if name == "LifespanFailed":
        from mcp_edge.upstream.inprocess import LifespanFailed

        return LifespanFailed
    raise AttributeError(f"module 'mcp_edge' has no attribute {name!r}")
