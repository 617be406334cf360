"""The 2025-era (legacy) wire, seen from a 2026-07-28 gateway: pure functions, no I/O.

What goes up: an ``initialize`` declaring no more than the modern request declared, the call with
the modern envelope removed, JSON-RPC responses to the server's own requests. What comes back:
messages classified as the response to our call, a server->client request, or a notification;
results converted to 2026-07-28 (``resultType``, cache hints, ``serverInfo``); server requests
turned into ``inputRequests`` entries.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_edge.core import mrtr
from mcp_edge.core.digest import canonical_json
from mcp_edge.core.envelope import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_edge.core.methods import MODERN_REQUESTS
from mcp_edge.core.seal import b64u_encode

#: The version the gateway proposes in ``initialize`` (the newest of the handshake era: it is
#: the one with SSE priming events, which is how an event store shows itself).
LEGACY_VERSION = "2025-11-25"
#: Versions a legacy server may counter-offer that the gateway can speak.
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
#: ``_meta`` keys of the 2026-07-28 envelope: they mean nothing to a legacy server.
ENVELOPE_META = (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL)
#: Legacy-only ``_meta`` keys a server may put on its own requests.
LEGACY_ONLY_META = ("io.modelcontextprotocol/related-task",)

#: 2026-07-28 requests the bridge does not translate: the tasks extension's methods (answered
#: -32601; a 2025 server's ``tasks`` capability is therefore never advertised).
NOT_BRIDGED = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
#: Methods a 2026-07-28 client may call that a legacy server answers (``server/discover`` is
#: synthesised from the session's ``initialize`` result, ``subscriptions/listen`` is fed by a
#: legacy session's standalone stream): every 2026-07-28 request but those.
BRIDGED_METHODS = MODERN_REQUESTS - NOT_BRIDGED
#: Server capabilities of a 2025 server that a 2026-07-28 client is never told of: what the
#: bridge does not serve (``tasks``: the 2025 tasks; ``logging``: set per request with
#: ``logLevel``, not a capability; ``experimental``).
NOT_ADVERTISED = ("logging", "experimental", "tasks")
#: Results that carry cache hints in 2026-07-28 (the legacy server gives none: never cached).
CACHEABLE_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)

#: Legacy error codes with another meaning, or none, in 2026-07-28.
RESOURCE_NOT_FOUND = -32002
URL_ELICITATION_REQUIRED = -32042

JSON = dict[str, Any]


def new_id() -> str:
    """An upstream JSON-RPC id, unique across sessions and replicas: SDK event stores key a
    stream by the request id alone, so small counters would collide between sessions."""
    return "mcpe-" + secrets.token_hex(12)


# ---------------------------------------------------------------- going up


def session_capabilities(declared: JSON) -> JSON:
    """The legacy ``ClientCapabilities`` for ``initialize``: what this request declared, never
    more. Legacy capabilities last for the whole session, so a session is only ever reused by
    requests that declared the same (see the session pool's key)."""
    caps: JSON = {}
    elicitation = declared.get("elicitation")
    if isinstance(elicitation, dict):
        modes: JSON = {}
        if isinstance(elicitation.get("form"), dict) or "url" not in elicitation:
            modes["form"] = {}
        if isinstance(elicitation.get("url"), dict):
            modes["url"] = {}
        caps["elicitation"] = modes
    sampling = declared.get("sampling")
    if isinstance(sampling, dict):
        caps["sampling"] = {
            k: {} for k in ("tools", "context") if isinstance(sampling.get(k), dict)
        }
    if isinstance(declared.get("roots"), dict):
        caps["roots"] = {}  # no listChanged: the gateway cannot deliver that notification
    return caps


def client_info(params: JSON) -> JSON:
    meta = params.get("_meta")
    info = meta.get(META_CLIENT_INFO) if isinstance(meta, dict) else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        return {"name": info["name"], "version": str(info.get("version", ""))}
    return {"name": "mcp-edge-bridge", "version": "1"}


def log_level(params: JSON) -> str | None:
    meta = params.get("_meta")
    level = meta.get(META_LOG_LEVEL) if isinstance(meta, dict) else None
    return level if isinstance(level, str) else None


def progress_token(params: JSON) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, (str, int)) and not isinstance(token, bool) else None


