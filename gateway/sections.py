"""What every configuration section is built from.

The configuration is one YAML file. Each package owns its section (a pydantic model in its
``config`` module: ``gateway.auth.config``, ``gateway.policy.config``, ``gateway.store.config``,
...); ``gateway.server.config`` only composes them into the whole and loads it (file <
environment < flags). A section forbids keys it does not know, so a typo is an error naming it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict


class ConfigError(Exception):
    """A configuration problem, phrased for the operator."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_http_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{v!r} must be an absolute http(s) URL, e.g. http://127.0.0.1:3001/mcp")
    return v
