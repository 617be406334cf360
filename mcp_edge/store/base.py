"""What a single-use store is: a set of consumed state ids that forgets each id once the state it
belongs to has expired (after that the seal's expiry check refuses the state anyway)."""

from __future__ import annotations

from typing import Protocol


class StoreUnavailable(Exception):
    """The store could not answer in time; whether the state was already used is unknown."""


class StateStore(Protocol):
    async def consume(self, jti: str, expires_at: int) -> None:
        """Record ``jti`` as used until ``expires_at`` (unix seconds).

        Raises ``StateRejected("replayed")`` if it was already recorded, and
        :class:`StoreUnavailable` if the store cannot tell.
        """
        ...

    async def aclose(self) -> None: ...
