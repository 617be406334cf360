"""A JWK Set fetched over HTTP: cached, refreshed on an unknown ``kid`` at a bounded rate.

Behaviour, in order of importance:

- Keys are cached. A token whose ``kid`` is unknown triggers a refresh, but refresh attempts
  (successful or not) happen at most once per ``min_refresh_interval`` seconds, so a stream of
  tokens with made-up key ids cannot turn the gateway into a load generator against the
  authorization server. Concurrent requests share one fetch.
- The cache is also refreshed when it is older than ``max_age`` (rotation without new ``kid``).
- When the endpoint is down, the keys already cached keep working. Only a token that needs a key
  the gateway does not have, while the last attempt failed, gets :class:`KeysUnavailable`
  (a 503 for the client: "try again", not "your token is bad").
- Each fetch is bounded: one overall deadline, a maximum response size, no redirects, and
  status 200 with a JSON object holding ``keys`` required. A bad response never replaces good keys.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp_edge.auth.keys import (
    KeyNotFound,
    KeysUnavailable,
    VerificationKey,
    key_from_jwk,
    select_key,
)
from mcp_edge.core.urls import redact

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("mcp_edge.auth.jwks")

#: Makes the HTTP client the key source fetches with (aiohttp, the gateway's library off the hot
#: path: see mcp_edge.server.clients, loaded with the first fetch). Created on first use, inside
#: the running event loop.
HttpClientFactory = Callable[[], Any]

DEFAULT_MIN_REFRESH_INTERVAL = 30.0
DEFAULT_MAX_AGE = 300.0
DEFAULT_TIMEOUT = 5.0
DEFAULT_MAX_BYTES = 256 * 1024
#: A JWK Set with more members than this is refused (keeps per-fetch work bounded).
MAX_KEYS = 100


class JwksFetchError(Exception):
    """One fetch failed; the message is safe to log."""


def parse_jwks(body: bytes) -> tuple[VerificationKey, ...]:
    """The usable signature keys of a JWK Set document. Unusable members are skipped (logged)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise JwksFetchError("response is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise JwksFetchError("response is not a JWK Set (no 'keys' array)")
    members = doc["keys"]
    if len(members) > MAX_KEYS:
        raise JwksFetchError(f"JWK Set has {len(members)} keys, more than {MAX_KEYS}")
    keys: list[VerificationKey] = []
    for index, member in enumerate(members):
        try:
            keys.append(key_from_jwk(member))
        except ValueError as exc:
            kid = member.get("kid") if isinstance(member, dict) else None
            log.info("jwks: skipping key %d (kid=%r): %s", index, kid, exc)
    return tuple(keys)


def default_http_client(timeout: float = DEFAULT_TIMEOUT) -> aiohttp.ClientSession:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=4),
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": "mcp-edge-jwks"},
        auto_decompress=False,  # the size limit bounds what is read (no decompression bombs)
        trust_env=True,  # the host's proxy settings, as for any outbound fetch
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class JwksKeySource:
    """Verification keys from a JWKS URL. One instance per URL, shared by all routes."""

    def __init__(
        self,
        url: str,
        *,
        http_client_factory: HttpClientFactory | None = None,
        min_refresh_interval: float = DEFAULT_MIN_REFRESH_INTERVAL,
        max_age: float = DEFAULT_MAX_AGE,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._factory = http_client_factory or (lambda: default_http_client(timeout))
        self._client: aiohttp.ClientSession | None = None
        self._min_interval = min_refresh_interval
        self._max_age = max_age
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._clock = clock
        self._keys: tuple[VerificationKey, ...] = ()
        self._fetched_at: float | None = None  # last successful fetch
        self._attempted_at: float | None = None  # last attempt, successful or not
        self._last_error: str | None = None
        self._lock = asyncio.Lock()
        #: Number of fetch attempts made (for tests and metrics).
        self.fetch_count = 0

    # -------------------------------------------------------------- public

    @property
    def keys(self) -> tuple[VerificationKey, ...]:
        return self._keys

    @property
    def healthy(self) -> bool:
        """True when keys are cached and the last attempt succeeded."""
        return bool(self._keys) and self._last_error is None

    async def get_key(self, kid: str | None, alg: str) -> VerificationKey:
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at >= self._max_age:
            await self.refresh()
        try:
            return select_key(self._keys, kid, alg)
        except KeyNotFound:
            pass
        # Unknown key: maybe the authorization server rotated. Refresh if the rate allows.
        await self.refresh()
        try:
            return select_key(self._keys, kid, alg)
        except KeyNotFound:
            if self._last_error is not None:
                raise KeysUnavailable(self._last_error) from None
            raise

    async def refresh(self, *, force: bool = False) -> bool:
        """Fetch the key set unless an attempt was made less than ``min_refresh_interval`` ago.

        Returns True when a fetch happened and succeeded. Never raises for fetch problems.
        """
        if not force and self._too_soon():
            return False
        async with self._lock:
            # Another task may have fetched while this one waited for the lock.
            if not force and self._too_soon():
                return False
            self._attempted_at = self._clock()
            self.fetch_count += 1
            try:
                keys = await self._fetch()
            except JwksFetchError as exc:
                self._last_error = f"JWKS fetch from {redact(self.url)} failed: {exc}"
                if self._keys:
                    log.warning("%s; keeping %d cached key(s)", self._last_error, len(self._keys))
                else:
                    log.warning("%s; no keys cached", self._last_error)
                return False
            if self._last_error is not None:
                log.info("jwks: %s reachable again (%d key(s))", redact(self.url), len(keys))
            self._keys = keys
            self._fetched_at = self._clock()
            self._last_error = None
            return True

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # -------------------------------------------------------------- internals

    def _too_soon(self) -> bool:
        return (
            self._attempted_at is not None
            and self._clock() - self._attempted_at < self._min_interval
        )

    async def _fetch(self) -> tuple[VerificationKey, ...]:
        import aiohttp

        if self._client is None:
            self._client = self._factory()
        try:
            async with asyncio.timeout(self._timeout):
                body = await self._download(self._client)
        except TimeoutError:
            raise JwksFetchError(f"no complete answer within {self._timeout:g}s") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise JwksFetchError(type(exc).__name__) from None
        return parse_jwks(body)

    async def _download(self, client: aiohttp.ClientSession) -> bytes:
        # Ask for an uncompressed body so the size limit bounds memory (no decompression bombs).
        headers = {
            "Accept": "application/jwk-set+json, application/json",
            "Accept-Encoding": "identity",
        }
        async with client.get(self.url, headers=headers, allow_redirects=False) as response:
            if response.status != 200:
                raise JwksFetchError(f"HTTP {response.status}")
            if response.headers.get("content-encoding", "identity").strip().lower() not in (
                "identity",
                "",
            ):
                raise JwksFetchError("response is compressed although identity was requested")
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
                raise JwksFetchError(f"response larger than {self._max_bytes} bytes")
            body = bytearray()
            async for chunk in response.content.iter_any():
                body += chunk
                if len(body) > self._max_bytes:
                    raise JwksFetchError(f"response larger than {self._max_bytes} bytes")
            return bytes(body)
