"""The package's optional parts (its extras): what each brings, and the one line that names the
extra a feature needs when this installation lacks it.

``pip install mcp-edge`` is the library (``mcp_edge.Edge``) and the ``mcp-edge`` command's
offline commands; a feature whose library is an extra imports it when a configuration uses the
feature, and a configuration that uses it without the extra is refused at start, naming it.
"""

from __future__ import annotations

import importlib.util

#: Each extra and the modules it installs (pyproject.toml ``[project.optional-dependencies]``):
#: ``serve``, ``mcp-edge serve``'s own server; ``redis``, the shared store; ``tracing``,
#: OpenTelemetry; ``cel``, policy rules; ``identity``, the OAuth client of
#: ``upstream_auth.token_exchange`` / ``oauth``; ``demo``, the MCP SDK of ``mcp-edge demo``'s server.
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("uvicorn", "httptools", "uvloop"),
    "redis": ("redis",),
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "cel": ("cel",),
    "identity": ("authlib", "httpx2"),
    "demo": ("mcp",),
}


class MissingExtra(ValueError):
    """A feature was asked for whose extra this installation lacks (the message names it)."""


def installed(extra: str) -> bool:
    """Whether every module of ``extra`` can be imported (nothing is imported to tell)."""
    for name in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):  # a parent package missing, or a broken install
            return False
    return True


def message(extra: str, what: str) -> str:
    """The one line: ``what`` needs ``extra``, and how to install it."""
    return f"{what} needs mcp-edge[{extra}], which this installation lacks: pip install 'mcp-edge[{extra}]'"


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` (a ValueError, so a configuration validator reports it at the
    setting) when ``extra`` is not installed."""
    if not installed(extra):
        raise MissingExtra(message(extra, what))
