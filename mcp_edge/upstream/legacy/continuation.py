"""How a bridged call continues on the retry: the bridge's own ``requestState``.

The bridge hands this to the edge as if it were an upstream's state; the flow middleware seals it
(encrypted, bound to the principal, the route and the request, with an expiry and a round
count), so it comes back verified and unchanged on the retry, at whichever replica. Nothing here
is ever seen by the client in clear.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Strategy = Literal["resume", "park", "replay"]
STRATEGIES: tuple[Strategy, ...] = ("resume", "park", "replay")
#: Internal: the call already ended (a legacy ``-32042``); the retry simply makes it again.
RERUN = "rerun"

FORMAT_VERSION = 2


@dataclass(slots=True)
class Pending:
    """One question of this round: the key the client answers under, the server's request id
    (what the answer is posted to), the question's fingerprint, and whether it came on the
    session's standalone stream."""

    key: str
    request_id: Any
    fingerprint: str
    side: bool = False

    def encode(self) -> list[Any]:
        return [self.key, self.request_id, self.fingerprint, 1 if self.side else 0]

    @classmethod
    def decode(cls, doc: Any) -> Pending:
        key, request_id, fingerprint, side = doc
        if not isinstance(key, str) or not isinstance(fingerprint, str):
            raise ValueError("bad pending question")
        return cls(key, request_id, fingerprint, bool(side))


@dataclass(slots=True)
class Continuation:
    """The questions of one round of a bridged call and how to deliver their answers."""

    strategy: str  # resume | park | replay | rerun
    questions: dict[
        str, Any
    ]  # the inputRequests of this round, to ask again if answers are missing
    pending: list[Pending]
    endpoint: str  # upstream endpoint URL the session lives on
    fallback: bool = False  # may fall back to replay when the call cannot go on where it was
    asked: int = 0  # questions asked so far in this call (keys are numbered with it)
    #: resume / park: the upstream session and our call's id.
    session_id: str | None = None
    version: str | None = None
    call_id: str | None = None
    #: resume: where the call's stream, and the session's standalone stream, continue from.
    last_event_id: str | None = None
    side_event_id: str | None = None
    #: park: the replica holding the call and its parking ticket.
    owner: str | None = None
    ticket: str | None = None
    #: replay (and the fallback to it): answers so far, as [fingerprint, answer].
    answers: list[list[Any]] = field(default_factory=list)
    #: Digest of the session pool key the session was opened under: a finished call's session
    #: goes back to the pool only for a request with the same key.
    pool_key: str | None = None
    #: resume: the server's serverInfo (a resumed session has not seen its initialize).
    server_info: dict[str, Any] | None = None
    #: resume / park: the server's requests already answered or asked in this call's session
    #: (:func:`wire.request_key`), so that none is answered twice when an event store replays it.
    answered: list[str] = field(default_factory=list)

    def encode(self) -> str:
        doc: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "st": self.strategy,
            "q": self.questions,
            "p": [p.encode() for p in self.pending],
            "ep": self.endpoint,
        }
        optional = {
            "fb": self.fallback or None,
            "n": self.asked or None,
            "sid": self.session_id,
            "pv": self.version,
            "cid": self.call_id,
            "lei": self.last_event_id,
            "sei": self.side_event_id,
            "own": self.owner,
            "tk": self.ticket,
            "ans": self.answers or None,
            "pk": self.pool_key,
            "si": self.server_info,
            "ad": self.answered or None,
        }
        doc.update((k, v) for k, v in optional.items() if v is not None)
        return orjson.dumps(doc).decode()

    @classmethod
    def decode(cls, text: Any) -> Continuation | None:
        """The continuation in a verified state, or None if it is not one of ours (an upstream
        that switched era between rounds, or a state from another gateway version)."""
        if not isinstance(text, str):
            return None
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
            return None
        try:
            cont = cls(
                strategy=doc["st"],
                questions=doc["q"],
                pending=[Pending.decode(p) for p in doc["p"]],
                endpoint=doc["ep"],
                fallback=bool(doc.get("fb")),
                asked=int(doc.get("n") or 0),
                session_id=doc.get("sid"),
                version=doc.get("pv"),
                call_id=doc.get("cid"),
                last_event_id=doc.get("lei"),
                side_event_id=doc.get("sei"),
                owner=doc.get("own"),
                ticket=doc.get("tk"),
                answers=doc.get("ans") or [],
                pool_key=doc.get("pk"),
                server_info=doc.get("si"),
                answered=[str(k) for k in doc.get("ad") or []],
            )
        except (KeyError, TypeError, ValueError):
            return None
        if cont.strategy not in (*STRATEGIES, RERUN) or not isinstance(cont.questions, dict):
            return None
        if not all(p.key in cont.questions for p in cont.pending):
            return None
        return cont
