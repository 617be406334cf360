"""The consent round as the client sees it, and every error a call needing a grant can end with.

Sans-I/O. A call by a principal with no usable grant for a member with ``upstream_auth.oauth``
ends with an InputRequiredResult asking one URL-mode ``elicitation/create`` under
:data:`CONSENT_KEY` (the upstream never sees that key: it is removed from the retry's
``inputResponses``); its URL is the gateway's own start page, and its ``requestState`` the
consent's continuation (which the flow middleware seals). The retry's answer is read here:
``accept`` means the person opened the link (it does not mean they finished: the gateway
then looks for the grant, waiting a little), ``decline`` and ``cancel`` end the call with a
clear error, no answer asks again.

Why ``-32602`` (HTTP 400) for a declined or refused consent: as for the policy's approval (see
mcp_edge.policy.approval), the specification defines no code for "the user did not allow it",
and the closest it names are ``-32602``. What the operator must look at (an authorization server
down, the grant store down) is ``-32603`` with HTTP 503 and ``Retry-After``.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_edge.core.capabilities import covers
from mcp_edge.core.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UPSTREAM_ERROR,
    RpcError,
)

#: The ``inputRequests`` key of the consent question.
CONSENT_KEY = "mcp-edge/consent"
URL_MODE: dict[str, Any] = {"elicitation": {"url": {}}}

_NOUN = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}
#: A target longer than this is named by its length in messages.
_MAX_NAMED = 120


def _named(method: str, target: str | None) -> str:
    """The call, for a message: its kind and its target quoted as JSON (hidden characters
    escaped, so nothing in a caller's name can change how the message reads)."""
    noun = _NOUN.get(method, "request")
    if target is None:
        return f"this {noun}"
    if len(target) > _MAX_NAMED:
        return f"the {noun} whose name is {len(target)} characters long"
    return f"{noun} {json.dumps(target)}"


def can_ask(declared: dict[str, Any]) -> bool:
    """Did this request declare URL-mode elicitation (which the consent round needs)?"""
    return covers(declared, URL_MODE)


def consent_question(
    *, url: str, member: str, authority: str, method: str, target: str | None, again: bool
) -> dict[str, Any]:
    """The InputRequiredResult of a consent round (the caller adds its ``requestState``).
    ``authority``: the host of the authorization server the person will be sent to."""
    why = (
        "The authorization is not complete yet (or it was withdrawn). "
        if again
        else "This call needs your own permission at the service behind it. "
    )
    message = (
        f"{why}Calling {_named(method, target)} through {json.dumps(member)} acts with your "
        f"account at {authority}. Open the link to sign in there and allow access; then "
        "continue. The link is yours alone and works once."
    )
    return {
        "resultType": "input_required",
        "inputRequests": {
            CONSENT_KEY: {
                "method": "elicitation/create",
                "params": {"mode": "url", "url": url, "message": message},
            }
        },
    }


#: What the retry answers: opened, declined, cancelled, or nothing (ask again).
ACCEPTED, DECLINED, CANCELLED, MISSING = "accepted", "declined", "cancelled", "missing"


def read_answer(input_responses: Any) -> str:
    if not isinstance(input_responses, dict):
        return MISSING
    answer = input_responses.get(CONSENT_KEY)
    if not isinstance(answer, dict):
        return MISSING
    action = answer.get("action")
    if action == "accept":
        return ACCEPTED
    if action == "decline":
        return DECLINED
    if action == "cancel":
        return CANCELLED
    return MISSING


def without_answer(params: dict[str, Any]) -> None:
    """Remove the consent answer from a retry's params (the upstream never sees it)."""
    responses = params.get("inputResponses")
    if isinstance(responses, dict):
        responses.pop(CONSENT_KEY, None)
        if not responses:
            del params["inputResponses"]
    elif "inputResponses" in params:
        del params["inputResponses"]


# ---------------------------------------------------------------------------- errors


def needs_url_mode(method: str, target: str | None, member: str) -> RpcError:
    """The call needs a consent round and the request did not declare URL mode."""
    return RpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Calling {_named(method, target)} needs your authorization for {json.dumps(member)}, "
        "asked as a URL-mode elicitation: declare elicitation.url in clientCapabilities to be "
        "asked",
        {"requiredCapabilities": {"elicitation": {"url": {}}}},
    )


