"""Reading the approval question as the person asked reads it, answering it as a client, and
finding the call it approved in tests/servers/policy_upstream.py's log."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from mcp.types import ElicitResult

#: A run's mark as a person reads it: ``⟦n spaces⟧``, or ``⟦n × e⟧`` for the escape ``e`` n times.
MARK = re.compile(
    "\u27e6(\\d+) spaces\u27e7"
    "|\u27e6(\\d+) \u00d7 (\\\\u[0-9a-f]{4}(?:\\\\u[0-9a-f]{4})?|\\\\[nrtbf])\u27e7"
)


def unmark(block: str) -> str:
    """The block with every mark replaced by its run (a mark stands for more than 3)."""

    def run(m: re.Match[str]) -> str:
        count = int(m[1] or m[2])
        assert count > 3, m[0]
        return " " * count if m[1] else m[3] * count

    text = MARK.sub(run, block)
    assert "\u27e6" not in text and "\u27e7" not in text, "a bracket that is no mark"
    return text


def shown_call(message: str) -> Any:
    """The call an approval question shows: its fenced JSON block, each run's mark read as the
    run it stands for, parsed."""
    assert message.count("```json\n") == 1, message
    return json.loads(unmark(message.split("```json\n", 1)[1].split("\n```", 1)[0]))


def approve_with(answer: dict[str, Any] | None, action: str = "accept", seen: list | None = None):
    """An elicitation callback: the gateway's approval question gets ``action``/``answer``; the
    upstream's own questions are confirmed. Every question's message is kept in ``seen``."""

    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        schema = params.requested_schema or {}
        if seen is not None:
            seen.append(params.message)
        if "approve" in (schema.get("properties") or {}):
            return ElicitResult(action=action, content=answer)
        return ElicitResult(action="accept", content={"ok": True})

    return on_elicit


def arguments_sha256(arguments: dict[str, Any]) -> str:
    """How tests/servers/policy_upstream.py logs the arguments it received."""
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
