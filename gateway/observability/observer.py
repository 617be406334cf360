"""Observing a histogram on the request path, cheaply."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


class Observer:
    """``observe`` of one labelled histogram child, for the request path: the same values as
    ``Histogram.observe`` (the sum, and the first bucket whose bound is not below the amount),
    found by bisection, without its per-call checks (exemplars are not used here).
    ``tests/unit/test_metrics.py`` checks that the two expose the same series."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, child: Any) -> None:
        self._bounds = list(child._upper_bounds)
        self._buckets = [bucket.inc for bucket in child._buckets]
        self._sum = child._sum.inc

    def observe(self, amount: float) -> None:
        self._sum(amount)
        self._buckets[bisect_left(self._bounds, amount)](1)
