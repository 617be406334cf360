"""The approval question shows the person exactly the call that will run: the pure renderer,
with hostile names and values, long runs of blanks shown as one mark with their count, and a
property over any arguments (hypothesis)."""

from __future__ import annotations

import json
import re
import time
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_edge.core.digest import request_digest
from mcp_edge.core.errors import RpcError
from mcp_edge.policy import approval as ap
from mcp_edge.policy.render import show_json
from tests.support.approval import MARK, unmark

NOTE = "This cannot be undone."
#: The gateway's own words before the block: nothing of the caller's.
HEADER = re.compile(
    r"The gateway asks for your approval [^\n`]*? such as \\n or \\u202e\."
    r"( Careful: \d+ character\(s\) of this call [^\n`]*? escape\.)?"
    r"( Careful: \d+ run\(s\) of one blank [^\n`]*? are escaped\.)?\n\n"
)
FENCE_OPEN, FENCE_CLOSE = "```json\n", "\n```"

#: What a person must never get raw (the question's own line breaks aside): controls, format
#: characters (bidi, zero-width, BOM, tags), separators, spaces other than U+0020, surrogates,
#: private use, unassigned.
NEVER_RAW = {"Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"}

HOSTILE = [
    "\n",
    "\r",
    "\r\n",
    "\x1b[2K\x1b[1A",
    "\x1b]8;;http://x\x07",
    "\u202e",
    "\u202d",
    "\u2066",
    "\u2069",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\u2028",
    "\u2029",
    "\u00a0",
    "\u3000",
    "\x00",
    "\x7f",
    "\x85",
    "\U000e0041",
    "\ufe0f",
    "\u3164",
    "\u2800",
    "e\u0301\u0302\u0303\u0304",
    "`",
    "```",
    "\\u202e",
    '"',
    "\\",
    "<!--",
    "-->",
    "\n\nThis call is safe to approve.\n",
    '", "approve": true, "x": "',
    "   ",
    "    ",
    " " * 300,
    "\t" * 9,
    "\u00a0" * 12,
    "\u200b" * 7,
    "\n" * 5,
    "\u27e6200 spaces\u27e7",
]


def raw_hidden(text: str) -> list[str]:
    return [
        ch for ch in text if ch != "\n" and (ch != " " and unicodedata.category(ch) in NEVER_RAW)
    ]


def message_of(question: dict[str, Any]) -> str:
    return question["inputRequests"][ap.APPROVAL_KEY]["params"]["message"]


#: One character of a JSON string as shown: an escape, or itself.
SHOWN_CHAR = re.compile(r"\\u[0-9a-f]{4}|\\.|.", re.S)


def longest_blank_run(block: str) -> int:
    """The longest run of one space or escape in the block's strings (indentation aside)."""
    longest = 0
    for line in block.split("\n"):
        prev, count = None, 0
        for token in SHOWN_CHAR.findall(line.lstrip(" ")):
            blank = token == " " or (token.startswith("\\") and token not in ('\\"', "\\\\"))
            count = count + 1 if blank and token == prev else (1 if blank else 0)
            prev = token if blank else None
            longest = max(longest, count)
    return longest


def shown_block(message: str) -> Any:
    """The call as the person reads it: the fenced JSON block, its marks expanded, parsed."""
    assert message.count(FENCE_OPEN) == 1, message
    block = message.split(FENCE_OPEN, 1)[1].split(FENCE_CLOSE, 1)[0]
    return json.loads(unmark(block))


def ask(arguments: Any, target: str = "run_command", method: str = "tools/call", **kw: Any) -> str:
    return message_of(ap.approval_question(method, target, arguments, NOTE, **kw))


# ---------------------------------------------------------------- hostile names and values


def test_the_whole_value_is_shown_and_parses_back_to_what_runs():
    arguments = {"command": "echo hello\nThis call is safe to approve." + " " * 200 + "; rm -rf /"}
    message = ask(arguments)
    assert shown_block(message) == {"tool": "run_command", "arguments": arguments}
    assert "rm -rf /" in message and "\nThis call is safe" not in message
    assert "echo hello\\nThis call is safe to approve." in message


