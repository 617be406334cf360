"""Canonical digests: stable across key order and encodings, sensitive to meaning."""

from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.digest import request_digest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def d(args, name="t", method="tools/call"):
    return request_digest(method, {"name": name, "arguments": args})


def test_key_order_does_not_matter():
    assert d({"a": 1, "b": {"x": [1, 2], "y": "z"}}) == d({"b": {"y": "z", "x": [1, 2]}, "a": 1})


def test_unicode_forms_are_kept_apart_and_escapes_do_not_matter():
    import orjson

    # The same string whether it arrived escaped or not.
    assert d(orjson.loads(b'{"s": "\\u00e9"}')) == d({"s": "é"})
    # Different code points are different arguments (no normalisation).
    assert d({"s": "é"}) != d({"s": "e\u0301"})


def test_numbers_canonicalise():
    assert d({"n": 1.0}) == d({"n": 1})
    assert d({"n": 1e21}) == d({"n": 1000000000000000000000.0})
    assert d({"n": 1}) != d({"n": 2})
    assert d({"n": 2**70}) == d({"n": 2**70})  # outside I-JSON: still deterministic


def test_meta_and_retry_fields_are_excluded():
    base = request_digest("tools/call", {"name": "t", "arguments": {"a": 1}})
    assert base == request_digest(
        "tools/call",
        {
            "name": "t",
            "arguments": {"a": 1},
            "_meta": {"x": 1},
            "inputResponses": {},
            "requestState": "s",
        },
    )


def test_method_name_and_uri_matter():
    assert d({}) != d({}, name="u")
    assert d({}) != d({}, method="prompts/get")
    assert request_digest("resources/read", {"uri": "a://1"}) != request_digest(
        "resources/read", {"uri": "a://2"}
    )
    assert d(None) == d({})


@given(
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
def test_digest_equality_matches_value_equality(a, b):
    if d(a) == d(b):
        assert a == b
