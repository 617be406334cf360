"""What an upstream's answer to a 2026-07-28 request must look like before the gateway passes it
on: framing (content type, encoding), the final response's ``resultType``, and what may travel on
a response stream. Pure functions; the response inspector (``mcp_edge.edge.responses``) applies
them.

Upstream failures the gateway turns into errors carry ``data.reason`` (HTTP 502/504, as for an
unreachable upstream); answers that break the MCP rules carry ``data.violation`` (HTTP 200, as the
existing MRTR violations do).
"""

from __future__ import annotations

import re
from typing import Any

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.mrtr import INPUT_REQUIRED

JSON = b"application/json"
SSE = b"text/event-stream"

COMPLETE = "complete"
#: ``resultType`` values outside the core vocabulary that an extension defines (tasks' ``task``)
#: pass only when the request declared an extension.
EXTENSION = "extension"


def media_type(content_type: bytes) -> bytes:
    return content_type.split(b";", 1)[0].strip().lower()


def upstream_failure(reason: str, message: str, status: int = 502, **data: Any) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": reason, **data}, status=status)


def violation(kind: str, message: str, **data: Any) -> RpcError:
    return RpcError(
        INTERNAL_ERROR, f"Upstream violated MCP: {message}", {"violation": kind, **data}
    )


def framing_error(
    status: int, content_type: bytes, content_encoding: bytes | None
) -> RpcError | None:
    """Refuse an answer the gateway cannot inspect or a client cannot read.

    - A ``Content-Encoding`` other than ``identity``: the gateway asked for ``identity`` (it
      must read the answer; a compressed body would also hide ``input_required`` from the scan).
    - A 2xx answer that is neither ``application/json`` nor ``text/event-stream``: the only two
      a 2026-07-28 server may answer a request with (an HTML page from a misrouted proxy, a
      ``text/plain`` body a lenient client might still parse as JSON).
    - A 2xx status other than 200: a request is answered with 200 (202 means "accepted, no
      response", and clients stop reading there: the call would never end).
    Non-2xx answers of other types pass (a 401 page, a 404 from a path router): the status says
    what happened.
    """
    if content_encoding is not None:
        codings = [c.strip().lower() for c in content_encoding.split(b",") if c.strip()]
        if any(c != b"identity" for c in codings):
            return upstream_failure(
                "upstream_encoding",
                "Upstream answered with a Content-Encoding although the gateway asked for identity",
                contentEncoding=content_encoding.decode("latin-1")[:64],
            )
    if 200 < status < 300:
        error = upstream_failure(
            "upstream_status", f"Upstream answered a request with HTTP {status} instead of 200"
        )
        error.data["status"] = status
        return error
    if status == 200 and media_type(content_type) not in (JSON, SSE):
        return upstream_failure(
            "upstream_content_type",
            "Upstream answered with a content type that is neither application/json nor text/event-stream",
            contentType=content_type.decode("latin-1")[:64],
        )
    return None


def _squash(value: str) -> str:
    return "".join(c for c in value.lower() if c.isalnum())


_LOOKALIKES = {_squash(INPUT_REQUIRED), _squash(COMPLETE)}


def result_kind(result: dict[str, Any], declared: dict[str, Any]) -> str:
    """``input_required``, ``complete`` or ``extension`` for the final result of one of the three
    MRTR methods; raises a violation for anything a client could read otherwise than the gateway.

    - ``resultType`` missing (or null): ``complete``, as clients read it, unless the result
      carries the InputRequiredResult's fields, which would then reach the client unsealed and
      unchecked: refused.
    - Not a string, or a spelling of a core value that is not the value (``Input_Required``,
      ``input-required``, ``COMPLETE ``): refused. Clients must treat unknown values as invalid,
      but a lenient one that folds case would act on an unsealed state.
    - Any other string: an extension's value (tasks' ``task``); passes only when this request
      declared an extension (``clientCapabilities.extensions``), as extensions add values only
      once negotiated.
    """
    value = result.get("resultType")
    if value == INPUT_REQUIRED:
        return INPUT_REQUIRED
    if value == COMPLETE:
        return COMPLETE
    if value is None:
        if "inputRequests" in result or "requestState" in result:
            raise violation(
                "result_type",
                "a result carrying inputRequests/requestState must say resultType 'input_required'",
            )
        return COMPLETE
    if not isinstance(value, str) or _squash(value) in _LOOKALIKES:
        raise violation(
            "result_type",
            f"resultType {str(value)[:40]!r} is not a value of MCP 2026-07-28",
            resultType=str(value)[:40],
        )
    extensions = declared.get("extensions") if isinstance(declared, dict) else None
    if isinstance(extensions, dict) and extensions:
        return EXTENSION
    raise violation(
        "result_type",
        f"resultType {value[:40]!r} needs an extension this request did not declare",
        resultType=value[:40],
    )