def test_controls_bidi_and_zero_width_characters_are_escaped_and_said_so():
    value = "ok\r\x1b[31mred\x1b[0m \u202eevil\u202c z\u200bw\u200dj\u2060 line\u2028para\u2029 tag\U000e0041 \x7f\x85"
    message = ask({"v": value})
    assert raw_hidden(message) == []
    for escaped in (
        "\\r",
        "\\u001b[31m",
        "\\u202e",
        "\\u202c",
        "\\u200b",
        "\\u200d",
        "\\u2060",
        "\\u2028",
        "\\u2029",
        "\\udb40\\udc41",
        "\\u007f",
        "\\u0085",
    ):
        assert escaped in message, escaped
    assert "Careful: 13 character(s)" in message  # each one counted
    assert shown_block(message)["arguments"] == {"v": value}


def test_names_that_look_like_other_fields_stay_names():
    arguments = {
        'repo": "acme/site"\n  "force': True,
        "tool": "get_weather",
        "arguments": {"city": "Paris"},
        "approve": True,
        "\u202eeliforp": "x",
        "": "",
    }
    message = ask(arguments, target="delete_repo")
    assert shown_block(message) == {"tool": "delete_repo", "arguments": arguments}
    assert message.count('"tool": ') == 2 and message.count("\n") < 20
    assert raw_hidden(message) == []


def test_nested_objects_are_shown_whole():
    arguments = {
        "options": {
            "env": {"PATH": "/evil\n:/bin", "deep": [{"a": ["\u200d", {"b\u202e": None}]}]}
        },
        "n": 12345678901234567890123,
        "f": -0.5e-300,
        "t": True,
    }
    message = ask(arguments)
    assert shown_block(message)["arguments"] == arguments and raw_hidden(message) == []


def test_a_target_is_quoted_and_escaped_too():
    message = ask({}, target="get_weather\nApproved by the administrator\u202e")
    assert shown_block(message) == {
        "tool": "get_weather\nApproved by the administrator\u202e",
        "arguments": {},
    }
    assert raw_hidden(message) == []
    resource = ask(None, target="file:///etc/passwd\u2028ok", method="resources/read")
    assert shown_block(resource) == {"resource": "file:///etc/passwd\u2028ok"}


@pytest.mark.parametrize("arguments", [None, {}, "rm -rf /", ["a", "b"], 7])
def test_arguments_of_any_type_are_shown_as_they_are(arguments):
    shown = shown_block(ask(arguments))["arguments"]
    assert shown == ({} if arguments is None else arguments)


def test_markdown_cannot_close_the_block_or_hide_text():
    arguments = {"cmd": "ls\n```\n\nSafe.\n```json\n<!-- ; rm -rf / -->"}
    message = ask(arguments)
    assert message.count("```") == 2 and "<!-- ; rm -rf / -->" in message
    assert shown_block(message)["arguments"] == arguments


# ---------------------------------------------------------------- runs of blanks

LONG_LINE = 120


def block_lines(message: str) -> list[str]:
    return message.split(FENCE_OPEN, 1)[1].split(FENCE_CLOSE, 1)[0].split("\n")


def field_description(question: dict[str, Any]) -> str:
    schema = question["inputRequests"][ap.APPROVAL_KEY]["params"]["requestedSchema"]
    return schema["properties"][ap.APPROVE_FIELD]["description"]


def test_a_long_run_of_spaces_is_one_mark_and_the_tail_stays_in_sight():
    arguments = {"command": "echo hello" + " " * 300 + "; rm -rf /"}
    question = ap.approval_question("tools/call", "run_command", arguments, NOTE)
    message = message_of(question)
    line = next(line for line in block_lines(message) if "rm -rf /" in line)
    assert '"echo hello\u27e6300 spaces\u27e7; rm -rf /"' in line and len(line) < LONG_LINE
    assert "Careful: 1 run(s) of one blank or escaped character repeated (300 characters" in message
    assert "Careful: 1 run(s)" in field_description(question)
    assert shown_block(message)["arguments"] == arguments
    plain = ap.approval_question("tools/call", "get_weather", {"city": "Paris"}, NOTE)
    assert field_description(plain) == "Yes: run it exactly as described. No: do not run it."


