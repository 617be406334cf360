"""Replica-to-replica forwarding of retries for parked calls.

A parked call lives in one replica; its sealed state names that replica's address. A retry that
lands elsewhere is handed to the owner over HTTP, and nothing else ever is:

* only retries whose state the forwarding replica's flow middleware has verified (integrity, expiry,
  principal, request binding) get here, and only to the address sealed in that state, which a
  gateway put there;
* the forwarded request carries a sealed header (``mcp_edge.core.peer``) bound to its method,
  path and the digest of its body, valid 30 seconds and acted on once; the owner opens it before
  reading the body, and reads the body within the same bounds as a client's;
* the body and the owner's answer are sealed with the key ring too (purposes of their own; the
  answer names the request it answers): nothing readable crosses the network between replicas.

What either replica holds of the answer draws from its answer budget as kind ``forwarded``: on
the owner, the answer collected and sealed until it is sent (mcp_edge.cluster.endpoints); here,
the sealed answer as it arrives (from its ``Content-Length``, before it is read), then the
answer opened from it, until the bridge hands it to the edge. When the budget has no room, the
client gets 503 ``answer_budget`` (:class:`ReplyOverBudget` here; from the owner, its reply).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from mcp_edge.core import peer
from mcp_edge.core.seal import KeyRing, open_json_blob, seal_blob
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES, over_budget

FORWARD_PATH = "/.mcp-edge/forward"
#: The sealed body of a forwarded retry, and the owner's sealed answer.
BODY_PURPOSE = "mcpefb2"
ANSWER_PURPOSE = "mcpefa2"
#: Room for what the forward adds to the client's params (route, caller, ids, the seal).
_OVERHEAD = 16 * 1024


def body_limit(max_body_bytes: int) -> int:
    """Largest forwarded body: a retry's params are at most a client's body; sealed, base64url
    makes them a third larger."""
    return (max_body_bytes + _OVERHEAD) * 4 // 3 + 64


def answer_limit(max_inspect_bytes: int) -> int:
    """Largest sealed answer read back: the owner's answer (at most what the gateway inspects of
    an upstream answer), escaped into a JSON string, sealed."""
    return (2 * max_inspect_bytes + _OVERHEAD) * 4 // 3 + 64


class ReplyOverBudget(Exception):
    """The answer budget had no room for the owner's answer: it is not read (further)."""


def over_budget_reply(request_id: Any) -> dict[str, Any]:
    """The owner's reply when its answer budget has no room for the answer it would send."""
    error = over_budget()
    return {
        "status": error.http_status,
        "ctype": "application/json",
        "body": error.body(request_id).decode(),
        "headers": [[k, v] for k, v in error.headers.items()],
    }


def _held(n: int) -> int:
    """What ``n`` bytes held count (answers' first bytes are not counted, as at the edge)."""
    return n if n > UNCOUNTED_BYTES else 0


def seal_payload(ring: KeyRing, purpose: str, payload: dict[str, Any], *, now: float) -> str:
    doc = {**payload, "exp": int(now) + peer.TTL_SECONDS}
    return seal_blob(ring, purpose, orjson.dumps(doc))


def open_payload(
    ring: KeyRing, purpose: str, token: Any, *, now: float, max_chars: int
) -> dict[str, Any] | None:
    """The payload of a sealed forward body or answer, or None if it is not one (or has expired)."""
    doc = open_json_blob(ring, purpose, token, max_chars=max_chars)
    if doc is None or type(doc.get("exp")) is not int or now > doc["exp"]:
        return None
    return doc


class Forwarder:
    def __init__(
        self,
        ring: KeyRing,
        client: Callable[[], aiohttp.ClientSession],
        *,
        timeout: float = 300.0,
        max_answer_chars: int = answer_limit(16 * 1024 * 1024),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ring = ring
        self._client = client
        self.timeout = aiohttp.ClientTimeout(total=timeout, connect=5.0)
        self.max_answer_chars = max_answer_chars
        self.clock = clock

    def request(self, payload: dict[str, Any]) -> tuple[bytes, dict[str, str], str]:
        """The body and headers of a forward of ``payload``, and its message id."""
        now = self.clock()
        body = seal_payload(self.ring, BODY_PURPOSE, payload, now=now).encode("ascii")
        jid = peer.new_id()
        token = peer.seal_message(
            self.ring,
            peer.FORWARD,
            {"r": payload.get("route")},
            method="POST",
            path=FORWARD_PATH,
            body=body,
            now=now,
            jid=jid,
        )
        return body, {"Content-Type": "text/plain", peer.HEADER: token}, jid

    async def forward(
        self, owner: str, payload: dict[str, Any], reservation: Reservation
    ) -> dict[str, Any] | None:
        """Send a retry to the replica at ``owner``; its answer, or None if it cannot be reached
        (or does not answer with a sealed reply to this very request). What it holds of the
        answer is counted in ``reservation`` (the caller releases it once it has handed the
        answer on); :class:`ReplyOverBudget` when the budget has no room for it."""
        body, headers, jid = self.request(payload)
        try:
            async with self._client().post(
                owner.rstrip("/") + FORWARD_PATH,
                data=body,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=False,
            ) as response:
                if response.status != 200:
                    return None
                declared = response.content_length
                if declared is not None and declared > self.max_answer_chars:
                    return None
                if declared is not None and not reservation.resize(_held(declared)):
                    raise ReplyOverBudget
                chunks: list[bytes] = []
                size = 0
                # (``read(n)`` would give only what has arrived so far: read to the end.)
                async for chunk in response.content.iter_any():
                    size += len(chunk)
                    if size > self.max_answer_chars:
                        return None
                    if size > (declared or 0) and not reservation.resize(_held(size)):
                        raise ReplyOverBudget
                    chunks.append(chunk)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        sealed = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        del chunks
        text = sealed.decode("ascii", "replace")
        del sealed
        answer = open_payload(
            self.ring, ANSWER_PURPOSE, text, now=self.clock(), max_chars=self.max_answer_chars
        )
        del text  # (opened: the answer is held from here)
        if answer is None or answer.get("q") != jid:
            return None
        held = answer.get("body")
        reservation.resize(_held(len(held)) if isinstance(held, str) else 0)
        return answer


def seal_answer(
    ring: KeyRing, reply: dict[str, Any], claims: dict[str, Any], *, now: float
) -> bytes:
    """The owner's answer to the forward whose header said ``claims``."""
    return seal_payload(ring, ANSWER_PURPOSE, {**reply, "q": claims["j"]}, now=now).encode("ascii")
