"""Writing metrics on the request path, cheaply.

prometheus_client takes a lock on every increment, so that threads writing the same value lose no
counts. The values written here are written by the event loop's thread alone: each route's
middlewares and upstream adapter run on the loop, and nothing hands them to another thread. In a
single process they are therefore added to directly, the same float the library would add to,
without its lock and its call (eleven increments per request on a plain route: about 4 µs of
the gateway's own work in one process, see ``bench.hotpath``). A scrape reads them as before.

With ``PROMETHEUS_MULTIPROC_DIR`` (``--workers N``, mcp_edge.observability.multiprocess) the values
live in a file the workers share, and are written through the library as before.
``tests/unit/test_metrics.py`` checks that both ways expose what the library's own calls do.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client.values import MutexValue


def _direct(*values: Any) -> bool:
    """Whether these are the library's single-process values (a float behind a lock)."""
    return all(type(value) is MutexValue and type(value._value) is float for value in values)


class Observer:
    """``observe`` of one labelled histogram child, for the request path: the same values as
    ``Histogram.observe`` (the sum, and the first bucket whose bound is not below the amount),
    found by bisection, without its per-call checks (exemplars are not used here)."""

    __slots__ = ("_bounds", "_buckets", "_direct", "_sum")

    def __init__(self, child: Any) -> None:
        self._bounds = list(child._upper_bounds)
        self._buckets = list(child._buckets)
        self._sum = child._sum
        self._direct = _direct(self._sum, *self._buckets)

    def observe(self, amount: float) -> None:
        if self._direct:
            self._sum._value += amount
            self._buckets[bisect_left(self._bounds, amount)]._value += 1.0
        else:
            self._sum.inc(amount)
            self._buckets[bisect_left(self._bounds, amount)].inc(1.0)


class Count:
    """``inc`` / ``dec`` of one labelled counter or gauge child, for the request path (the same
    value ``Counter.inc`` and ``Gauge.inc`` / ``dec`` change)."""

    __slots__ = ("_direct", "_value")

    def __init__(self, child: Any) -> None:
        self._value = child._value
        self._direct = _direct(self._value)

    def inc(self) -> None:
        if self._direct:
            self._value._value += 1.0
        else:
            self._value.inc(1.0)

    def dec(self) -> None:
        if self._direct:
            self._value._value -= 1.0
        else:
            self._value.inc(-1.0)
