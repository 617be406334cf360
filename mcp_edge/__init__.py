"""mcp-edge as ASGI middleware: protect a Python MCP server inside its own process.

    from mcp_edge import Edge

    app = Edge(mcp.streamable_http_app(), anonymous=True)          # the app, wrapped
    app = Starlette(..., middleware=[Middleware(Edge, config="edge.yaml")])
    app.add_middleware(Edge, config="edge.yaml")                   # FastAPI

Configuration is ``mcp-edge serve``'s (a YAML file, ``MCP_EDGE_*`` variables, keyword options
mirroring its sections), minus what only a server of its own has; a mistake raises
:class:`EdgeConfigError` with ``check-config``'s message. See the manual's "Inside your app".
"""

from gateway import __version__
from gateway.server.embed import Edge, EdgeConfigError
from gateway.upstream.inprocess import LifespanFailed

__all__ = ["Edge", "EdgeConfigError", "LifespanFailed", "__version__"]
