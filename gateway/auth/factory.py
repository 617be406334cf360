"""From the gateway configuration to each route's authenticator and upstream credentials.

``config`` is the :class:`gateway.server.config.GatewayConfig` (it has ``auth``, ``routes`` and
``public_base()``); ``route`` one of its routes (``name``, ``path``, ``auth``,
``upstream_auth``). All routes share one key source, hence one JWKS cache, held by
``config.auth``; call ``await config.auth.aclose()`` at shutdown.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.auth.base import Authenticator
from gateway.auth.config import (
    AuthSetupError,
    HttpClientFactory,
    build_authenticator,
    build_upstream_credentials,
    check_route_auth,
)
from gateway.auth.metadata import canonical_resource_url, resource_metadata_url
from gateway.auth.upstream import UpstreamCredentials

log = logging.getLogger("gateway.auth")


def _config_error(message: str) -> Exception:
    try:
        from gateway.server.config import ConfigError
    except ImportError:  # pragma: no cover - the auth package used on its own
        return AuthSetupError(message)
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