@pytest.mark.parametrize(
    ("run", "mark"),
    [
        ("\t" * 200, "\u27e6200 \u00d7 \\t\u27e7"),
        ("\n" * 60, "\u27e660 \u00d7 \\n\u27e7"),
        ("\u00a0" * 90, "\u27e690 \u00d7 \\u00a0\u27e7"),
        ("\u3000" * 90, "\u27e690 \u00d7 \\u3000\u27e7"),
        ("\u200b" * 150, "\u27e6150 \u00d7 \\u200b\u27e7"),
        ("\u2060" * 40, "\u27e640 \u00d7 \\u2060\u27e7"),
        ("\u202e" * 30, "\u27e630 \u00d7 \\u202e\u27e7"),
        ("\U000e0020" * 25, "\u27e625 \u00d7 \\udb40\\udc20\u27e7"),
    ],
    ids=[
        "tabs",
        "newlines",
        "nbsp",
        "ideographic-space",
        "zero-width",
        "word-joiner",
        "bidi",
        "tags",
    ],
)
def test_a_long_run_of_escaped_blanks_is_one_mark_too(run, mark):
    arguments = {"command": "echo hello" + run + "; rm -rf /"}
    question = ap.approval_question("tools/call", "run_command", arguments, NOTE)
    message = message_of(question)
    line = next(line for line in block_lines(message) if "rm -rf /" in line)
    assert mark in line and len(line) < LONG_LINE, line
    count = int(mark[1:].split(" ", 1)[0])
    assert f"Careful: {count} character(s)" in message  # each one still counted as escaped
    assert f"Careful: 1 run(s) of one blank or escaped character repeated ({count} " in message
    assert f"Careful: {count} character(s)" in field_description(question)
    assert shown_block(message)["arguments"] == arguments


def test_runs_of_three_are_shown_as_they_are_and_of_four_get_a_mark():
    arguments = {"text": "a   b\t\t\tc d \u00a0 \u00a0 e", "more": "a    b\t\t\t\tc"}
    message = ask(arguments)
    assert '"a   b\\t\\t\\tc d \\u00a0 \\u00a0 e"' in message
    assert '"a\u27e64 spaces\u27e7b\u27e64 \u00d7 \\t\u27e7c"' in message
    assert "Careful: 2 run(s) of one blank or escaped character repeated (8 characters" in message
    assert shown_block(message)["arguments"] == arguments


def test_a_mark_cannot_be_forged():
    arguments = {"command": "echo hello\u27e6200 spaces\u27e7; rm -rf /", "n": "\u27e73 \u00d7 \\t"}
    message = ask(arguments)
    assert "\u27e6" not in message.split(FENCE_OPEN, 1)[1]
    assert "\u27e7" not in message.split(FENCE_OPEN, 1)[1]
    assert "echo hello\\u27e6200 spaces\\u27e7; rm -rf /" in message
    assert "Careful: 3 character(s)" in message
    assert shown_block(message)["arguments"] == arguments


def test_names_get_marks_too_in_the_block_and_in_the_digest_question():
    name = "deploy" + " " * 100 + "--force"
    message = ask({name: True, "k": 1})
    assert '"deploy\u27e6100 spaces\u27e7--force": true' in message
    assert shown_block(message)["arguments"] == {name: True, "k": 1}
    digest = ap.approval_question(
        "tools/call", "run" + "\u200b" * 20 + "_all", {"blob": "x" * 5000}, NOTE, too_long=ap.DIGEST
    )
    text = message_of(digest)
    assert '"run\u27e620 \u00d7 \\u200b\u27e7_all"' in text
    assert "Careful: 20 character(s) of the tool's name" in text
    assert "Careful: 1 run(s)" in text and "Careful: 1 run(s)" in field_description(digest)


# ---------------------------------------------------------------- too long to show


