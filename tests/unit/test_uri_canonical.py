"""One canonical form for every URI check (mcp_edge.core.uri), and the byte pre-checks that may
only skip what is safe to skip (mcp_edge.core.upstream_rules.may_name)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import Url

from mcp_edge.core.upstream_rules import may_name, may_name_str
from mcp_edge.core.uri import canonical_uri, is_canonical, remove_dot_segments, rfc_normal
from mcp_edge.policy.layer import _body_may_be_a_result, _may_be_a_result
from tests.support.fuzz import fuzz_settings


@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("file:///secret/b", "file:///secret/b"),
        ("file:///public/../secret/b", "file:///secret/b"),
        ("file:///public/%2e%2e/secret/b", "file:///secret/b"),
        ("file:///public/%2E%2E/secret/b", "file:///secret/b"),
        ("file:///public/.%2e/secret/b", "file:///secret/b"),
        ("file:///public/./../secret/./b", "file:///secret/b"),
        ("FILE:///secret/b", "file:///secret/b"),
        ("File:///secret/b", "file:///secret/b"),
        ("file://localhost/secret/b", "file:///secret/b"),
        ("file:///%73ecret/b", "file:///secret/b"),  # an unreserved letter, escaped
        ("file:///a%2fb", "file:///a%2Fb"),  # a reserved one stays escaped, hex upper case
        ("file:///a%7e", "file:///a~"),
        ("http://EXAMPLE.com:80/x", "http://example.com/x"),
        ("https://example.com", "https://example.com/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("file:///a b", "file:///a%20b"),
        ("file:///é", "file:///%C3%A9"),
        ("secret://Alice", "secret://Alice"),  # a name, not a host: its case is its own
        ("test://static-resource", "test://static-resource"),
        ("test://x/%2e%2e/y", "test://x/y"),
        ("ui://widget/x.html", "ui://widget/x.html"),
        ("mailto:a@b", "mailto:a@b"),
        ("urn:a/../b", "urn:b"),
        # Templates keep their expressions.
        ("file:///{path}", "file:///{path}"),
        ("test://t/{id}", "test://t/{id}"),
        ("FILE:///secret/{n}", "file:///secret/{n}"),
        ("file:///a/{x}/../b", "file:///a/b"),
        # No canonical form.
        ("file:///public\\..\\secret\\b", None),
        ("file:///x%", None),
        ("file:///x%zz", None),
        ("no scheme", None),
        ("file://LOCALHOST/secret/b{}", None),
        ("x{", None),
    ],
)
def test_the_canonical_form(uri: str, canonical: str | None) -> None:
    assert canonical_uri(uri) == canonical
    assert is_canonical(uri) == (uri == canonical)


def test_dot_segments_go_as_rfc_3986_says():
    # RFC 3986 section 5.4's examples, on absolute paths.
    for path, want in [
        ("/a/b/c/./../../g", "/a/g"),
        ("/a/b/../../../g", "/g"),
        ("/a/./", "/a/"),
        ("/a/..", "/"),
        ("/a/b/.", "/a/b/"),
        ("/..g", "/..g"),
        ("/g.", "/g."),
        ("/", "/"),
        ("", ""),
    ]:
        assert remove_dot_segments(path) == want, path


URI_TEXT = st.text(alphabet="abAB09-._~%2eEfF/?#:@!$&'()*+,;={}\\ é", max_size=24)
SCHEMES = st.sampled_from(
    ["file:///", "file://", "FILE:///", "http://h/", "test://x/", "x:", "urn:"]
)


@fuzz_settings(300, 5000)
@given(scheme=SCHEMES, rest=URI_TEXT)
def test_a_canonical_uri_is_what_a_url_parser_and_the_rfc_leave_as_it_is(scheme: str, rest: str):
    """Every URI the gateway lets through is a fixed point of the SDKs' own resolution
    (pydantic's WHATWG parser, as mcp 1.x uses it) and of RFC 3986's normalization, so what is
    checked is what the server resolves; and the canonical form of anything is canonical."""
    uri = scheme + rest
    canonical = canonical_uri(uri)
    if canonical is None:
        return
    assert canonical_uri(canonical) == canonical
    assert rfc_normal(canonical) == canonical
    if "{" not in canonical and "}" not in canonical:
        assert str(Url(canonical)) == canonical


# ---------------------------------------------------------------- byte pre-checks


#: Every spelling of the keys a pre-check looks for: each letter alone escaped, all of them, hex
#: digits in either case.
def spellings(key: str) -> list[str]:
    out = {key, "".join(f"\\u{ord(c):04x}" for c in key), "".join(f"\\u{ord(c):04X}" for c in key)}
    for i, c in enumerate(key):
        for form in (f"\\u{ord(c):04x}", f"\\u{ord(c):04X}"):
            out.add(key[:i] + form + key[i + 1 :])
    return sorted(out)


@pytest.mark.parametrize("key", ["uri", "result", "error", "id", "method"])
def test_every_spelling_of_a_key_passes_the_pre_check(key: str) -> None:
    for spelt in spellings(key):
        text = '{"%s":"x"}' % spelt  # noqa: UP031 - JSON braces
        assert json.loads(text) == {key: "x"}  # the same key to a parser
        assert may_name(text.encode(), f'"{key}"'.encode()), spelt
        assert may_name_str(text, f'"{key}"'), spelt
    assert not may_name(b'{"other":"x","text":"\\u00e9"}', f'"{key}"'.encode())


def test_every_spelling_of_result_is_parsed_by_the_list_filter() -> None:
    for spelt in spellings("result"):
        text = '{"jsonrpc":"2.0","id":1,"%s":{"tools":[]}}' % spelt  # noqa: UP031
        assert _may_be_a_result(text) and _body_may_be_a_result(text.encode()), spelt
