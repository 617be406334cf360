"""Bodies whose meaning depends on the parser: what the edge refuses, and why each refusal is needed
(the parsers the upstreams use really do read these texts differently)."""

from __future__ import annotations

import json

import orjson
import pydantic_core
import pytest

from mcp_edge.core import strict_json
from mcp_edge.core.digest import request_digest
from mcp_edge.core.errors import RpcError
from mcp_edge.core.jsonrpc import parse_json
from mcp_edge.core.strict_json import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT


def refusal(body: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> RpcError | None:
    doc = parse_json(body)
    try:
        strict_json.check(body, doc, max_depth=max_depth)
    except RpcError as err:
        return err
    return None


@pytest.mark.parametrize(
    "body,key",
    [
        (b'{"a":1,"a":2}', "a"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list"}', "method"),
        (b'{"params":{"name":"x","name":"y"}}', "name"),
        (
            b'{"params":{"_meta":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}',
            "_meta",
        ),
        (b'{"params":{"requestState":"a","requestState":"b"}}', "requestState"),
        (b'{"params":{"arguments":{},"arguments":{"x":1}}}', "arguments"),
        (b'{"params":{"arguments":{"deep":[{"k":1,"k":2}]}}}', "k"),
        (b'{"params":{"\\u006eame":"x","name":"y"}}', "name"),  # the same name, spelled otherwise
        (b'{"params":{"n\\u0061me":"x","na\\u006de":"y"}}', "name"),
        (b'{"u":"a:b","x":{"y":1,"y":1}}', "y"),  # a ':' in a string sends it down the exact path
        (b'[{"a":1},{"b":1,"b":2}]', "b"),
    ],
)
def test_duplicate_names_are_refused_at_any_depth(body, key):
    err = refusal(body)
    assert err is not None and err.code == -32700 and err.http_status == 400
    assert err.data["reason"] == "duplicate_key" and err.data["key"] == key


def test_the_parsers_disagree_on_duplicates_so_none_may_pass():
    """orjson, json and pydantic keep the last value; the first is as legitimate a reading."""
    body = b'{"name":"first","name":"last"}'
    assert (
        orjson.loads(body) == json.loads(body) == pydantic_core.from_json(body) == {"name": "last"}
    )
    assert json.loads(body, object_pairs_hook=lambda pairs: dict(reversed(pairs))) == {
        "name": "first"
    }


def test_a_duplicate_id_leaves_no_id_to_echo():
    err = refusal(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}')
    assert err is not None and err.data == {
        "reason": "duplicate_key",
        "key": "id",
        "topLevel": True,
    }
    assert strict_json.id_is_ambiguous(err)
    nested = refusal(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"id":1,"id":2}}}'
    )
    assert nested is not None and not strict_json.id_is_ambiguous(nested)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"b":{"a":1}}',  # the same name in different objects
        b'{"uri":"plain://vault/a","t":"12:30"}',  # ':' in strings only
        b'{"a":"\\u003a","b":1}',  # an escaped ':'
        b'{"k:1":1,"k:2":2}',
        b'{"n":18446744073709551615,"m":-9223372036854775808}',  # what orjson keeps exactly
        b'{"f":1e300,"g":-1.5e19}',  # floats written as floats
        b"[]",
        b'"just a string"',
        b"12",
    ],
)
def test_unambiguous_bodies_pass(body):
    assert refusal(body) is None


@pytest.mark.parametrize(
    "literal", [b"18446744073709551616", b"-9223372036854775809", b"9" * 30, b"1" + b"0" * 300]
)
def test_integers_orjson_cannot_hold_are_refused(literal):
    err = refusal(b'{"arguments":{"n":' + literal + b"}}")
    assert err is not None and err.code == -32700 and err.data == {"reason": "number_out_of_range"}