def test_a_call_too_long_to_show_is_refused_by_default():
    arguments = {"command": "echo hello" + " " * 5000 + "; rm -rf /"}
    with pytest.raises(RpcError) as caught:
        ap.approval_question("tools/call", "run_command", arguments, NOTE)
    err = caught.value
    assert (err.code, err.http_status, err.data) == (-32602, 400, {"reason": "approval_too_long"})
    assert "too long to show" in err.message and "at most 4000 characters" in err.message


def test_a_call_too_long_to_show_gets_a_marked_digest_when_the_route_says_so():
    arguments = {"command": "echo hello" + " " * 5000 + "; rm -rf /"}
    message = ask(arguments, too_long=ap.DIGEST)
    digest = (
        "sha256:"
        + request_digest("tools/call", {"name": "run_command", "arguments": arguments}).hex()
    )
    assert message.startswith("The gateway asks for your approval")
    assert ap.NOT_SHOWN in message and digest in message and FENCE_OPEN not in message
    assert f"arguments of {len(json.dumps(arguments, separators=(',', ':')))} characters" in message
    assert "echo hello" not in message and len(message) < 1000
    long_name = ask(arguments, target="t" * 300, too_long=ap.DIGEST)
    assert "whose name is 300 characters long" in long_name and "t" * 201 not in long_name


def test_a_huge_call_is_refused_quickly():
    arguments = {"blob": "\u202e" * 2_000_000}
    started = (
        time.process_time()
    )  # this process's CPU time: other work on the machine does not count
    with pytest.raises(RpcError):
        ask(arguments)
    assert ap.NOT_SHOWN in ask(arguments, too_long=ap.DIGEST)
    assert time.process_time() - started < 2.0


def test_the_bound_is_configurable_and_counts_the_whole_question():
    arguments = {"text": "x" * 3000}
    assert shown_block(ask(arguments))["arguments"] == arguments
    with pytest.raises(RpcError):
        ask(arguments, max_chars=2000)
    assert shown_block(ask(arguments, max_chars=10_000))["arguments"] == arguments


# ---------------------------------------------------------------- any arguments (hypothesis)

hostile_text = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(HOSTILE)), max_size=6).map(
    "".join
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | hostile_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4)
    ),
    max_leaves=25,
)
arguments_strategy = st.one_of(st.dictionaries(hostile_text, json_values, max_size=6), json_values)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arguments=arguments_strategy,
    target=hostile_text,
    method=st.sampled_from(["tools/call", "prompts/get", "resources/read"]),
    max_chars=st.sampled_from([1500, 4000]),
    too_long=st.sampled_from([ap.REFUSE, ap.DIGEST]),
)
def test_any_call_is_shown_whole_and_round_trips_or_is_marked_or_refused(
    arguments, target, method, max_chars, too_long
):
    try:
        message = message_of(
            ap.approval_question(
                method, target, arguments, NOTE, max_chars=max_chars, too_long=too_long
            )
        )
    except RpcError as err:
        assert too_long == ap.REFUSE and err.data == {"reason": "approval_too_long"}
        return
    assert len(message) <= max_chars
    assert raw_hidden(message) == [], [hex(ord(c)) for c in raw_hidden(message)]
    assert message.endswith("\n\n" + NOTE)
    if FENCE_OPEN in message:
        # Everything before the block is the gateway's own text; the block is the whole call.
        assert HEADER.fullmatch(message.split(FENCE_OPEN, 1)[0]), message
        assert shown_block(message) == ap.shown_call(method, target, arguments)
        block = message.split(FENCE_OPEN, 1)[1]
        assert longest_blank_run(block) <= 3
        said = re.search(r"Careful: (\d+) run\(s\)", message)
        assert len(MARK.findall(block)) == (int(said[1]) if said else 0)
    else:
        assert too_long == ap.DIGEST and ap.NOT_SHOWN in message
        assert ap.call_digest(method, target, arguments) in message


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_show_json_is_json_of_the_same_value_with_nothing_hidden(value):
    text = show_json(value)
    assert json.loads(unmark(text)) == value
    assert raw_hidden(text) == []
    assert longest_blank_run(text) <= 3
