"""The gateway's own approval question, and the errors a policy decision answers with.

Sans-I/O: building the InputRequiredResult (a form ``elicitation/create`` saying what is about to
run, with which arguments), reading the client's answer on the retry, and the JSON-RPC errors.

Why ``-32602`` with HTTP 400 for a denial: the specification defines no authorization-denied code;
the closest conditions it names, an unknown tool and a resource that is not there, are ``-32602``
(and the SDKs send ``-32602`` with HTTP 400); ``-32020..-32099`` may hold only the spec's own codes,
``-32603`` would call the gateway broken, and HTTP 403 is the OAuth layer's (``insufficient_scope``
with ``WWW-Authenticate``, which clients answer with a new authorization). A target the caller
cannot see in its lists gets exactly what a target that does not exist would get (agentgateway
does the same), so a denial reveals nothing a list hides.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.capabilities import covers
from gateway.core.errors import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError

#: The ``inputRequests`` key of the gateway's question. Upstreams never see it: it is removed
#: from ``inputResponses`` before a retry is forwarded.
APPROVAL_KEY = "mcp-edge/approval"
APPROVE_FIELD = "approve"

FORM = {"elicitation": {"form": {}}}

#: Bounds on what the question quotes back (the whole call is bound by its digest anyway).
MAX_VALUE_CHARS = 300
MAX_MESSAGE_CHARS = 4000

_NOUN = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}


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


def _render_value(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits
        text = repr(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


def describe_call(method: str, target: str | None, arguments: Any) -> str:
    """A readable account of the call: what runs, with which arguments."""
    noun = _NOUN.get(method, "request")
    if method == "resources/read":
        return f"Read the resource {target}"
    lines = [f"Run the {noun} {target!r}"]
    if isinstance(arguments, dict) and arguments:
        lines[0] += " with these arguments:"
        for name, value in arguments.items():
            lines.append(f"  {name} = {_render_value(value)}")
    else:
        lines[0] += " with no arguments."
    return "\n".join(lines)


def approval_question(method: str, target: str | None, arguments: Any, note: str | None) -> dict[str, Any]:
    """The InputRequiredResult the gateway answers an ``approve`` decision with (the guard adds
    the sealed ``requestState``)."""
    text = "The gateway asks for your approval.\n" + describe_call(method, target, arguments)
    if note:
        text += f"\n\n{note}"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    schema = {
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve",
                "description": "Yes: run it exactly as described. No: do not run it.",
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


#: What the retry's answer says: approved, declined, cancelled, refused (accept without the
#: confirmation), or missing (no answer under the key: ask again).
APPROVED, DECLINED, CANCELLED, REFUSED, MISSING = "approved", "declined", "cancelled", "refused", "missing"


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
    return RpcError(INVALID_PARAMS, f"Not run: {why} ({noun} {target!r})", {"reason": f"approval_{outcome}"})


def approval_restart(method: str, target: str | None) -> RpcError:
    """Policy now wants an approval the flow in progress did not get (rules or claims changed
    between rounds): the call starts over."""
    noun = _NOUN.get(method, "request")
    return RpcError(INVALID_PARAMS, f"This {noun} call now needs approval: call {target!r} again",
                    {"reason": "approval_required"})  # fmt: skip


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