def upstream_params_with_token(params: JSON, token: str | None) -> JSON:
    """:func:`upstream_params`, the client's ``progressToken`` replaced with ``token`` (the
    bridge's own, unique per upstream call, which every later round maps to the token the
    client's retry carries)."""
    out = upstream_params(params)
    meta = out.get("_meta")
    if token is not None and isinstance(meta, dict) and "progressToken" in meta:
        out["_meta"] = {**meta, "progressToken": token}
    return out


def initialize_message(request_id: str, capabilities: JSON, info: JSON) -> JSON:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": capabilities,
            "clientInfo": info,
        },
    }


INITIALIZED: JSON = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def upstream_params(params: JSON) -> JSON:
    """The call's params for the legacy server: without the MRTR retry fields and without the
    2026-07-28 envelope keys in ``_meta`` (``progressToken`` and trace context stay)."""
    out = {k: v for k, v in params.items() if k not in mrtr.RETRY_FIELDS and k != "_meta"}
    meta = params.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k not in ENVELOPE_META}
        if kept:
            out["_meta"] = kept
    return out


def request_message(request_id: str, method: str, params: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def response_message(request_id: Any, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: Any, code: int, message: str) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def cancelled_notification(request_id: str, reason: str) -> JSON:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": reason},
    }


# ---------------------------------------------------------------- coming back


