"""Reading the approval question as the person asked reads it."""

from __future__ import annotations

import re

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
