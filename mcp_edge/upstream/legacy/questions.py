"""Which of a legacy server's requests are a call's questions, and what the bridge answers the
others with (for the request's client); a legacy ``-32042`` as URL-mode questions."""

from __future__ import annotations

from typing import Any

from mcp_edge.core import capabilities as caps
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.continuation import RERUN, Continuation
from mcp_edge.upstream.legacy.request import BridgeRequest


def triage(req: BridgeRequest, session: Any, history: list[list[Any]]) -> dict[str, Any]:
    """How the driver tells this call's questions from the requests the bridge answers
    itself, and what it answers them with (on behalf of this request's client)."""
    declared = req.caller.capabilities
    roots = wire.roots_given(history)

    def unsolicited(request: wire.ServerRequest) -> dict[str, Any]:
        return wire.unsolicited_answer(request, declared, roots)

    def can_answer(request: wire.ServerRequest) -> bool:
        return caps.covers(req.declared, caps.required_for(request.method, request.params))

    def belongs(request: wire.ServerRequest, from_side: bool) -> bool:
        """Over HTTP a request on the call's own stream is the call's. One on the standalone
        stream, while this call is the one in flight on the session (a session serves one
        request at a time), is too when the client declared it can answer it: a 2025-era client
        would answer it there (most 1.x servers ask so: FastMCP's create_message and list_roots
        take no related request id). Else it is answered as the table says: a roots/list the
        client answered already in this call with those roots, anything it did not declare
        with -32601."""
        if not from_side:
            return True
        if request.method == "roots/list" and roots is not None:
            return False
        return can_answer(request)

    if not getattr(session, "ties_requests", True):
        # Nothing on a stdio process's wire names the call a request is for. Servers ask for
        # roots on their own (after initialize, after a roots change): a roots/list this
        # request did not declare is answered as the server's own (the client has no roots,
        # which is true whoever asked), never turned into -32021 for this call.
        def belongs(request: wire.ServerRequest, from_side: bool) -> bool:
            return not from_side and (
                request.method != "roots/list" or isinstance(declared.get("roots"), dict)
            )

    return {"unsolicited": unsolicited, "belongs": belongs}


async def ask_urls(req: BridgeRequest, urls: list[dict[str, Any]], endpoint: str) -> None:
    """A legacy ``-32042``: the call is over, so the client visits the URLs and the retry
    makes the call again."""
    questions = {f"url-{i}": q for i, q in enumerate(urls, 1)}
    cont = Continuation(strategy=RERUN, questions=questions, pending=[], endpoint=endpoint)
    await req.writer.result(
        {
            "resultType": "input_required",
            "inputRequests": questions,
            "requestState": cont.encode(),
        }
    )
