"""Reading one legacy call until it needs the client or ends.

The server's stream is read message by message: ``ping`` is answered here, notifications go to a
callback (relayed or dropped by the caller), a question is either answered from recorded answers
(replay) or returned so the client can be asked, and the response to our call ends the round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.bridge import wire
from gateway.bridge.http_session import EventStream, LegacyHttpSession
from gateway.core import mrtr

METHOD_NOT_FOUND = -32601


@dataclass(slots=True)
class Question:
    """The server asked the client something (its request is still open upstream)."""

    request: wire.ServerRequest
    input_request: dict[str, Any]
    fingerprint: str
    #: The SSE event id of the question (where a resumed stream continues from).
    event_id: str | None
    #: How many recorded answers were used before it (replay).
    answered: int


@dataclass(slots=True)
class Final:
    response: wire.Response


class Ended:
    """The stream ended without the response to our call."""


Outcome = Question | Final | Ended
OnNotification = Callable[[wire.Notification], Awaitable[None]]


async def drive(
    stream: EventStream,
    session: LegacyHttpSession,
    call_id: str,
    *,
    on_notification: OnNotification,
    recorded: list[list[Any]] | None = None,
    questions_allowed: bool = True,
) -> Outcome:
    """Read ``stream`` until the call needs the client (``Question``) or ends."""
    used = 0
    while (item := await stream.next()) is not None:
        event_id, message = item
        incoming = wire.classify(message)
        if isinstance(incoming, wire.Response):
            if incoming.id == call_id:
                return Final(incoming)
            continue
        if isinstance(incoming, wire.Notification):
            await on_notification(incoming)
            continue
        if incoming is None:
            continue
        # A request from the server to the client, in the middle of our call.
        if incoming.method == "ping":
            await session.post(wire.response_message(incoming.id, {}))
            continue
        if incoming.method not in mrtr.INPUT_REQUEST_METHODS:
            await session.post(wire.error_message(incoming.id, METHOD_NOT_FOUND, "Method not found"))
            continue
        if not questions_allowed:
            await session.post(wire.error_message(
                incoming.id, METHOD_NOT_FOUND,
                f"{incoming.method} cannot be answered during this request (2026-07-28 client)"))  # fmt: skip
            continue
        question = wire.input_request(incoming)
        fp = wire.fingerprint(question)
        if recorded is not None and used < len(recorded):
            if recorded[used][0] == fp:
                await session.post(wire.response_message(incoming.id, wire.legacy_answer(recorded[used][1])))
                used += 1
                continue
            # A changed question: the answers from here on were for something else.
            del recorded[used:]
        return Question(incoming, question, fp, event_id, used)
    return Ended()
