"""The bounded memo the request path keeps its repeated answers in."""

from __future__ import annotations

import pytest

from mcp_edge.core.memo import BoundedMemo
from mcp_edge.policy.hook import _RateLimitedLog


def test_it_keeps_answers_until_full_then_starts_over() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(3)
    assert memo.put("a", 1) == 1
    memo.put("b", 2)
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c"), memo.get("d")) == (1, 2, 3, None)
    assert len(memo) == 3
    memo.put("d", 4)  # full: starts over with the new answer only
    assert len(memo) == 1 and "d" in memo and "a" not in memo
    assert memo.get("a") is None and memo.get("d") == 4


def test_replacing_a_kept_answer_when_full_keeps_the_others() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("a", 10)
    assert (memo.get("a"), memo.get("b"), len(memo)) == (10, 2, 2)


def test_invented_keys_never_grow_it() -> None:
    memo: BoundedMemo[int, int] = BoundedMemo(16)
    for i in range(1000):
        memo.put(i, i)
        assert len(memo) <= 16
    assert memo.get(999) == 999


def test_a_memo_holds_something() -> None:
    with pytest.raises(ValueError):
        BoundedMemo(0)


def test_rule_error_lines_are_rate_limited_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("mcp_edge.policy.hook.time.monotonic", lambda: now[0])
    log = _RateLimitedLog(seconds=10)
    assert log("a") and log("b")
    assert not log("a")
    now[0] += 9.9
    assert not log("a")
    now[0] += 0.2
    assert log("a") and not log("a")
    assert log("b")  # 10.1 s after its last line
