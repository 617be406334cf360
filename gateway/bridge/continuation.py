"""How a bridged call continues on the retry: the bridge's own ``requestState``.

The bridge hands this to the edge guard as if it were an upstream's state; the guard seals it
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

FORMAT_VERSION = 1


@dataclass(slots=True)
class Continuation:
    """One pending question of a bridged call and how to deliver its answer."""

    strategy: str  # resume | park | replay | rerun
    key: str  # the inputRequests key the client answers under
    question: dict[str, Any]  # the inputRequests value, to ask again if the answer is missing
    fingerprint: str  # digest of ``question`` (replay checks the server asks the same)
    endpoint: str  # upstream endpoint URL the session lives on
    fallback: bool = False  # may fall back to replay when the flow cannot continue
    #: resume / park: the upstream session, our call's id, the server's pending request id.
    session_id: str | None = None
    version: str | None = None
    call_id: str | None = None
    request_id: Any = None
    #: resume: the SSE event id to resume after.
    last_event_id: str | None = None
    #: park: the replica holding the call and its parking ticket.
    owner: str | None = None
    ticket: str | None = None
    #: replay (and the fallback to it): answers so far, in order, as [fingerprint, answer].
    answers: list[list[Any]] = field(default_factory=list)
    #: url elicitations of a legacy -32042 (rerun): several questions at once.
    extra_questions: dict[str, Any] | None = None
    #: Questions asked so far in this call (keys are numbered with it).
    asked: int = 0

    def encode(self) -> str:
        doc: dict[str, Any] = {"v": FORMAT_VERSION, "st": self.strategy, "k": self.key,
                               "q": self.question, "fp": self.fingerprint, "ep": self.endpoint}  # fmt: skip
        optional = {
            "fb": self.fallback or None, "sid": self.session_id, "pv": self.version,
            "cid": self.call_id, "rid": self.request_id, "lei": self.last_event_id,
            "own": self.owner, "tk": self.ticket, "ans": self.answers or None,
            "xq": self.extra_questions, "n": self.asked or None,
        }  # fmt: skip
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
                strategy=doc["st"], key=doc["k"], question=doc["q"], fingerprint=doc["fp"],
                endpoint=doc["ep"], fallback=bool(doc.get("fb")), session_id=doc.get("sid"),
                version=doc.get("pv"), call_id=doc.get("cid"), request_id=doc.get("rid"),
                last_event_id=doc.get("lei"), owner=doc.get("own"), ticket=doc.get("tk"),
                answers=doc.get("ans") or [], extra_questions=doc.get("xq"), asked=int(doc.get("n") or 0),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None
        if cont.strategy not in (*STRATEGIES, RERUN) or not isinstance(cont.question, dict):
            return None
        return cont

    def questions(self) -> dict[str, Any]:
        """The ``inputRequests`` this continuation asks."""
        return dict(self.extra_questions) if self.extra_questions else {self.key: self.question}
