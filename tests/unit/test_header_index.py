"""mcp_edge.core.headers.HeaderIndex: one pass over a request's headers, read like the list."""

from __future__ import annotations

from mcp_edge.core import headers as h
from mcp_edge.core.headers import HeaderIndex


def test_first_value_of_each_name_as_the_list_gives_it() -> None:
    raw = [(b"host", b"a:1"), (b"x-a", b"1"), (b"x-a", b"2"), (b"x-b", b"\xe9")]
    index = HeaderIndex(raw)
    for name in ("host", "x-a", "x-b", "absent"):
        assert index.get(name.encode()) == h.first(raw, name)
        assert index.all(name.encode()) == h.values(raw, name)
    assert b"x-a" in index and b"absent" not in index


def test_repeated_names_are_all_seen() -> None:
    index = HeaderIndex([(b"mcp-method", b"tools/call"), (b"mcp-method", b"tools/list")])
    assert index.all(b"mcp-method") == ["tools/call", "tools/list"]
    assert HeaderIndex([]).all(b"mcp-method") == []


def test_allow_list_memo_stays_bounded_and_answers_the_same() -> None:
    allow = h.AllowList(["localhost:*", "mcp.example.com"])
    for i in range(3 * h.AllowList.MEMO_SIZE):  # hosts a client invents
        assert not allow.allows_host(f"evil{i}.example")
        assert len(allow._seen) <= h.AllowList.MEMO_SIZE
    for _ in range(2):  # remembered answers are the computed ones
        assert allow.allows_host("localhost:8080")
        assert allow.allows_host("MCP.example.com:443")
        assert not allow.allows_host("mcp.example.com.evil:443")
