"""The gateway's own approval question, and the errors a policy decision answers with.

Sans-I/O: building the InputRequiredResult (a form ``elicitation/create`` saying what is about to
run, with which arguments), reading the client's answer on the retry, and the JSON-RPC errors.

The question shows the whole call, never a part of it: the target and the arguments as one JSON
document in a fenced block, hidden characters escaped and long runs of blanks written as one
mark with their count (:mod:`mcp_edge.policy.render`), so it parses back to exactly what the
upstream will get; what was escaped or marked is counted in a warning, in the message and in the
form field's description (what a client that shows only the form still shows). A call too long to show within the route's
bound is refused by default: a person cannot approve what they cannot see, and a cut value is
how a caller would show ``echo hello`` and run what follows it. A route may instead ask with a
question marked as not showing the call, giving its length and the digest the approval is bound
to (``too_long: digest``), for tools whose large inputs people approve without reading anyway.

Why ``-32602`` with HTTP 400 for a denial: the specification defines no authorization-denied code;
the closest conditions it names, an unknown tool and a resource that is not there, are ``-32602``
(and the SDKs send ``-32602`` with HTTP 400); ``-32020..-32099`` may hold only the spec's own codes,
``-32603`` would call the gateway broken, and HTTP 403 is the OAuth layer's (``insufficient_scope``
with ``WWW-Authenticate``, which clients answer with a new authorization). A target the caller
cannot see in its lists gets exactly what a target that does not exist would get (agentgateway
does the same), so a denial reveals nothing a list hides.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_edge.core.capabilities import covers
from mcp_edge.core.digest import request_digest
from mcp_edge.core.errors import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError
from mcp_edge.policy.render import Shown, show

#: The ``inputRequests`` key of the gateway's question. Upstreams never see it: it is removed
#: from ``inputResponses`` before a retry is forwarded.
APPROVAL_KEY = "mcp-edge/approval"
APPROVE_FIELD = "approve"

FORM: dict[str, Any] = {"elicitation": {"form": {}}}

#: The question's length, by default (``policy.approval.max_message_chars``).
MAX_MESSAGE_CHARS = 4000
#: Shown instead of a call too long for the question (``policy.approval.too_long: digest``).
NOT_SHOWN = "CALL NOT SHOWN IN FULL"
#: A target (tool or prompt name, resource URI) longer than this is not shown with a digest.
MAX_TARGET_CHARS = 200
#: What a call too long to show gets: a clear error (nothing runs), or the digest question.
REFUSE, DIGEST = "refuse", "digest"

_NOUN = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}

_SHOWN = (
    "The gateway asks for your approval before this call runs. It runs exactly as shown below, in "
    "JSON: every name and text is in quotes, and characters that are invisible, control the layout "
    "or could break this display (newlines, text-direction and zero-width characters, backticks) "
    "are written as escapes such as \\n or \\u202e."
)
_ESCAPED = (
    "Careful: {n} character(s) of this call are invisible, control characters or change how text "
    "is displayed; each is shown as an escape."
)
_RUNS = (
    "Careful: {runs} run(s) of one blank or escaped character repeated ({chars} characters in all) "
    "are each shown as one mark with the count: \u27e6n spaces\u27e7 for n spaces, "
    "\u27e6n \u00d7 \\t\u27e7 for n tabs (and so for any escape); \u27e6 and \u27e7 in this "
    "call are escaped."
)
_FIELD = "Yes: run it exactly as described. No: do not run it."


def can_ask(declared: dict[str, Any]) -> bool:
    """Did this request declare form elicitation (which the question needs)?"""
    return covers(declared, FORM)


def approval_needs_form(method: str, target: str | None) -> RpcError:
    noun = _NOUN.get(method, "request")
    return RpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Calling {noun} {target!r} needs a person's approval, asked as a form elicitation: "
        "declare elicitation.form in clientCapabilities to be asked",
        {"requiredCapabilities": {"elicitation": {"form": {}}}},
    )


def shown_call(method: str, target: str | None, arguments: Any) -> dict[str, Any]:
    """What the person approves: the target and the arguments, as the upstream will get them
    (an absent ``arguments`` is ``{}``, as in the digest the approval is bound to)."""
    if method == "resources/read":
        return {"resource": target}
    return {
        _NOUN.get(method, "request"): target,
        "arguments": {} if arguments is None else arguments,
    }


def call_digest(method: str, target: str | None, arguments: Any) -> str:
    """``sha256:`` and the hex digest the sealed state binds the call to."""
    params = (
        {"uri": target} if method == "resources/read" else {"name": target, "arguments": arguments}
    )
    return "sha256:" + request_digest(method, params).hex()


def warnings(shown: Shown, what: str = "this call") -> str:
    """The warnings for what a shown value holds ("" when nothing was escaped or marked)."""
    parts = []
    if shown.escaped:
        parts.append(_ESCAPED.format(n=shown.escaped))
    if shown.runs:
        parts.append(_RUNS.format(runs=shown.runs, chars=shown.in_runs))
    return " ".join(parts).replace("this call", what)


def describe_call(
    method: str, target: str | None, arguments: Any, note: str | None
) -> tuple[str, str]:
    """The whole call in a fenced JSON block, with hidden characters escaped and long runs
    marked (unbounded), and the warnings it carries."""
    shown = show(shown_call(method, target, arguments))
    warned = warnings(shown)
    text = f"{_SHOWN} {warned}" if warned else _SHOWN
    text += f"\n\n```json\n{shown.text}\n```"
    if note:
        text += f"\n\n{note}"
    return text, warned


def describe_digest(
    method: str, target: str | None, arguments: Any, note: str | None, *, max_chars: int
) -> tuple[str, str]:
    """The question for a call too long to show: marked, with its length and digest (and the
    warnings for the name it shows)."""
    noun = _NOUN.get(method, "request")
    warned = ""
    if method == "resources/read":
        what = f"the URI of the resource to read is {len(target or '')} characters long"
    else:
        size = len(
            json.dumps(
                {} if arguments is None else arguments, ensure_ascii=False, separators=(",", ":")
            )
        )
        shown = show(target)
        name = shown.text
        if len(name) > MAX_TARGET_CHARS:
            name = f"whose name is {len(target or '')} characters long"
        else:
            warned = warnings(shown, f"the {noun}'s name")
        what = f"the {noun} {name} is called with arguments of {size} characters (as JSON)"
    text = (
        "The gateway asks for your approval before this call runs.\n\n"
        f"{NOT_SHOWN}: {what}, too long for this question ({max_chars} characters at most). "
        "Approve only if you know what it is: this approval holds only for the call whose digest "
        f"is {call_digest(method, target, arguments)}."
    )
    if warned:
        text += f" {warned}"
    if note:
        text += f"\n\n{note}"
    return text, warned


def approval_question(
    method: str,
    target: str | None,
    arguments: Any,
    note: str | None,
    *,
    max_chars: int = MAX_MESSAGE_CHARS,
    too_long: str = REFUSE,
) -> dict[str, Any]:
    """The InputRequiredResult the gateway answers an ``approve`` decision with (the flow middleware adds
    the sealed ``requestState``). A call that cannot be shown in full within ``max_chars`` gets
    :func:`approval_too_long` (``refuse``) or the marked digest question (``digest``); it is
    never cut."""
    # The compact JSON is a lower bound of the question's length, but for marked runs: a huge
    # call is told apart without escaping it character by character (a call whose compact JSON
    # is over the bound is not shown even if its marks would make it fit).
    compact = json.dumps(
        shown_call(method, target, arguments), ensure_ascii=False, separators=(",", ":")
    )
    question = describe_call(method, target, arguments, note) if len(compact) <= max_chars else None
    if question is None or len(question[0]) > max_chars:
        if too_long != DIGEST:
            raise approval_too_long(method, target, max_chars)
        question = describe_digest(method, target, arguments, note, max_chars=max_chars)
    text, warned = question
    schema = {
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve",
                # The warnings again where the answer is given: a client may show the form
                # more plainly than the message.
                "description": f"{_FIELD} {warned}" if warned else _FIELD,
            }
        },
        "required": [APPROVE_FIELD],
    }
    return {
        "resultType": "input_required",
        "inputRequests": {
            APPROVAL_KEY: {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": text, "requestedSchema": schema},
            }
        },
    }


def approval_too_long(method: str, target: str | None, max_chars: int) -> RpcError:
    """A call too long to show to the person approving it is not run (and nobody is asked)."""
    noun = _NOUN.get(method, "request")
    name = target if target is None or len(target) <= 100 else target[:100] + "..."
    return RpcError(
        INVALID_PARAMS,
        f"Not run: this call of {noun} {name!r} needs a person's approval, and is too long to show "
        f"to them in full (the question holds at most {max_chars} characters)",
        {"reason": "approval_too_long"},
    )


#: What the retry's answer says: approved, declined, cancelled, refused (accept without the
#: confirmation), or missing (no answer under the key: ask again).
APPROVED, DECLINED, CANCELLED, REFUSED, MISSING = (
    "approved",
    "declined",
    "cancelled",
    "refused",
    "missing",
)


def read_answer(input_responses: Any) -> str:
    if not isinstance(input_responses, dict):
        return MISSING
    answer = input_responses.get(APPROVAL_KEY)
    if not isinstance(answer, dict):
        return MISSING
    action = answer.get("action")
    if action == "decline":
        return DECLINED
    if action == "cancel":
        return CANCELLED
    if action != "accept":
        return MISSING
    content = answer.get("content")
    if isinstance(content, dict) and content.get(APPROVE_FIELD) is True:
        return APPROVED
    return REFUSED


def approval_refused(method: str, target: str | None, outcome: str) -> RpcError:
    noun = _NOUN.get(method, "request")
    why = {
        DECLINED: "the approval was declined",
        CANCELLED: "the approval was cancelled",
        REFUSED: "the approval form was not confirmed",
    }[outcome]
    return RpcError(
        INVALID_PARAMS, f"Not run: {why} ({noun} {target!r})", {"reason": f"approval_{outcome}"}
    )


def approval_restart(method: str, target: str | None) -> RpcError:
    """Policy now wants an approval the flow in progress did not get (rules or claims changed
    between rounds): the call starts over."""
    noun = _NOUN.get(method, "request")
    return RpcError(
        INVALID_PARAMS,
        f"This {noun} call now needs approval: call {target!r} again",
        {"reason": "approval_required"},
    )


def denied(method: str, target: str | None, *, visible: bool, message: str | None) -> RpcError:
    """A denial. Hidden targets get what a missing one would; visible ones (denied for these
    arguments) say so, with the rule's operator-written message if it has one."""
    noun = _NOUN.get(method, "request")
    if not visible:
        if method == "resources/read":
            return RpcError(INVALID_PARAMS, f"Resource not found: {target}")
        return RpcError(INVALID_PARAMS, f"Unknown {noun}: {target}")
    text = message or f"Not permitted: this call of {noun} {target!r}"
    return RpcError(INVALID_PARAMS, text, {"reason": "policy_denied"})
