"""Structured JSON logs. Never log tokens, keys or state contents: callers pass only safe fields.

Every line the gateway's handler writes (its own and other libraries' records) has the
credentials of the URLs in it redacted (``mcp_edge.core.urls.redact_urls``), whoever put them
there.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from mcp_edge.core.urls import redact_urls

logger = logging.getLogger("mcp_edge")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return redact_urls(orjson.dumps(doc, default=str).decode())


class TextFormatter(logging.Formatter):
    """One line for humans: the fields after the message (records of other libraries have none)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = getattr(record, "fields", None)
        return redact_urls(f"{line} {fields}" if fields else line)

    def formatException(self, ei: Any) -> str:
        return redact_urls(super().formatException(ei))


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("mcp_edge")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def event(level: int, msg: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={"fields": fields})


def now() -> float:
    return time.time()
