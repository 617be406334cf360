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
  the JSON sits in.

The result is still JSON and parses back to exactly the same value (an escape inside a JSON
string means the character itself).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

#: Unicode general categories never shown as themselves.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_COMBINING = frozenset({"Mn", "Me"})

#: Characters outside those categories that draw nothing (or confuse Markdown).
_HIDDEN_CHARACTERS = frozenset(
    [0x60, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0]
    + list(range(0x180B, 0x1810))  # Mongolian variation selectors and vowel separator
    + list(range(0xFE00, 0xFE10))  # variation selectors
    + list(range(0xE0100, 0xE01F0))  # variation selectors supplement
)

#: Combining marks shown as themselves in a row; the rest of the run is escaped.
MAX_COMBINING_RUN = 2


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


def _hidden_in(text: str) -> int:
    count = run = 0
    for ch in text:
        combining = not ch.isascii() and unicodedata.category(ch) in _COMBINING
        run = run + 1 if combining else 0
        count += hidden(ch) or run > MAX_COMBINING_RUN
    return count


def count_hidden(value: Any) -> int:
    """How many characters of the names and strings in ``value`` are shown escaped (the controls
    JSON escapes itself, such as a newline, included)."""
    if isinstance(value, str):
        return (
            0 if value.isascii() and value.isprintable() and "`" not in value else _hidden_in(value)
        )
    if isinstance(value, dict):
        return sum(count_hidden(k) + count_hidden(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(count_hidden(v) for v in value)
    return 0


def show_json(value: Any) -> str:
    """``value`` as indented JSON with hidden characters escaped.

    Raw newlines in ``json.dumps`` output are its own layout (it escapes every control character
    inside strings), and so are the spaces of the indentation; nothing else of its output lies
    outside a string, so escaping is only ever done inside strings."""
    text = json.dumps(value, ensure_ascii=False, indent=2)
    if text.isascii() and "`" not in text and "\x7f" not in text:
        return text
    out: list[str] = []
    run = 0
    for ch in text:
        if ch == "\n":
            out.append(ch)
            run = 0
            continue
        combining = not ch.isascii() and unicodedata.category(ch) in _COMBINING
        run = run + 1 if combining else 0
        out.append(escape(ch) if hidden(ch) or run > MAX_COMBINING_RUN else ch)
    return "".join(out)
