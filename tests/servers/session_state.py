"""A 2025-era stdio MCP server that keeps per-session state: FastMCP from the published `mcp` SDK
1.x (exactly `mcp==1.30.0`), over stdin/stdout.

Over stdio a process is one session, so what it keeps for its session it keeps for whoever
reaches it: the state a gateway must never let one caller see of another's.

- `my_roots`: the client's roots, asked once (`roots/list`) and then remembered for the session,
  as servers do (the published everything server's `get-roots-list` does the same); answers the
  root URIs, one a line.
- `my_log_level`: the level the session set with `logging/setLevel` (`unset` before).
- `my_subscriptions`: the resource URIs the session subscribed to (`resources/subscribe`), one a
  line (empty when none).
- `whoami`: this process's id (pid and a random label), to tell processes apart.
- `touch`: tells this session its tool list changed (`notifications/tools/list_changed`; the
  server advertises `tools.listChanged`).
- resource `state://counter`, to subscribe to.

Run it as `python tests/servers/session_state.py` with an interpreter that has `mcp==1.30.0`
(`tests.support.sandbox.stdio_server_command` builds that command line).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.lowlevel import NotificationOptions

LABEL = f"{os.getpid()}-{secrets.token_hex(4)}"


@dataclass
class SessionState:
    """What the server keeps for its one session (over stdio: for its whole life)."""

    roots: list[str] | None = None
    log_level: str = "unset"
    subscriptions: set[str] = field(default_factory=set)


def build() -> FastMCP:
    app = FastMCP("session-state")
    state = SessionState()

    @app.tool()
    async def my_roots(ctx: Context) -> str:
        if state.roots is None:
            result = await ctx.session.list_roots()
            state.roots = [str(root.uri) for root in result.roots]
        return "\n".join(state.roots)

    @app.tool()
    def my_log_level() -> str:
        return state.log_level

    @app.tool()
    def my_subscriptions() -> str:
        return "\n".join(sorted(state.subscriptions))

    @app.tool()
    def whoami() -> str:
        return LABEL

    @app.tool()
    async def touch(ctx: Context) -> str:
        await ctx.session.send_tool_list_changed()
        return LABEL

    @app.resource("state://counter")
    def counter() -> str:
        return "0"

    lowlevel = app._mcp_server

    @lowlevel.set_logging_level()
    async def set_level(level: str) -> None:
        state.log_level = level

    @lowlevel.subscribe_resource()
    async def subscribe(uri: object) -> None:
        state.subscriptions.add(str(uri))

    @lowlevel.unsubscribe_resource()
    async def unsubscribe(uri: object) -> None:
        state.subscriptions.discard(str(uri))

    # Advertise tools.listChanged (FastMCP starts with no notification options).
    options = lowlevel.create_initialization_options
    lowlevel.create_initialization_options = lambda *_, **__: options(  # type: ignore[method-assign]
        NotificationOptions(tools_changed=True)
    )
    return app


if __name__ == "__main__":
    build().run("stdio")
