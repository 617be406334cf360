"""The bookkeeping of a stdio route whose callers are kept apart (mcp_edge.upstream.stdio.pool):
processes per principal and in all, the spare, eviction of the least recently used idle
principal, idle reaping, and the busy answer when nothing can make room."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mcp_edge.upstream.stdio.config import StdioUpstreamConfig
from mcp_edge.upstream.stdio.pool import Plan, PrincipalPool
from mcp_edge.upstream.stdio.spec import build_spec


@dataclass(eq=False)
class Proc:
    """A process as the pool sees it: busy (a request in flight) or idle since a time."""

    name: str
    since: float | None = 0.0


def idle_since(p: Proc) -> float | None:
    return p.since


def pool(max_processes: int = 3, per_principal: int = 1, idle: float = 60.0) -> PrincipalPool:
    return PrincipalPool(
        max_processes=max_processes, per_principal=per_principal, idle_seconds=idle
    )


def test_a_principal_is_named_by_a_keyed_digest_never_its_id() -> None:
    a, b = pool(), pool()
    principal = '["trusted-header","alice"]'
    assert a.key(principal) == a.key(principal)
    assert a.key(principal) != a.key('["trusted-header","bob"]')
    assert "alice" not in a.key(principal)
    assert a.key(principal) != b.key(principal)  # keyed per pool: not a guessable hash


def test_the_spare_goes_to_the_first_principal_then_slots_until_the_bound() -> None:
    p = pool(max_processes=3)
    spare = Proc("spare")
    p.add_spare(0, spare)
    assert p.plan("alice", idle_since) == Plan("adopt")
    assert p.adopt("alice") is spare and p.members("alice") == [spare] and p.spare is None
    assert p.plan("bob", idle_since) == Plan("start", slot=1)
    p.add("bob", 1, Proc("bob"))
    p.add("carol", 2, Proc("carol"))
    assert len(list(p.live())) == 3 == p.max_processes
    assert p.principals == 3


def test_a_principal_never_has_more_than_its_share() -> None:
    p = pool(max_processes=4, per_principal=2)
    p.add("alice", 0, Proc("a1"))
    p.add("alice", 1, Proc("a2"))
    assert p.plan("alice", idle_since) == Plan("wait")  # for one of its own, never a third
    assert p.plan("bob", idle_since) == Plan("start", slot=2)


def test_when_full_the_least_recently_used_idle_principal_makes_room() -> None:
    p = pool(max_processes=3)
    p.add("alice", 0, Proc("a", since=30.0))
    p.add("bob", 1, Proc("b", since=10.0))  # idle the longest
    p.add("carol", 2, Proc("c", since=None))  # busy: never chosen, however old
    assert p.plan("dave", idle_since) == Plan("evict", victim="bob")
    gone = p.evict("bob")
    assert [m.name for m in gone] == ["b"] and p.members("bob") == []
    # Its slot stays taken until its process has stopped: never more than three alive.
    assert p.plan("dave", idle_since) == Plan("wait")
    assert p.stopping == 1
    p.free(gone[0])
    assert p.plan("dave", idle_since) == Plan("start", slot=1)


def test_a_principal_used_within_the_minimum_residency_is_never_evicted() -> None:
    """However many new principals come, one idle for less than ``min_residency`` keeps its
    process: they are told busy, and the route starts no process for them meanwhile."""
    p = PrincipalPool(max_processes=2, per_principal=1, idle_seconds=300.0, min_residency=30.0)
    p.add("alice", 0, Proc("a", since=100.0))
    p.add("bob", 1, Proc("b", since=80.0))
    for newcomer in ("minted-1", "minted-2", "minted-3"):
        assert p.plan(newcomer, idle_since, now=105.0) == Plan("busy")
    assert p.plan("minted-1", idle_since, now=110.0) == Plan("evict", victim="bob")  # 30 s idle
    assert p.plan("minted-1", idle_since, now=130.0) == Plan("evict", victim="bob")  # the LRU


def test_a_principal_waiting_for_its_process_is_not_idle() -> None:
    p = pool(max_processes=1)
    p.add("alice", 0, Proc("a", since=0.0))
    p.wait("alice")  # a request of alice's waits for her process (it is starting, say)
    assert p.plan("bob", idle_since) == Plan("busy")
    assert p.expired(1e9, idle_since) == []
    p.done_waiting("alice")
    assert p.plan("bob", idle_since) == Plan("evict", victim="alice")


def test_busy_when_every_process_has_a_request_in_flight() -> None:
    p = pool(max_processes=2)
    p.add("alice", 0, Proc("a", since=None))
    p.add("bob", 1, Proc("b", since=None))
    assert p.plan("carol", idle_since) == Plan("busy")
    assert p.plan("alice", idle_since) == Plan("wait")  # she has hers (per_principal 1)


def test_a_principal_is_idle_only_when_all_its_processes_are() -> None:
    p = pool(max_processes=3, per_principal=2)
    p.add("alice", 0, Proc("a1", since=5.0))
    p.add("alice", 1, Proc("a2", since=None))
    assert p.idle_since("alice", idle_since) is None
    assert p.plan("bob", idle_since) == Plan("start", slot=2)
    p.add("bob", 2, Proc("b", since=50.0))
    assert p.plan("carol", idle_since) == Plan("evict", victim="bob")


def test_idle_principals_expire_after_idle_seconds_measured_from_their_last_use() -> None:
    p = pool(max_processes=3, per_principal=2, idle=60.0)
    p.add("alice", 0, Proc("a1", since=10.0))
    p.add("alice", 1, Proc("a2", since=40.0))  # used later: alice's last use is 40
    p.add("bob", 2, Proc("b", since=None))
    assert p.expired(99.0, idle_since) == []
    assert p.expired(100.0, idle_since) == ["alice"]
    assert p.expired(1e9, idle_since) == ["alice"]  # bob is busy, however long ago he started
    spare = Proc("spare")
    q = pool(max_processes=1)
    q.add_spare(0, spare)
    assert q.expired(1e9, idle_since) == []  # the spare belongs to nobody: never reaped


def test_a_freed_slot_and_an_empty_principal_leave_no_trace() -> None:
    p = pool(max_processes=2)
    a = Proc("a")
    p.add("alice", 0, a)
    p.wait("alice")
    p.free(a)  # it stopped (a crash, say) while a request waited: alice stays until it is done
    assert p.principals == 1 and p.members("alice") == []
    p.done_waiting("alice")
    assert p.principals == 0 and list(p.live()) == []
    p.add("bob", 1, Proc("b1"))
    with pytest.raises(ValueError, match="taken"):
        p.add("carol", 1, Proc("c"))


def test_the_default_isolation_follows_the_auth_mode() -> None:
    section = StdioUpstreamConfig(command=["true"])
    assert build_spec(section, authenticated=True).isolation == "principal"
    assert build_spec(section, authenticated=False).isolation == "shared"
    shared = StdioUpstreamConfig(command=["true"], isolation="shared")
    assert build_spec(shared, authenticated=True).isolation == "shared"
    spec = build_spec(
        StdioUpstreamConfig(command=["true"], max_processes=5, idle_seconds=9), authenticated=True
    )
    assert (spec.max_processes, spec.idle_seconds) == (5, 9.0)
    assert spec.min_residency == 9.0  # the default 30 s, capped at idle_seconds
