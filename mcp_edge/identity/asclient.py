"""The gateway as an OAuth client of one authorization server: its metadata (RFC 8414, OpenID
Connect discovery as the fallback), and token requests with the gateway's client authentication
(``client_secret_basic``, ``client_secret_post``, ``private_key_jwt`` by Authlib's client auth).

API (stable; the token exchange and the consent flow both use it)::

    server = AuthorizationServer(section)            # secrets and keys read now (ValueError)
    meta = await server.metadata()                   # ServerMetadata (cached), or ASUnavailable
    doc = await server.token_request([("grant_type", "..."), ...])   # the answer's JSON object
    await server.aclose()

A token request's answer is an OAuth JSON object (HTTP 200), or :class:`ASRefused` (the server
answered an OAuth error: its ``error`` code, ``error_description``, HTTP status), or
:class:`ASUnavailable` (no usable answer: unreachable, too slow, a redirect, a 5xx or 429,
not JSON, too large). Every request is bounded: ``timeout_seconds`` for the whole exchange
(a slow drip included), ``max_response_bytes`` read at most, no redirects followed. Nothing
said here ever holds the client's secret, a token or an assertion: ``detail`` and
``description`` are safe to log (the description is the server's text, cut and made printable).

Authlib and httpx2 (the ``identity`` extra) are imported when the first server is built.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from mcp_edge import extras
from mcp_edge.auth.upstream import read_secret
from mcp_edge.identity.config import AuthorizationServerConfig, check_named_url

FORM = "application/x-www-form-urlencoded"
MISSING_EXTRA = extras.message(
    "identity", "upstream_auth (the gateway as an authorization server's client)"
)


class ASUnavailable(Exception):
    """No usable answer from the authorization server; ``detail`` says why (safe to log),
    ``kind`` in a word: unreachable, timeout, too_large, status (5xx, 429, a redirect),
    bad_answer (not JSON, wrong content type, unusable metadata)."""

    def __init__(self, detail: str, kind: str = "bad_answer") -> None:
        super().__init__(detail)
        self.detail = detail
        self.kind = kind


class ASRefused(Exception):
    """The authorization server answered an OAuth error (RFC 6749 §5.2)."""

    def __init__(self, error: str, description: str, status: int) -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description
        self.status = status


def printable(text: Any, limit: int = 200) -> str:
    """Text from the server as one printable line, cut at ``limit`` characters."""
    value = text if isinstance(text, str) else str(text)
    cleaned = "".join(ch if 0x20 <= ord(ch) < 0x7F else "?" for ch in value[: limit * 2])
    return cleaned[:limit]


#: What a token request carries that is a secret: an answer echoing any of it (a server's
#: ``error_description`` saying "invalid refresh token: <it>") has it cut out before anything
#: of the answer is logged or shown.
SECRET_PARAMS = frozenset(
    {
        "subject_token",
        "actor_token",
        "code",
        "code_verifier",
        "refresh_token",
        "token",
        "client_secret",
        "client_assertion",
        "assertion",
    }
)
REDACTED = "[redacted]"


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each secret replaced (before it is cut or shown)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _error_code(value: Any) -> str:
    """An OAuth ``error`` code as the server gave it, if it is one (RFC 6749's charset)."""
    if isinstance(value, str) and 0 < len(value) <= 64:
        if all(0x20 <= ord(ch) <= 0x7E and ch not in '"\\' for ch in value):
            return value
    return "invalid_error_code"


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """What the gateway reads of a server's metadata document."""

    issuer: str | None
    token_endpoint: str
    #: ``grant_types_supported`` as advertised; None when the document does not say.
    grant_types: tuple[str, ...] | None = None
    auth_methods: tuple[str, ...] | None = None
    #: Where it came from (the well-known URL), or None when configured.
    source: str | None = None
    #: The whole document (bounded), for the other flows (authorization endpoint, PKCE...).
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def advertises(self, grant: str) -> bool | None:
        """Whether ``grant_types_supported`` lists it (None: the server does not say)."""
        return None if self.grant_types is None else grant in self.grant_types


def metadata_urls(issuer: str) -> list[str]:
    """RFC 8414 §3.1 (the well-known part between host and path), then OpenID Connect
    Discovery 1.0 §4 (appended to the issuer)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    rfc8414 = urlunsplit(
        (parts.scheme, parts.netloc, "/.well-known/oauth-authorization-server" + path, "", "")
    )
    oidc = urlunsplit(
        (parts.scheme, parts.netloc, path + "/.well-known/openid-configuration", "", "")
    )
    return [rfc8414, oidc]


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value[:256])
    return None


def parse_metadata(
    doc: Any, *, issuer: str | None, source: str | None, allow_http: bool
) -> ServerMetadata:
    """Check a metadata document: an object whose ``issuer`` is exactly the configured one
    (RFC 8414 §3.3: otherwise it must not be used) with a usable ``token_endpoint``."""
    if not isinstance(doc, dict):
        raise ASUnavailable("the metadata is not a JSON object")
    if issuer is not None and doc.get("issuer") != issuer:
        raise ASUnavailable(
            f"the metadata names issuer {printable(doc.get('issuer'), 120)!r}, not the configured one"
        )
    endpoint = doc.get("token_endpoint")
    if not isinstance(endpoint, str):
        raise ASUnavailable("the metadata has no token_endpoint")
    try:
        check_named_url(
            endpoint, "token_endpoint", named_by=source or issuer, allow_http=allow_http
        )
    except ValueError as exc:
        raise ASUnavailable(f"the metadata's {exc}") from None
    return ServerMetadata(
        issuer=issuer,
        token_endpoint=endpoint,
        grant_types=_strings(doc.get("grant_types_supported")),
        auth_methods=_strings(doc.get("token_endpoint_auth_methods_supported")),
        source=source,
        document=doc,
    )


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


class AuthorizationServer:
    """One authorization server, as the gateway's OAuth client (see the module's docstring)."""

    def __init__(
        self,
        section: AuthorizationServerConfig,
        *,
        environ: Mapping[str, str] | None = None,
        transport: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            import httpx2
            from authlib.oauth2.auth import ClientAuth
        except ImportError:  # pragma: no cover - the extra is in the dev group
            raise ValueError(MISSING_EXTRA) from None
        self.section = section
        self.clock = clock
        client = section.client
        self.client_id = client.client_id
        self._client_auth_cls = ClientAuth
        self._assertion: Any = None
        what = f"upstream_auth client {client.client_id!r}"
        if client.method == "private_key_jwt":
            pem = _read_pem(client.private_key_env, client.private_key_file, what, environ)
            self._credential: Any = _private_key(pem, client.algorithm, what)
            from authlib.oauth2.rfc7523 import PrivateKeyJWT

            headers = {"kid": client.key_id} if client.key_id else None
            self._assertion = PrivateKeyJWT(alg=client.algorithm, headers=headers)
        else:
            self._credential = read_secret(
                env=client.secret_env,
                file=client.secret_file,
                what=f"{what} secret",
                environ=environ,
            )
        self._http = httpx2.AsyncClient(
            transport=transport,
            timeout=httpx2.Timeout(section.timeout_seconds),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": "mcp-edge", "Accept-Encoding": "identity"},
        )
        self._metadata: ServerMetadata | None = None
        self._metadata_until = 0.0
        self._metadata_retry_at = 0.0
        self._metadata_lock = asyncio.Lock()
        if section.issuer is None:
            assert section.token_endpoint is not None
            self._metadata = ServerMetadata(issuer=None, token_endpoint=section.token_endpoint)
            self._metadata_until = float("inf")

    def __repr__(self) -> str:  # the credential never shows
        return f"AuthorizationServer(issuer={self.section.issuer!r}, client_id={self.client_id!r})"

    # ------------------------------------------------------------------ HTTP

    async def _request(
        self, method: str, url: str, *, body: bytes | None = None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """One bounded request: status, media type and the whole body (at most
        ``max_response_bytes``), within ``timeout_seconds`` from first byte sent to last read."""
        import httpx2

        limit = self.section.max_response_bytes
        try:
            async with asyncio.timeout(self.section.timeout_seconds):
                async with self._http.stream(method, url, content=body, headers=headers) as resp:
                    length = resp.headers.get("content-length")
                    if length is not None and length.isdigit() and int(length) > limit:
                        raise ASUnavailable(f"the answer is larger than {limit} bytes", "too_large")
                    chunks, size = [], 0
                    async for chunk in resp.aiter_raw():
                        size += len(chunk)
                        if size > limit:
                            raise ASUnavailable(
                                f"the answer is larger than {limit} bytes", "too_large"
                            )
                        chunks.append(chunk)
                    return (
                        resp.status_code,
                        media_type(resp.headers.get("content-type")),
                        b"".join(chunks),
                    )
        except TimeoutError:
            raise ASUnavailable(
                f"no whole answer within {self.section.timeout_seconds:g} s", "timeout"
            ) from None
        except httpx2.TimeoutException:
            raise ASUnavailable(
                f"no answer within {self.section.timeout_seconds:g} s", "timeout"
            ) from None
        except httpx2.HTTPError as exc:
            raise ASUnavailable(f"unreachable ({type(exc).__name__})", "unreachable") from None
        except OSError as exc:
            raise ASUnavailable(
                f"unreachable ({exc.strerror or type(exc).__name__})", "unreachable"
            ) from None

    # ------------------------------------------------------------------ metadata

    async def metadata(self) -> ServerMetadata:
        """The server's metadata: discovered from ``issuer`` (cached for
        ``metadata_cache_seconds``; a failed refresh keeps the last good document and is tried
        again after 30 s), or the configured ``token_endpoint``."""
        now = self.clock()
        if self._metadata is not None and now < self._metadata_until:
            return self._metadata
        async with self._metadata_lock:
            now = self.clock()
            if self._metadata is not None and (
                now < self._metadata_until or now < self._metadata_retry_at
            ):
                return self._metadata
            try:
                found = await self.discover()
            except ASUnavailable:
                if self._metadata is None:
                    raise
                self._metadata_retry_at = now + 30.0
                return self._metadata
            if self.section.token_endpoint is not None:  # configured: it wins
                found = ServerMetadata(
                    issuer=found.issuer,
                    token_endpoint=self.section.token_endpoint,
                    grant_types=found.grant_types,
                    auth_methods=found.auth_methods,
                    source=found.source,
                    document=found.document,
                )
            self._metadata = found
            self._metadata_until = now + self.section.metadata_cache_seconds
            return found

    async def discover(self) -> ServerMetadata:
        """Fetch the metadata now (``check-config --probe``), from each well-known URL in turn."""
        issuer = self.section.issuer
        if issuer is None:
            raise ASUnavailable("no issuer configured: nothing to discover")
        problems, kind = [], "bad_answer"
        for url in metadata_urls(issuer):
            try:
                status, ctype, body = await self._request(
                    "GET", url, headers={"Accept": "application/json"}
                )
                if status != 200:
                    raise ASUnavailable(f"HTTP {status}")
                if ctype != "application/json":
                    raise ASUnavailable(f"content type {printable(ctype, 60) or '(none)'}")
                try:
                    doc = orjson.loads(body)
                except orjson.JSONDecodeError:
                    raise ASUnavailable("not JSON") from None
                return parse_metadata(
                    doc, issuer=issuer, source=url, allow_http=self.section.allow_http
                )
            except ASUnavailable as exc:
                problems.append(f"{url}: {exc.detail}")
                kind = exc.kind
        raise ASUnavailable("no usable metadata (" + "; ".join(problems) + ")", kind)

    # ------------------------------------------------------------------ tokens

    async def token_request(self, form: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """POST ``form`` (repeated names kept) to the token endpoint with the client's
        authentication; the answer's JSON object, or ASRefused / ASUnavailable (whose texts
        never hold what the request carried that is a secret, echoed or not)."""
        endpoint = (await self.metadata()).token_endpoint
        status, ctype, raw = await self._authenticated_post(endpoint, endpoint, form)
        secrets = [value for name, value in form if name in SECRET_PARAMS]
        if isinstance(self._credential, str):
            secrets.append(self._credential)
        return interpret_token_answer(status, ctype, raw, secrets=secrets)

    async def _authenticated_post(
        self, endpoint: str, token_endpoint: str, form: Sequence[tuple[str, str]]
    ) -> tuple[int, str, bytes]:
        from authlib.common.urls import url_encode

        headers = {"Content-Type": FORM, "Accept": "application/json"}
        method = self.section.client.method
        auth_method: Any = self._assertion if self._assertion is not None else method
        if self._assertion is not None:
            self._assertion.token_endpoint = token_endpoint  # the assertion's audience
        auth = self._client_auth_cls(self.client_id, self._credential, auth_method)
        _, headers, body = auth.prepare("POST", endpoint, headers, url_encode(list(form)))
        return await self._request("POST", endpoint, body=body.encode("utf-8"), headers=headers)

    async def post_form(self, endpoint: str, form: Sequence[tuple[str, str]]) -> bool:
        """POST ``form`` with the client's authentication to another endpoint of this server
        (the revocation endpoint, RFC 7009): True when it answered 200. Never raises."""
        try:
            token_endpoint = (await self.metadata()).token_endpoint
            status, _, _ = await self._authenticated_post(endpoint, token_endpoint, form)
        except ASUnavailable:
            return False
        return status == 200

    async def aclose(self) -> None:
        await self._http.aclose()


def interpret_token_answer(
    status: int, ctype: str, raw: bytes, *, secrets: Sequence[str] = ()
) -> dict[str, Any]:
    """A token endpoint's answer: the JSON object of a 200, or the OAuth error of a 400/401/403
    (ASRefused); anything else is ASUnavailable. ``secrets`` (what the request carried) are cut
    out of every text taken from the answer."""
    ctype = scrub(ctype, [secret.lower() for secret in secrets])  # (the media type is lowercased)
    if status >= 500 or status == 429:
        raise ASUnavailable(f"the token endpoint answered HTTP {status}", "status")
    if 300 <= status < 400:
        raise ASUnavailable(f"the token endpoint answered a redirect (HTTP {status})", "status")
    if ctype != "application/json":
        raise ASUnavailable(
            f"the token endpoint answered HTTP {status} with content type "
            f"{printable(ctype, 60) or '(none)'}, not application/json"
        )
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ASUnavailable(f"the token endpoint answered HTTP {status} that is not JSON") from None
    if not isinstance(doc, dict):
        raise ASUnavailable("the token endpoint's answer is not a JSON object")
    if status == 200 and "error" not in doc:
        return doc
    if status in (400, 401, 403) or (status == 200 and "error" in doc):
        description, error = doc.get("error_description"), doc.get("error")
        raise ASRefused(
            _error_code(scrub(error, secrets) if isinstance(error, str) else error),
            printable(scrub(description, secrets)) if isinstance(description, str) else "",
            status,
        )
    raise ASUnavailable(f"the token endpoint answered HTTP {status}", "status")


def _read_pem(
    env: str | None, file: str | None, what: str, environ: Mapping[str, str] | None
) -> bytes:
    if file is not None:
        try:
            return Path(file).read_bytes()
        except OSError as exc:
            raise ValueError(f"{what} private key: cannot read {file}: {exc.strerror}") from None
    import os

    value = (os.environ if environ is None else environ).get(env or "")
    if not value:
        raise ValueError(f"{what} private key: environment variable {env} is not set or empty")
    return value.encode("utf-8")


def _private_key(pem: bytes, algorithm: str, what: str) -> Any:
    """The PEM private key as a JOSE key of the family ``algorithm`` needs."""
    from joserfc.jwk import ECKey, RSAKey

    family = ECKey if algorithm.startswith("ES") else RSAKey
    try:
        key = family.import_key(pem)
    except Exception:  # noqa: BLE001  (joserfc raises several kinds; the message names none of the key)
        raise ValueError(
            f"{what} private key: not a PEM {'EC' if family is ECKey else 'RSA'} private key "
            f"(algorithm {algorithm})"
        ) from None
    if not key.is_private:
        raise ValueError(f"{what} private key: the PEM holds a public key only")
    return key
