"""Caller-controlled values shown to a person, exactly as they are.

Sans-I/O. The approval question quotes a call the caller wrote; the person reading it must see
what will run and nothing else. So values are written as JSON (every name and string quoted: no
value can pass for a name, another field or the gateway's own words), and every character a
person cannot see, or that changes how the text around it is displayed, is written as a
``\\uXXXX`` escape:

- controls: C0 (newline, CR, the ESC of ANSI sequences; JSON escapes these itself), DEL, C1;
- format characters: bidi embeddings, overrides and isolates (U+202E ...), marks (U+200E/F,
  U+061C), zero-width space and joiners, word joiner, the BOM, tag characters, soft hyphen;
- line and paragraph separators (U+2028/9) and every space other than U+0020;
- surrogates, private-use and unassigned code points;
- variation selectors, the combining grapheme joiner and the blank fillers (Hangul, Braille);
- combining marks after the second in a row (stacked marks can be drawn over other lines);
- the backtick, so that a client rendering Markdown cannot be made to close the fenced block
  the JSON sits in, and the two brackets of the run mark below.

A run of more than :data:`MAX_BLANK_RUN` of the same blank (U+0020, or any character written as
an escape: tabs, newlines, zero-width or bidi characters) is written as one mark with its count,
``⟦200 spaces⟧`` or ``⟦12 × \\u200b⟧``: a long run of plain spaces would otherwise push what
follows it hundreds of columns to the right, out of sight in a block that does not wrap, and a
long run of escapes does the same. The brackets of a mark are always escaped when the call itself
holds them, so a mark is always the gateway's.

The result is still JSON. With each mark replaced by its run (``⟦n spaces⟧`` by n spaces,
``⟦n × e⟧`` by the escape ``e`` n times) it parses back to exactly the same value (an escape
inside a JSON string means the character itself).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

#: Unicode general categories never shown as themselves.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_COMBINING = frozenset({"Mn", "Me"})

#: The brackets of a run's mark (escaped wherever a call holds them).
MARK_OPEN, MARK_CLOSE = "\u27e6", "\u27e7"

#: Characters outside those categories that draw nothing (or confuse Markdown, or a mark).
_HIDDEN_CHARACTERS = frozenset(
    [0x60, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0]
    + [ord(MARK_OPEN), ord(MARK_CLOSE)]
    + list(range(0x180B, 0x1810))  # Mongolian variation selectors and vowel separator
    + list(range(0xFE00, 0xFE10))  # variation selectors
    + list(range(0xE0100, 0xE01F0))  # variation selectors supplement
)

#: Combining marks shown as themselves in a row; the rest of the run is escaped.
MAX_COMBINING_RUN = 2
#: Blanks of one kind shown as themselves in a row; a longer run is one mark with its count.
MAX_BLANK_RUN = 3

#: JSON's own two-character escapes (the quote and the backslash are not hidden characters).
_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
#: A string in ``json.dumps`` output (it escapes every quote, backslash and control inside one).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LONG_SPACES = " " * (MAX_BLANK_RUN + 1)


def hidden(ch: str) -> bool:
    """Would this character be hidden from, or mislead, a person reading it?"""
    if ch == " ":
        return False
    cp = ord(ch)
    if 0x21 <= cp < 0x7F:
        return cp == 0x60
    return cp in _HIDDEN_CHARACTERS or unicodedata.category(ch) in _HIDDEN_CATEGORIES


def escape(ch: str) -> str:
    """``\\uXXXX`` (a surrogate pair above U+FFFF), as JSON writes it."""
    cp = ord(ch)
    if cp > 0xFFFF:
        cp -= 0x10000
        return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"
    return f"\\u{cp:04x}"


def mark(count: int, shown: str) -> str:
    """The mark of a run: ``⟦count spaces⟧``, or ``⟦count × escape⟧``."""
    if shown == " ":
        return f"{MARK_OPEN}{count} spaces{MARK_CLOSE}"
    return f"{MARK_OPEN}{count} \u00d7 {shown}{MARK_CLOSE}"


@dataclass(slots=True)
class Shown:
    """A value as shown, and what a person should be warned of in it."""

    text: str = ""
    #: Characters of names and strings written as escapes (JSON's own, such as ``\\n``, too).
    escaped: int = 0
    #: Runs written as one mark, and the characters in them.
    runs: int = 0
    in_runs: int = 0


def _show_string(text: str, tally: Shown) -> str:
    """The inside of a JSON string for ``text``: escapes, and marks for long runs."""
    out: list[str] = []
    marks = 0  # combining marks in a row
    run_char, run_shown, run_len = "", "", 0

    def flush() -> None:
        if run_len > MAX_BLANK_RUN:
            out.append(mark(run_len, run_shown))
            tally.runs += 1
            tally.in_runs += run_len
        elif run_len:
            out.append(run_shown * run_len)

    for ch in text:
        marks = marks + 1 if not ch.isascii() and unicodedata.category(ch) in _COMBINING else 0
        blank = True
        if ch == " ":
            shown = ch
        elif ch in _SHORT:
            shown = _SHORT[ch]
            blank = ch not in '"\\'
        elif hidden(ch) or marks > MAX_COMBINING_RUN:
            shown = escape(ch)
        else:
            shown, blank = ch, False
        if blank and ch != " ":
            tally.escaped += 1
        if blank and ch == run_char:
            run_len += 1
            continue
        flush()
        if blank:
            run_char, run_shown, run_len = ch, shown, 1
        else:
            run_char, run_len = "", 0
            out.append(shown)
    flush()
    return "".join(out)


def _plain(token: str) -> bool:
    """A string token of ``json.dumps`` output shown as it is (the common case)."""
    return (
        token.isascii()
        and "\\" not in token
        and "`" not in token
        and "\x7f" not in token
        and _LONG_SPACES not in token
    )


def show(value: Any) -> Shown:
    """``value`` as indented JSON with hidden characters escaped and long runs marked, and the
    counts the question warns of.

    Raw newlines in ``json.dumps`` output are its own layout, and so are the spaces of the
    indentation; everything else is a string, a number or a literal, so only strings change."""
    tally = Shown()
    text = json.dumps(value, ensure_ascii=False, indent=2)

    def one(match: re.Match[str]) -> str:
        token = match.group()
        if _plain(token):
            return token
        return '"' + _show_string(json.loads(token), tally) + '"'

    tally.text = _STRING.sub(one, text)
    return tally


def show_json(value: Any) -> str:
    """``value`` as the person reads it (see :func:`show`)."""
    return show(value).text


def count_hidden(value: Any) -> int:
    """How many characters of the names and strings in ``value`` are shown escaped (the controls
    JSON escapes itself, such as a newline, included)."""
    return show(value).escaped