def server_request(method: Any) -> RpcError:
    """A JSON-RPC request on a 2026-07-28 response stream. The spec forbids it (servers MUST NOT
    send requests on it; input is asked for with an InputRequiredResult), and a 2026-07-28 client
    has no way to answer it (clients MUST NOT POST responses), so the server would wait for an
    answer that never comes. The call ends here, and closing the upstream stream cancels it."""
    name = method if isinstance(method, str) else "?"
    return violation(
        "server_request",
        f"a JSON-RPC request ({name[:60]}) on a 2026-07-28 response stream; "
        "input must be asked for with an InputRequiredResult",
        method=name[:60],
    )


def after_final() -> RpcError:
    return violation("after_final", "messages after the final response (it must end the stream)")


def duplicate_keys() -> RpcError:
    return violation(
        "duplicate_keys",
        "the final response repeats a member name; parsers disagree on which one counts",
    )


def no_response(detail: str) -> RpcError:
    return upstream_failure(
        "upstream_no_response", f"Upstream sent no response for this request ({detail})"
    )


def too_large() -> RpcError:
    return upstream_failure("upstream_response_too_large", "Upstream response too large to inspect")


def garbage() -> RpcError:
    return upstream_failure("upstream_garbage", "Upstream sent a response that is not valid JSON")


def final_response_timeout(seconds: float) -> RpcError:
    return upstream_failure(
        "upstream_timeout", f"Upstream sent no final response within {seconds:g} s", status=504
    )


#: ``\u00XX`` escapes of ASCII ``@``..``DEL`` (letters and ``_`` among them). Serializers escape
#: control characters and non-ASCII, never plain letters; an escaped letter spells a word the
#: byte scan for ``input_required`` would miss.
_LETTER_ESCAPE = re.compile(rb"\\u00[4-7][0-9a-fA-F]")
_LETTER_ESCAPE_STR = re.compile(r"\\u00[4-7][0-9a-fA-F]")


def may_say_input_required(payload: bytes) -> bool:
    """Cheap test for a body of another method: could it hold ``input_required``?"""
    return b"input_required" in payload or (
        b"\\u00" in payload and _LETTER_ESCAPE.search(payload) is not None
    )


def may_say_input_required_str(data: str) -> bool:
    return "input_required" in data or (
        "\\u00" in data and _LETTER_ESCAPE_STR.search(data) is not None
    )


def may_name(payload: bytes, *needles: bytes) -> bool:
    """Cheap test before a parse: could ``payload`` hold one of ``needles`` (quoted JSON member
    names, ``b'"uri"'``) once unescaped? True when one is there as written, or when some ASCII
    letter is written as an escape (``"\\u0075ri"`` is ``"uri"`` to every parser). A pre-check
    may only ever skip work that is safe to skip: whatever it lets through is parsed."""
    return any(needle in payload for needle in needles) or (
        b"\\u00" in payload and _LETTER_ESCAPE.search(payload) is not None
    )


def may_name_str(data: str, *needles: str) -> bool:
    """:func:`may_name` for text (an SSE event's data)."""
    return any(needle in data for needle in needles) or (
        "\\u00" in data and _LETTER_ESCAPE_STR.search(data) is not None
    )


def may_repeat_keys(payload: bytes | str) -> bool:
    """Cheap test for a final response whose ``resultType`` might be read differently by
    another parser: the name twice, or letters escaped. Only then is the strict parse paid."""
    if isinstance(payload, str):
        return payload.count('"resultType"') > 1 or (
            "\\u00" in payload and _LETTER_ESCAPE_STR.search(payload) is not None
        )
    return payload.count(b'"resultType"') > 1 or (
        b"\\u00" in payload and _LETTER_ESCAPE.search(payload) is not None
    )


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def has_duplicate_keys(payload: bytes | str) -> bool:
    """True when some object in the document names a member twice (after unescaping)."""
    import json

    try:
        json.loads(payload, object_pairs_hook=_no_duplicates)
    except _Duplicate:
        return True
    except ValueError:
        return False  # not JSON at all: the caller's parser has said so already
    return False
