"""The ``observability:`` section of the config file (metric label bounds and optional tracing) and
the ``logging:`` section."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_edge import extras


class TracingSection(BaseModel):
    """OpenTelemetry tracing over OTLP/HTTP (protobuf). Off by default; when off, nothing of the
    OpenTelemetry SDK is imported and requests pay nothing for it."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    #: The collector's traces endpoint, e.g. ``http://otel-collector:4318/v1/traces``. Unset: the
    #: exporter's own settings (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    #: else ``http://localhost:4318/v1/traces``); headers and TLS come from ``OTEL_EXPORTER_OTLP_*``.
    endpoint: str | None = None
    #: ``service.name`` of the spans (``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` win).
    service_name: str = "mcp-edge"
    #: Share of traces started here that are recorded. A client's own sampling decision, in the
    #: ``traceparent`` it sends, is always followed.
    sample_ratio: float = Field(1.0, ge=0, le=1)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is not None and (
            urlsplit(v).scheme not in ("http", "https") or not urlsplit(v).netloc
        ):
            raise ValueError(
                "must be an absolute http(s) URL, e.g. http://otel-collector:4318/v1/traces"
            )
        return v

    @model_validator(mode="after")
    def _installed(self) -> TracingSection:
        if self.enabled:
            extras.require("tracing", "observability.tracing.enabled (OpenTelemetry)")
        return self


class ObservabilitySection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Tool names per route that get their own ``gen_ai_tool_name`` value in
    #: ``mcp_server_operation_duration_seconds`` (the first ones the upstream showed to exist:
    #: listed in a ``tools/list`` answer, or answered with a result that is not ``isError``;
    #: printable names only); the rest are ``_OTHER``.
    max_tool_names: int = Field(100, ge=0, le=10_000)
    tracing: TracingSection = Field(default_factory=TracingSection)


class LoggingSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"
    access_log: bool = False