def test_integers_beyond_a_double_orjson_refuses_itself():
    with pytest.raises(RpcError) as info:
        parse_json(b'{"n":1' + b"0" * 400 + b"}")
    assert info.value.code == -32700


def test_why_big_integers_are_refused():
    """orjson reads them as floats, json as exact integers: two different requests, one digest."""
    a, b = b"99999999999999999999999", b"100000000000000000000000"
    assert json.loads(a) != json.loads(b)
    assert orjson.loads(a) == orjson.loads(b)
    params = [orjson.loads(b'{"name":"t","arguments":{"n":' + x + b"}}") for x in (a, b)]
    assert request_digest("tools/call", params[0]) == request_digest("tools/call", params[1])


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_nesting_deeper_than_the_limit_is_refused():
    assert refusal(nested(DEFAULT_MAX_DEPTH)) is None
    err = refusal(nested(DEFAULT_MAX_DEPTH + 1))
    assert err is not None and err.data == {"reason": "too_deep", "maxDepth": DEFAULT_MAX_DEPTH}
    arrays = refusal(b"[" * 30 + b"]" * 30, max_depth=20)
    assert arrays is not None and (arrays.code, arrays.data) == (
        -32700,
        {"reason": "too_deep", "maxDepth": 20},
    )


def test_what_the_edge_accepts_every_parser_reads_and_orjson_writes_back():
    """Up to the highest configurable depth, the upstream's parsers read the body and the edge can
    re-encode it (retries are re-encoded); beyond orjson's own limits they part ways."""
    deepest = nested(MAX_DEPTH_LIMIT)
    doc = orjson.loads(deepest)
    assert json.loads(deepest) == pydantic_core.from_json(deepest) == doc
    assert orjson.loads(orjson.dumps(doc)) == doc
    with pytest.raises(TypeError):  # orjson writes at most 254 levels
        orjson.dumps(orjson.loads(nested(255)))
    with pytest.raises(ValueError):
        pydantic_core.from_json(nested(255))


def test_hundred_thousand_levels_fail_fast_without_recursion():
    with pytest.raises(RpcError) as info:
        parse_json(b"[" * 100_000 + b"]" * 100_000)
    assert info.value.code == -32700


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":-Infinity}',  # json and pydantic read these
        b'{"a":"\\ud800"}',  # a lone surrogate: json reads it
        b'\xef\xbb\xbf{"a":1}',  # a byte order mark: json.loads(bytes) skips it
        '{"a":1}'.encode("utf-16"),  # json.loads(bytes) detects UTF-16
        b'{"a":1} {"b":2}',
        b'{"a":1}x',
        b'{"a":1}\x00',
        b'{"a":1e400}',  # json reads inf
        b'{"a":"\xff"}',
        b'{"a":"\xc0\xaf"}',
    ],
)
def test_what_orjson_refuses_is_a_parse_error(body):
    with pytest.raises(RpcError) as info:
        parse_json(body)
    assert info.value.code == -32700


def test_a_body_orjson_would_write_back_is_not_walked(monkeypatch):
    """Compact JSON as SDK clients send it (orjson writes the same bytes for what it read) has no
    dropped member and no integer read as a float: it passes without the walk. Any other spelling
    of the same document is walked, and a duplicate or an out-of-range integer, even compact,
    never reads back the same."""
    walked: list[object] = []
    real = strict_json._count
    monkeypatch.setattr(strict_json, "_count", lambda doc: walked.append(doc) or real(doc))
    compact = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"n":[1,2.5,"\xc3\xa9"]}}}'
    assert refusal(compact) is None and walked == []
    assert refusal(compact.replace(b":", b": ", 1)) is None and len(walked) == 1
    assert refusal(compact.replace(b'"\xc3\xa9"', b'"\\u00e9"')) is None and len(walked) == 2
    for body in (b'{"a":1,"a":1}', b'{"n":18446744073709551616}', b'{"a":{"b":2,"b":2}}'):
        assert refusal(body) is not None
