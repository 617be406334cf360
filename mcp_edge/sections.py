"""What every configuration section is built from.

The configuration is one YAML file. Each package owns its section (a pydantic model in its
``config`` module: ``mcp_edge.auth.config``, ``mcp_edge.policy.config``, ``mcp_edge.store.config``,
...); ``mcp_edge.server.config`` only composes them into the whole and loads it (file <
environment < flags). A section forbids keys it does not know, so a typo is an error naming it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from mcp_edge.core.urls import check_http_url


class ConfigError(Exception):
    """A configuration problem, phrased for the operator."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


__all__ = ["ConfigError", "Section", "check_http_url"]
