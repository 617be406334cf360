"""Which local server processes belong to which caller: the bounded pool of a stdio route whose
callers are kept apart (``isolation: principal``). Pure bookkeeping, no I/O: the caller passes
the time and says which processes are busy; :mod:`mcp_edge.upstream.stdio.processes` starts and
stops them.

A stdio process is one 2025-era session, and what a server keeps for its session (the roots it
was told, the log level it was set, its subscriptions) it keeps for whoever reaches it. So each
principal gets processes of its own, never another's:

- at most ``per_principal`` processes for one principal, at most ``max_processes`` in all, each
  in a numbered *slot* (metrics and ``/readyz`` name slots, never principals: their size is
  bounded by ``max_processes`` however many callers come);
- a slot stays taken until its process has stopped (a process being stopped still holds memory),
  so there are never more than ``max_processes`` processes alive;
- a principal whose processes have all been idle (no request in flight, nobody waiting for them)
  for ``idle_seconds`` loses them (:meth:`PrincipalPool.expired`);
- a principal that needs a process when every slot is taken gets one from the least recently
  used principal whose processes are all idle now, and have been for ``min_residency`` seconds
  (:meth:`PrincipalPool.plan` says ``evict``); when there is none the answer is ``busy``. So a
  burst of new principals (anyone who can mint them) cannot cost a caller who used his process
  within ``min_residency`` its session, and starts at most ``max_processes`` processes per
  ``min_residency``, however many principals it brings.

Principals are known here only by a keyed digest (:meth:`PrincipalPool.key`), never by their id.
One process that no principal has used yet is kept started while a slot is free, the *spare*:
the next principal that needs a process adopts it (it holds no caller's state), so a new caller
seldom waits for a process to start.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

M = TypeVar("M")

#: When a member was last busy, or ``None`` while it is busy now (a request in flight on it).
IdleSince = Callable[[M], "float | None"]


@dataclass(slots=True)
class Group(Generic[M]):
    """One principal's processes, and how many requests wait for one of them to be ready."""

    members: list[M] = field(default_factory=list)
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do for a principal that needs one more process.

    ``start``: start it in ``slot``; ``adopt``: take the spare process; ``evict``: stop the
    processes of principal ``victim`` (then wait for their slots); ``wait``: a slot is being
    freed, or the principal has all the processes it may have: wait for it; ``busy``: every slot
    is taken by principals with requests in flight."""

    action: Literal["start", "adopt", "evict", "wait", "busy"]
    slot: int | None = None
    victim: str | None = None


class PrincipalPool(Generic[M]):
    def __init__(
        self,
        *,
        max_processes: int,
        per_principal: int,
        idle_seconds: float,
        min_residency: float = 0.0,
    ) -> None:
        self.max_processes = max_processes
        self.per_principal = per_principal
        self.idle_seconds = idle_seconds
        self.min_residency = min_residency
        self.groups: dict[str, Group[M]] = {}
        #: Every live process by slot, those being stopped included (``None``: free).
        self.slots: list[M | None] = [None] * max_processes
        self.spare: M | None = None
        self._secret = secrets.token_bytes(32)

    def key(self, principal_id: str) -> str:
        """The principal's name in this pool: a keyed digest (the key lives and dies with the
        pool), so neither logs nor memory dumps of the pool tell who the callers are."""
        return hmac.new(self._secret, principal_id.encode(), hashlib.sha256).hexdigest()[:32]

    # ------------------------------------------------------------------ reading

    def members(self, key: str) -> list[M]:
        group = self.groups.get(key)
        return list(group.members) if group is not None else []

    def live(self) -> Iterator[M]:
        """Every process that holds a slot (in slot order)."""
        return (m for m in self.slots if m is not None)

    @property
    def principals(self) -> int:
        return len(self.groups)

    def idle_since(self, key: str, idle_since: IdleSince[M]) -> float | None:
        """When the principal's processes were last busy, or ``None`` if one is busy now or a
        request waits for them."""
        group = self.groups.get(key)
        if group is None:
            return None
        if group.waiting:
            return None
        last = 0.0
        for member in group.members:
            since = idle_since(member)
            if since is None:
                return None
            last = max(last, since)
        return last

    # ------------------------------------------------------------------ deciding

    def plan(self, key: str, idle_since: IdleSince[M], now: float = 0.0) -> Plan:
        """What to do for ``key``, which needs one more process, at time ``now`` (on the clock
        of ``idle_since``; only read with a ``min_residency``)."""
        if len(self.members(key)) >= self.per_principal:
            return Plan("wait")
        if self.spare is not None:
            return Plan("adopt")
        free = self.free_slot()
        if free is not None:
            return Plan("start", slot=free)
        if self.stopping:
            return Plan("wait")  # a process is being stopped: its slot is free soon
        victim = self._least_recently_used(idle_since, other_than=key, now=now)
        if victim is not None:
            return Plan("evict", victim=victim)
        return Plan("busy")

    def free_slot(self) -> int | None:
        return next((i for i, m in enumerate(self.slots) if m is None), None)

    @property
    def stopping(self) -> int:
        """Processes that hold a slot but belong to no principal (and are not the spare): being
        stopped."""
        owned = sum(len(g.members) for g in self.groups.values()) + (self.spare is not None)
        return sum(m is not None for m in self.slots) - owned

    def _least_recently_used(
        self, idle_since: IdleSince[M], *, other_than: str, now: float
    ) -> str | None:
        """The principal idle the longest, and for ``min_residency`` at least."""
        best: tuple[float, str] | None = None
        for key in self.groups:
            if key == other_than:
                continue
            since = self.idle_since(key, idle_since)
            if since is None or (self.min_residency and now - since < self.min_residency):
                continue
            if best is None or since < best[0]:
                best = (since, key)
        return best[1] if best is not None else None

    def expired(self, now: float, idle_since: IdleSince[M]) -> list[str]:
        """Principals whose processes have all been idle for ``idle_seconds``."""
        out = []
        for key in self.groups:
            since = self.idle_since(key, idle_since)
            if since is not None and now - since >= self.idle_seconds:
                out.append(key)
        return out

    # ------------------------------------------------------------------ changing

    def add(self, key: str, slot: int, member: M) -> None:
        """``member`` was started in ``slot`` for ``key`` (the slot :meth:`plan` gave)."""
        if self.slots[slot] is not None:
            raise ValueError(f"slot {slot} is taken")
        self.slots[slot] = member
        self.groups.setdefault(key, Group()).members.append(member)

    def add_spare(self, slot: int, member: M) -> None:
        if self.slots[slot] is not None or self.spare is not None:
            raise ValueError("the pool has a spare already, or the slot is taken")
        self.slots[slot] = member
        self.spare = member

    def adopt(self, key: str) -> M:
        """The spare process becomes ``key``'s."""
        member = self.spare
        if member is None:
            raise ValueError("no spare process")
        self.spare = None
        self.groups.setdefault(key, Group()).members.append(member)
        return member

    def evict(self, key: str) -> list[M]:
        """``key`` loses its processes: they stay in their slots until :meth:`free`."""
        group = self.groups.pop(key, None)
        return group.members if group is not None else []

    def drop(self, member: M) -> None:
        """``member`` leaves its principal (its slot is kept until :meth:`free`)."""
        if self.spare is member:
            self.spare = None
        for key, group in list(self.groups.items()):
            if member in group.members:
                group.members.remove(member)
                if not group.members and not group.waiting:
                    del self.groups[key]

    def free(self, member: M) -> None:
        """``member`` has stopped: its slot is free."""
        self.drop(member)
        for i, m in enumerate(self.slots):
            if m is member:
                self.slots[i] = None

    def wait(self, key: str) -> None:
        """A request waits for ``key``'s processes: they are not idle meanwhile."""
        self.groups.setdefault(key, Group()).waiting += 1

    def done_waiting(self, key: str) -> None:
        group = self.groups.get(key)
        if group is None:
            return
        group.waiting -= 1
        if group.waiting <= 0 and not group.members:
            del self.groups[key]
