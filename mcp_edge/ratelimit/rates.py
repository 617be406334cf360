"""Rates as the configuration writes them (``60/minute``, ``5/second; 100/hour``), parsed once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from limits import RateLimitItem


def parse_rates(spec: str) -> list[RateLimitItem]:
    """``"60/minute"``, ``"10 per second"``, ``"5/second; 100/hour"`` → rate items."""
    from limits.util import parse_many  # (loaded by a configuration that sets a rate)

    try:
        items = parse_many(spec)
    except ValueError:
        items = []
    if not items:
        raise ValueError(
            f"{spec!r} is not a rate: write e.g. '60/minute', '10 per second' or '5/second; 100/hour'"
        )
    return items


def describe(item: RateLimitItem) -> str:
    """``60/minute``, ``5/10 seconds``: how a rate reads in errors and logs."""
    name = item.GRANULARITY.name
    if item.multiples == 1:
        return f"{item.amount}/{name}"
    return f"{item.amount}/{item.multiples} {name}s"
