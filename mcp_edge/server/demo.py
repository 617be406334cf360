"""The embedded demo upstream: a small MCP server (built with the ``mcp`` SDK) that asks for input
through MRTR, so ``mcp-edge demo`` shows a full round trip through the gateway."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel
from starlette.applications import Starlette


class Party(BaseModel):
    size: int


def ask_party(date: str) -> Elicit[Party]:
    return Elicit(f"How many people for {date}?", Party)


def build_demo_server() -> MCPServer:
    server = MCPServer("mcp-edge-demo", instructions="A demo upstream behind mcp-edge.")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def book_table(
        date: str, party: Annotated[ElicitationResult[Party], Resolve(ask_party)]
    ) -> str:
        """Book a table; asks the user how many people are coming (MRTR elicitation)."""
        if party.action == "accept":
            return f"Booked a table for {party.data.size} on {date}"
        return f"Not booked ({party.action})"

    @server.prompt()
    def greeting(name: str) -> str:
        """A greeting prompt."""
        return f"Say hello to {name}."

    @server.resource("demo://motd")
    def motd() -> str:
        """Message of the day."""
        return "Requests through mcp-edge carry sealed state."

    return server


def build_demo_app(host: str = "127.0.0.1") -> Starlette:
    return build_demo_server().streamable_http_app(json_response=True, host=host)
