"""How reaching a legacy upstream fails (over HTTP, or a local server's process)."""

from __future__ import annotations


class UpstreamUnavailable(Exception):
    """The upstream could not be reached, or stopped answering (``timeout`` or ``unreachable``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class UpstreamBusy(Exception):
    """Every session the upstream may hold is leased to a call (a local server: every process, or
    too many calls pending)."""


class SessionGone(Exception):
    """The upstream no longer knows the session (404): expired, or the process restarted."""


class NotSent(UpstreamUnavailable, SessionGone):
    """The request never reached the upstream (a local server's process had exited, or its stdin
    was closed): it can be sent again, to the restarted process. Caught as either: the process
    is gone (``exited``), and so is the session it was."""

    def __init__(self) -> None:
        super().__init__("exited")


class UpstreamRefused(Exception):
    """The upstream answered with an HTTP error (not a JSON-RPC response to our request)."""

    def __init__(self, status: int, detail: str, challenge: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        #: A 401's ``WWW-Authenticate``: the upstream refused the credential it was sent.
        self.challenge = challenge


class AnswerOverBudget(Exception):
    """Holding more of the upstream's answer would take the process past its answer budget
    (``limits.max_inflight_answer_bytes``): the answer is not read further."""
