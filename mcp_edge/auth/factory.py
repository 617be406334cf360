"""The one way authenticators (and a route's upstream credentials) are built.

:func:`build_authenticator` turns the ``auth:`` section into the authenticator of one audience;
:func:`build_route_authenticator` is what the gateway calls for each route: the cross-checks with
the route's ``auth:`` and ``upstream_auth:``, the route's audience (its canonical URL unless
configured) and metadata URL, then :func:`build_authenticator`. Errors are a
:class:`~mcp_edge.sections.ConfigError` naming the route.

``config`` is anything with ``auth``, ``gateway.public_url`` and ``public_base()`` (the root
configuration); ``route`` anything with ``name``, ``path``, ``auth`` and ``upstream_auth``. All
routes share one key source, hence one JWKS cache, held by ``config.auth``; call
``await config.auth.aclose()`` at shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcp_edge.auth.base import AnonymousAuthenticator, Authenticator
from mcp_edge.auth.challenge import Challenger
from mcp_edge.auth.config import (
    AuthConfig,
    AuthSetupError,
    HttpClientFactory,
    RouteAuthConfig,
    UpstreamCredentialConfig,
)
from mcp_edge.auth.metadata import canonical_resource_url, resource_metadata_url
from mcp_edge.auth.trusted_header import TrustedHeaderAuthenticator
from mcp_edge.auth.upstream import UpstreamCredentials, read_secret
from mcp_edge.sections import ConfigError

if TYPE_CHECKING:
    from mcp_edge.auth.keys import KeySource

log = logging.getLogger("mcp_edge.auth")


#: What a gateway without an authentication mode says (it refuses to start).
NO_MODE = (
    "auth: no authentication configured; pass --anonymous (or set auth.mode: anonymous) to accept "
    "unauthenticated callers as one shared principal"
)


def _config_error(message: str) -> Exception:
    return ConfigError(message)


def route_resource(config: Any, route: Any) -> str:
    """The route's canonical URL: ``gateway.public_url`` + route path."""
    return canonical_resource_url(config.public_base(), route.path)


def route_audience(config: Any, route: Any) -> list[str]:
    """Accepted ``aud`` values: route override, else ``auth.jwt.audience``, else the route URL."""
    if route.auth.audience is not None:
        return list(route.auth.audience)
    jwt_cfg = config.auth.jwt
    if jwt_cfg is not None and jwt_cfg.audience is not None:
        return list(jwt_cfg.audience)
    return [route_resource(config, route)]


def route_metadata_url(config: Any, route: Any) -> str | None:
    """The route's ``resource_metadata`` URL, or None when no metadata is published."""
    if not config.auth.publishes_metadata():
        return None
    return resource_metadata_url(config.public_base(), route.path)


def build_route_authenticator(
    config: Any, route: Any, *, http_client_factory: HttpClientFactory | None = None
) -> Authenticator:
    """The authenticator of one route. Raises ConfigError with an operator-facing message."""
    where = f"routes[{route.name}]"
    if config.auth.mode == "none":
        raise ConfigError(NO_MODE)
    gateway_section = getattr(config, "gateway", None)
    if config.auth.mode == "jwt" and getattr(gateway_section, "public_url", "") is None:
        log.warning(
            "auth: gateway.public_url is not set; tokens must then be issued for %s, "
            "which is only right for local testing",
            route_resource(config, route),
        )
    try:
        check_route_auth(config.auth, route.auth, route.upstream_auth)
        return build_authenticator(
            config.auth,
            audience=route_audience(config, route),
            required_scopes=route.auth.required_scopes,
            resource_metadata_url=route_metadata_url(config, route),
            http_client_factory=http_client_factory,
        )
    except ValueError as exc:  # AuthSetupError included
        raise _config_error(f"{where}: {exc}") from None


def build_route_upstream_credentials(
    config: Any, route: Any, authenticator: Authenticator
) -> UpstreamCredentials:
    """The route's upstream header policy. Its ``drop_headers`` include the authenticator's
    consumed headers. Raises ConfigError."""
    try:
        return build_upstream_credentials(
            route.upstream_auth, consumed_headers=authenticator.consumed_headers
        )
    except ValueError as exc:
        raise _config_error(f"routes[{route.name}]: {exc}") from None


