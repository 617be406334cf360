"""Replica-to-replica forwarding of retries for parked calls.

A parked call lives in one replica; its sealed state names that replica's address. A retry that
lands elsewhere is handed to the owner over HTTP, and nothing else ever is:

* only retries whose state the forwarding replica's guard has verified (integrity, expiry,
  principal, request binding) get here, and only to the address sealed in that state, which a
  gateway put there;
* both the forwarded request and the owner's answer are sealed with the key ring (AES-256-GCM,
  their own associated data, a 30-second expiry): the owner acts only on payloads made by a
  holder of the ring, and nothing readable crosses the network between replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from gateway.core.seal import KeyRing, open_json_blob, seal_blob

FORWARD_PATH = "/.mcp-edge/forward"
PURPOSE = "mcpef1"
#: How long a sealed forward (either direction) stays valid.
FORWARD_TTL_SECONDS = 30
#: Largest forwarded payload accepted (a retry is at most a request body plus a state).
MAX_FORWARD_CHARS = 12 * 1024 * 1024


def seal_payload(ring: KeyRing, payload: dict[str, Any], *, now: float | None = None) -> str:
    doc = {**payload, "exp": int((now if now is not None else time.time()) + FORWARD_TTL_SECONDS)}
    return seal_blob(ring, PURPOSE, orjson.dumps(doc))


def open_payload(ring: KeyRing, token: Any, *, now: float | None = None) -> dict[str, Any] | None:
    """The payload of a sealed forward, or None if it is not one (or has expired)."""
    doc = open_json_blob(ring, PURPOSE, token, max_chars=MAX_FORWARD_CHARS)
    if doc is None or not isinstance(doc.get("exp"), int):
        return None
    if (now if now is not None else time.time()) > doc["exp"]:
        return None
    return doc


class Forwarder:
    def __init__(self, ring: KeyRing, client: Callable[[], aiohttp.ClientSession], *,
                 timeout: float = 300.0) -> None:  # fmt: skip
        self.ring = ring
        self._client = client
        self.timeout = aiohttp.ClientTimeout(total=timeout, connect=5.0)

    async def forward(self, owner: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Send a retry to the replica at ``owner``; its answer, or None if it cannot be reached
        (or does not answer with a sealed reply)."""
        body = seal_payload(self.ring, payload)
        try:
            async with self._client().post(
                owner.rstrip("/") + FORWARD_PATH, data=body.encode("ascii"),
                headers={"Content-Type": "text/plain"}, timeout=self.timeout, allow_redirects=False,
            ) as response:  # fmt: skip
                if response.status != 200:
                    return None
                text = (await response.content.read(MAX_FORWARD_CHARS + 1)).decode("ascii", "replace")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            return None
        return open_payload(self.ring, text)