@dataclass(frozen=True, slots=True)
class Response:
    """The JSON-RPC response to a request the gateway sent."""

    id: Any
    result: JSON | None
    error: JSON | None


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request the legacy server sends the client mid-call (elicitation, sampling, roots, ping)."""

    id: Any
    method: str
    params: JSON


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: JSON


Incoming = Response | ServerRequest | Notification


def classify(message: Any) -> Incoming | None:
    """What one message from the server is; None for anything that is not JSON-RPC."""
    if not isinstance(message, dict):
        return None
    method = message.get("method")
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if isinstance(method, str):
        if "id" in message:
            return ServerRequest(message["id"], method, params)
        return Notification(method, params)
    if "id" in message and ("result" in message or "error" in message):
        result = message.get("result")
        error = message.get("error")
        return Response(
            message["id"],
            result if isinstance(result, dict) else None,
            error
            if isinstance(error, dict)
            else (
                {"code": -32603, "message": "malformed response"}
                if not isinstance(result, dict)
                else None
            ),
        )
    return None


def input_request(request: ServerRequest) -> JSON:
    """A server->client request as a 2026-07-28 ``inputRequests`` value: ``{method, params}``
    without the fields 2026-07-28 removed (``elicitationId``) or legacy-only ``_meta`` keys."""
    params = {k: v for k, v in request.params.items() if k != "elicitationId"}
    meta = params.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k not in LEGACY_ONLY_META}
        if kept:
            params["_meta"] = kept
        else:
            del params["_meta"]
    if request.method == "roots/list" and not params:
        return {"method": request.method}
    return {"method": request.method, "params": params}


def request_key(request_id: Any) -> str:
    """A server request's id as one string (``1`` and ``"1"`` stay apart): what the bridge
    remembers of the requests it has answered, so that none is ever answered twice."""
    return orjson.dumps(request_id).decode()


def unsolicited_answer(request: ServerRequest, capabilities: JSON, roots: JSON | None) -> JSON:
    """The bridge's own answer to a server request that belongs to no call a client is making
    (one sent on a session's standalone stream, or with no call to ask).

    A 2026-07-28 client can only be asked within the call that needs the answer, so such a
    request is answered here, truthfully: ``ping`` with an empty result; ``roots/list`` with
    ``roots``, the list the client itself gave earlier in this call, when there is one; else an
    error: ``-32601`` when the session never declared the capability (per the 2025 spec, "the
    client does not support it"), ``-32603`` when it did but no call can carry the question.
    """
    method = request.method
    if method == "ping":
        return response_message(request.id, {})
    if method == "roots/list" and roots is not None:
        return response_message(request.id, legacy_answer(roots))
    if method not in mrtr.INPUT_REQUEST_METHODS:
        return error_message(request.id, METHOD_NOT_FOUND, "Method not found")
    declared = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling"}.get(
        method, "roots"
    )
    if not isinstance(capabilities.get(declared), dict):
        return error_message(request.id, METHOD_NOT_FOUND, f"The client does not support {method}")
    return error_message(
        request.id,
        INTERNAL_ERROR,
        f"{method} cannot reach the client: a 2026-07-28 client is only asked within the "
        "tools/call, prompts/get or resources/read that needs the answer, on that call's own "
        "stream (relate the request to the call)",
    )


def fingerprint(question: JSON) -> str:
    """A digest of a question exactly as the client saw it: a replayed call whose server asks
    anything else gets a new round, never a recorded answer to a different question."""
    return b64u_encode(hashlib.sha256(canonical_json(question)).digest()[:16])


#: The fingerprint of a plain ``roots/list`` question: the client's answer to it, recorded in a
#: call's history, is what a later unsolicited ``roots/list`` in the same call is answered with.
ROOTS_QUESTION = fingerprint({"method": "roots/list"})


def roots_given(history: list[list[Any]]) -> JSON | None:
    """The roots the client gave in this call (its latest answer to a plain ``roots/list``)."""
    for entry in reversed(history):
        if len(entry) == 2 and entry[0] == ROOTS_QUESTION and isinstance(entry[1], dict):
            if answer_is_valid("roots/list", entry[1]):
                return entry[1]
    return None


def answer_is_valid(method: str, answer: Any) -> bool:
    """Does an ``inputResponses`` entry have the shape of a result for that request? (An answer
    that does not is never sent upstream: the question is asked again.)"""
    if not isinstance(answer, dict):
        return False
    if method == "elicitation/create":
        return answer.get("action") in ("accept", "decline", "cancel") and (
            "content" not in answer
            or answer["content"] is None
            or isinstance(answer["content"], dict)
        )
    if method == "sampling/createMessage":
        return isinstance(answer.get("role"), str) and "content" in answer
    if method == "roots/list":
        return isinstance(answer.get("roots"), list)
    return False


def legacy_answer(answer: JSON) -> JSON:
    """A client's ``inputResponses`` entry as the result of the server's request."""
    return {k: v for k, v in answer.items() if k != "resultType"}


def url_elicitations(error: JSON) -> list[JSON] | None:
    """The URL-mode elicitations a legacy ``-32042`` error asks for, as ``inputRequests``
    values (the call is over: once the user has visited them, the call is made again)."""
    if error.get("code") != URL_ELICITATION_REQUIRED:
        return None
    data = error.get("data")
    items = data.get("elicitations") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            return None
        params = {k: v for k, v in item.items() if k != "elicitationId"}
        params["mode"] = "url"
        out.append({"method": "elicitation/create", "params": params})
    return out


def complete_result(method: str, result: JSON, server_info: JSON | None) -> JSON:
    """A legacy result as a 2026-07-28 one."""
    out = dict(result)
    out["resultType"] = "complete"
    if method in CACHEABLE_METHODS:
        # A legacy server says nothing about caching: the only safe reading is "do not".
        out.setdefault("ttlMs", 0)
        out.setdefault("cacheScope", "private")
    if server_info is not None:
        meta = out.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta.setdefault(META_SERVER_INFO, server_info)
        out["_meta"] = meta
    return out


def modern_error(error: JSON) -> tuple[int, str, Any]:
    """A legacy error's code, message and data for a 2026-07-28 client (``-32002`` resource
    not found became ``-32602``)."""
    code = error.get("code")
    message = error.get("message")
    code = code if isinstance(code, int) and not isinstance(code, bool) else -32603
    message = message if isinstance(message, str) else "Upstream error"
    if code == RESOURCE_NOT_FOUND:
        code = INVALID_PARAMS
    return code, message, error.get("data")


def discover_result(init_result: JSON) -> JSON:
    """``server/discover`` for a legacy server, from what its ``initialize`` said."""
    caps = init_result.get("capabilities")
    caps = (
        {k: v for k, v in caps.items() if k not in NOT_ADVERTISED} if isinstance(caps, dict) else {}
    )
    result: JSON = {"supportedVersions": [MODERN_VERSION], "capabilities": caps}
    if isinstance(init_result.get("instructions"), str):
        result["instructions"] = init_result["instructions"]
    info = init_result.get("serverInfo")
    return complete_result("server/discover", result, info if isinstance(info, dict) else None)


def negotiated_version(init_result: JSON) -> str | None:
    version = init_result.get("protocolVersion")
    return version if version in LEGACY_VERSIONS else None
