"""One client request as the bridge works on it: what it declared, who sent it, where its answer
goes, and which of the server's notifications reach it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import RequestContext
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.sessions import Caller
from mcp_edge.upstream.legacy.writer import Writer


@dataclass(slots=True)
class BridgeRequest:
    """One client request as the bridge works on it."""

    method: str
    params: dict[str, Any]
    principal_id: str
    declared: dict[str, Any]
    headers: list[tuple[str, str]]
    writer: Writer
    ctx: RequestContext
    #: What the bridge holds of the upstream's answer for this request, counted in the
    #: process's answer budget (the writer gives it back as it hands the answer on).
    reservation: Reservation
    target: str | None = None
    progress: str | int | None = None
    log_level: str | None = None
    #: The progress token the upstream call carries (the bridge's own, unique per upstream
    #: call): its notifications reach the client under this request's ``progress`` token, in
    #: whichever round they come.
    upstream_progress: str | None = None

    @property
    def caller(self) -> Caller:
        return Caller(
            principal_id=self.principal_id,
            capabilities=wire.session_capabilities(self.declared),
            client_info=wire.client_info(self.params),
            log_level=self.log_level,
            headers=tuple(self.headers),
        )

    async def relay(self, note: wire.Notification) -> None:
        """Progress and log notifications reach the client only when it asked for them."""
        if note.method == "notifications/progress":
            if (
                self.progress is not None
                and self.upstream_progress is not None
                and note.params.get("progressToken") == self.upstream_progress
            ):
                params = {**note.params, "progressToken": self.progress}
                await self.writer.notify(
                    {"jsonrpc": "2.0", "method": note.method, "params": params}
                )
        elif note.method == "notifications/message" and self.log_level is not None:
            await self.writer.notify(
                {"jsonrpc": "2.0", "method": note.method, "params": note.params}
            )


HeaderHook = Callable[[RequestContext], Sequence[tuple[str, str]]]
