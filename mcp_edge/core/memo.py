"""A memo of answers worth keeping, bounded in size."""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Answers by key, at most ``size`` of them; when full, the memo starts over.

    For answers the request path would otherwise compute again and again from the same few
    inputs (a Host value, a caller's budget keys, a tool's digest). Starting over rather than
    evicting one entry keeps a lookup one dict read, and means keys a client invents cannot
    grow the memo nor push the common ones out for long."""

    __slots__ = ("_entries", "get", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a memo holds at least one entry")
        self.size = size
        self._entries: dict[K, V] = {}
        #: The answer kept for a key, or None.
        self.get = self._entries.get

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` (starting over when full); returns ``value``."""
        entries = self._entries
        if len(entries) >= self.size and key not in entries:
            entries.clear()
        entries[key] = value
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
