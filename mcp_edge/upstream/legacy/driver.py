"""Reading one legacy call until it needs the client or ends.

The server's messages are read one by one: notifications go to a callback (relayed or dropped by
the caller), a question of the call is either answered from recorded answers (replay) or collected
so the client can be asked, and the response to our call ends the round. Questions a server asks
together (several outstanding at once) are collected into one round: after the first, the driver
keeps listening for ``window`` seconds for more.

Not every request the server sends is a question of the call: one that came on the session's
standalone stream, ``ping``, or one the caller says is not the call's (``belongs``) is answered
here with the bridge's own answer (``unsolicited``) and never reaches the client. And a request
is handled once: its id goes into ``answered`` (which the caller carries from round to round), so
the same request replayed by an event store (on a resumed stream, or on the other stream) is
neither asked nor answered again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_edge.core import mrtr
from mcp_edge.upstream.legacy import wire


class Messages(Protocol):
    async def next(self) -> tuple[bool, str | None, Any] | None: ...


class Poster(Protocol):
    async def post(self, message: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class Question:
    """A request the server sent the client; it is still open upstream."""

    request: wire.ServerRequest
    input_request: dict[str, Any]
    fingerprint: str
    from_side: bool = False


@dataclass(slots=True)
class Questions:
    """The server is waiting for the client: these questions, asked together."""

    asked: list[Question]
    #: The recorded answers used before them (replay), in the order they were used.
    used: list[list[Any]] = field(default_factory=list)


@dataclass(slots=True)
class Final:
    response: wire.Response


#: What a :class:`Final` holds once its response has been handed to the client (so that the
#: response, however large, is not kept alive by whoever still holds the outcome).
HANDED_ON = wire.Response(None, {}, None)


class Ended:
    """The call's stream ended without its response."""


Outcome = Questions | Final | Ended
OnNotification = Callable[[wire.Notification], Awaitable[None]]
#: The bridge's own answer to a request that is not a question of the call.
Unsolicited = Callable[[wire.ServerRequest], dict[str, Any]]
#: Is this request (and did it come on the standalone stream?) a question of the call?
Belongs = Callable[[wire.ServerRequest, bool], bool]


def _refuse(request: wire.ServerRequest) -> dict[str, Any]:
    return wire.unsolicited_answer(request, {}, None)


def on_own_stream(request: wire.ServerRequest, from_side: bool) -> bool:
    """A request on the call's own stream is the call's; one on the standalone stream is not."""
    return not from_side


def _take_recorded(recorded: list[list[Any]], fingerprint: str) -> Any | None:
    """The first recorded answer to exactly this question, removed from ``recorded``."""
    for i, (fp, answer) in enumerate(recorded):
        if fp == fingerprint:
            del recorded[i]
            return answer
    return None


async def drive(
    messages: Messages,
    session: Poster,
    call_id: str,
    *,
    on_notification: OnNotification,
    recorded: list[list[Any]] | None = None,
    questions_allowed: bool = True,
    window: float = 0.0,
    answered: MutableSet[str] | None = None,
    unsolicited: Unsolicited = _refuse,
    belongs: Belongs = on_own_stream,
) -> Outcome:
    """Read until the call needs the client (``Questions``) or ends.

    ``recorded`` (replay): ``[fingerprint, answer]`` pairs; a question whose fingerprint is
    there gets that answer (each used once, in order) and the client is not asked again; any
    other question is new and goes to the client, never a recorded answer given for another.
    ``answered``: the keys (:func:`wire.request_key`) of the server's requests already answered
    or asked in this session; every request handled here is added.
    """
    handled: MutableSet[str] = set() if answered is None else answered
    remaining = list(recorded or [])
    used: list[list[Any]] = []
    asked: list[Question] = []
    deadline = 0.0
    loop = asyncio.get_running_loop()
    while True:
        if asked:
            left = deadline - loop.time()
            if left <= 0:
                return Questions(asked, used)
            try:
                item = await asyncio.wait_for(messages.next(), left)
            except TimeoutError:
                return Questions(asked, used)
        else:
            item = await messages.next()
        if item is None:
            return Questions(asked, used) if asked else Ended()
        from_side, _, message = item
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
        key = wire.request_key(incoming.id)
        if key in handled:
            continue  # asked or answered already: a replay, never a second answer
        handled.add(key)
        if (
            incoming.method not in mrtr.INPUT_REQUEST_METHODS
            or not questions_allowed
            or not belongs(incoming, from_side)
        ):
            await session.post(unsolicited(incoming))
            continue
        question = wire.input_request(incoming)
        fp = wire.fingerprint(question)
        answer = _take_recorded(remaining, fp) if remaining else None
        if answer is not None:
            await session.post(wire.response_message(incoming.id, wire.legacy_answer(answer)))
            used.append([fp, answer])
            continue
        if not asked:
            deadline = loop.time() + window
        asked.append(Question(incoming, question, fp, from_side))
