"""Authentication settings (the ``auth:`` section and per-route ``auth:``/``upstream_auth:``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: ``none`` means not configured: the gateway then refuses to start unless ``--anonymous``.
    mode: Literal["none", "anonymous", "jwt", "trusted_header"] = "none"
    authorization_servers: list[str] = Field(default_factory=list)
    scopes_supported: list[str] = Field(default_factory=list)


class RouteAuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    required_scopes: list[str] = Field(default_factory=list)
    audience: list[str] | None = None


class UpstreamCredentialConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    forward_client_token: bool = False
    principal_header: str | None = None