def check_route_auth(
    auth: AuthConfig, route_auth: RouteAuthConfig, upstream: UpstreamCredentialConfig
) -> None:
    """Cross-checks between the global mode and one route's settings (ValueError if wrong)."""
    if route_auth.required_scopes:
        if auth.mode == "anonymous":
            raise ValueError("auth.required_scopes cannot be enforced in anonymous mode")
        if (
            auth.mode == "trusted_header"
            and auth.trusted_header
            and not auth.trusted_header.scopes_header
        ):
            raise ValueError(
                "auth.required_scopes in trusted_header mode needs auth.trusted_header.scopes_header"
            )
    if route_auth.audience is not None and auth.mode != "jwt":
        raise ValueError("auth.audience only applies in jwt mode")
    if upstream.needs_client_token() and auth.mode != "jwt":
        raise ValueError(
            f"{upstream.client_token_use()} needs auth.mode jwt (there is no validated token otherwise)"
        )


def build_authenticator(
    auth: AuthConfig,
    *,
    audience: Sequence[str],
    required_scopes: Iterable[str] = (),
    resource_metadata_url: str | None = None,
    http_client_factory: HttpClientFactory | None = None,
    key_source: KeySource | None = None,
    environ: Mapping[str, str] | None = None,
) -> Authenticator:
    """The authenticator for one route.

    ``audience``: accepted ``aud`` values (normally ``[canonical route URL]``).
    ``resource_metadata_url``: this route's metadata URL for ``WWW-Authenticate`` (None if not
    published). ``key_source``: share one across routes; default ``auth.key_source()``, which
    is itself shared. Raises AuthSetupError for problems found while loading keys or secrets.
    """
    required = list(required_scopes)
    scope_hint = required or list(auth.scopes_supported)
    challenger = Challenger(resource_metadata=resource_metadata_url, scope_hint=scope_hint)
    if auth.mode == "none":
        raise AuthSetupError(NO_MODE)
    if auth.mode == "anonymous":
        if required:
            raise AuthSetupError("required scopes cannot be enforced in anonymous mode")
        return AnonymousAuthenticator()
    if auth.mode == "jwt":
        assert auth.jwt is not None
        jwt_cfg = auth.jwt
        source = key_source or auth.key_source(http_client_factory, environ=environ)
        from mcp_edge.auth.jwt_bearer import JwtBearerAuthenticator  # (PyJWT: jwt mode only)

        try:
            return JwtBearerAuthenticator(
                key_source=source,
                issuer=jwt_cfg.issuer,
                audience=list(audience),
                algorithms=jwt_cfg.algorithms,
                leeway=jwt_cfg.leeway_seconds,
                required_scopes=required,
                resource_metadata_url=resource_metadata_url,
                scope_hint=scope_hint,
                token_types=jwt_cfg.token_types,
                max_token_bytes=jwt_cfg.max_token_bytes,
            )
        except ValueError as exc:
            raise AuthSetupError(f"auth.jwt: {exc}") from None
    assert auth.trusted_header is not None
    th = auth.trusted_header
    secret: bytes | None = None
    if th.secret_header is not None:
        try:
            value = read_secret(
                env=th.secret_env,
                file=th.secret_file,
                what="auth.trusted_header secret",
                environ=environ,
            )
            secret = value.encode("latin-1")
        except ValueError as exc:
            raise AuthSetupError(str(exc)) from None
    try:
        return TrustedHeaderAuthenticator(
            header=th.header,
            trusted_networks=th.trusted_cidrs,
            secret_header=th.secret_header,
            secret=secret,
            require_both=th.require_both,
            scopes_header=th.scopes_header,
            id_prefix=th.id_prefix,
            required_scopes=required,
            challenger=challenger,
        )
    except ValueError as exc:
        raise AuthSetupError(f"auth.trusted_header: {exc}") from None


def build_upstream_credentials(
    upstream: UpstreamCredentialConfig,
    *,
    consumed_headers: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> UpstreamCredentials:
    """The route's upstream header policy; reads the static credential now (once)."""
    static: tuple[str, str] | None = None
    if upstream.has_static_credential():
        try:
            value = read_secret(
                env=upstream.value_env,
                file=upstream.value_file,
                what="upstream_auth credential",
                environ=environ,
            )
        except ValueError as exc:
            raise AuthSetupError(str(exc)) from None
        name = upstream.credential_header()
        scheme = (
            upstream.scheme
            if upstream.scheme is not None
            else ("Bearer" if name.lower() == "authorization" else "")
        )
        static = (name, f"{scheme} {value}" if scheme else value)
    try:
        return UpstreamCredentials(
            consumed_headers=consumed_headers,
            static_header=static,
            forward_client_token=upstream.forward_client_token,
            principal_header=upstream.principal_header,
            principal_value=upstream.principal_value,
            bearer_from_context=getattr(upstream, "identity", None) is not None,
        )
    except ValueError as exc:
        raise AuthSetupError(f"upstream_auth: {exc}") from None