def _refused(reason: str, text: str) -> RpcError:
    return RpcError(INVALID_PARAMS, text, {"reason": reason})


def consent_declined(member: str, outcome: str) -> RpcError:
    """The client answered the consent question with ``decline`` or ``cancel``."""
    word = "declined" if outcome == DECLINED else "cancelled"
    return _refused(
        f"consent_{word}", f"Not run: the authorization for {json.dumps(member)} was {word}"
    )


#: What the browser's side of a consent can end with, as the retry reports it.
OUTCOME_ERRORS = {
    "denied": (
        "consent_denied",
        "Not run: access to {member} was not allowed at its authorization server",
    ),
    "other_user": (
        "consent_other_user",
        "Not run: the person who opened the authorization link signed in as someone else than "
        "the caller; open it again, signed in as yourself",
    ),
    "failed": (
        "consent_failed",
        "Not run: the authorization for {member} did not complete (its authorization server "
        "refused the code); try again",
    ),
}


def consent_outcome_error(member: str, outcome: str) -> RpcError:
    reason, text = OUTCOME_ERRORS.get(outcome, OUTCOME_ERRORS["failed"])
    return _refused(reason, text.format(member=json.dumps(member)))


def needs_user(member: str) -> RpcError:
    """The caller is a client acting for itself (a client-credentials token): nobody can give
    consent in a browser for it."""
    return _refused(
        "consent_needs_user",
        f"Not run: {json.dumps(member)} acts with a person's own authorization, and this caller "
        "is not a person (a client's own token)",
    )


def unavailable(member: str, what: str) -> RpcError:
    """Something the grant needs cannot be reached now (the grant store, the authorization
    server for a refresh of an expired token): fail closed, try again shortly."""
    return RpcError(
        INTERNAL_ERROR,
        f"The authorization for {json.dumps(member)} cannot be used now ({what}); retry shortly",
        {"reason": "consent_unavailable"},
        status=503,
        headers={"Retry-After": "1"},
    )


def list_needs_grant(member: str, url: str) -> RpcError:
    """A list (or another request that cannot ask) for a member the caller has not authorized.
    ``-32000`` is the implementation-defined server error: the request was valid, the gateway
    will not send it without the caller's own authorization, and there is no way to ask for it
    on this request. The page at ``url`` lets the person grant it (then list again)."""
    return RpcError(
        UPSTREAM_ERROR,
        f"{json.dumps(member)} acts with your own authorization, which it does not have yet: "
        f"grant it at {url} (or call one of its tools, which asks), then try again",
        {"reason": "consent_required", "url": url},
    )


def discover_without_grant(member: str, url: str) -> dict[str, Any]:
    """``server/discover`` for a member that refused the caller (who has no grant for it): the
    version the gateway speaks, no capability claimed (the gateway cannot know them), and
    instructions saying where to grant access. Calls still ask for the grant themselves."""
    return {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {},
        "instructions": (
            f"{json.dumps(member)} acts with your own authorization, which it does not have yet: "
            f"grant it at {url}, or call one of its tools (which asks); its capabilities show "
            "once it is granted."
        ),
    }


def upstream_refused_list(member: str, url: str) -> RpcError:
    """The upstream refused the caller's token on a request that cannot ask again: the grant
    is dropped, the person grants it again."""
    return RpcError(
        UPSTREAM_ERROR,
        f"{json.dumps(member)} no longer accepts your authorization: grant it again at {url}, "
        "then try again",
        {"reason": "consent_required", "url": url},
    )
