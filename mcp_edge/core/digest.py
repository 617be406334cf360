"""A canonical digest of what a request asks for, which sealed state is bound to."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785


def canonical_json(doc: Any) -> bytes:
    """RFC 8785 canonical JSON (or a deterministic fallback, in a separate domain)."""
    try:
        return rfc8785.dumps(doc)
    except (rfc8785.CanonicalizationError, ValueError, TypeError):
        # Numbers outside the I-JSON range: still deterministic, in a separate domain.
        text = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return b"\x00" + text.encode("utf-8", "surrogatepass")


def salient(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parts of a request that define it: method, target, arguments (never ``_meta`` or the
    MRTR retry fields). A missing ``arguments`` counts as ``{}``."""
    if method in ("tools/call", "prompts/get"):
        args = params.get("arguments")
        return {
            "method": method,
            "name": params.get("name"),
            "arguments": {} if args is None else args,
        }
    if method == "resources/read":
        return {"method": method, "uri": params.get("uri")}
    return {"method": method}


def request_digest(method: str, params: dict[str, Any]) -> bytes:
    """SHA-256 over the RFC 8785 canonical JSON of :func:`salient`."""
    return hashlib.sha256(canonical_json(salient(method, params))).digest()
