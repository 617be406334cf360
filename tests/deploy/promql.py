"""The series a PromQL expression reads: metric names, the labels matched on each, and the labels
it groups or joins by. A small tokenizer, enough for the project's rules and dashboard (no
``offset``/``@`` modifiers, no subqueries); Prometheus itself checks the full syntax
(``promtool check rules``, the live query tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<variable>\$\{?\w+\}?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<punct>[{}(),])
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=])
    """,
    re.VERBOSE,
)

#: Words that are never metric names: aggregation operators (``sum by (x) (...)`` puts a word
#: between the name and its parenthesis), binary and set operators, modifiers, special numbers.
KEYWORDS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
    }
)
#: Keywords followed by a parenthesised list of label names.
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


@dataclass
class Selector:
    metric: str
    #: Label names its matchers use (``{reason="integrity"}`` -> {"reason"}).
    labels: set[str] = field(default_factory=set)


@dataclass
class Reads:
    selectors: list[Selector] = field(default_factory=list)
    #: Label names in by/without/on/ignoring/group_left/group_right lists.
    grouping: set[str] = field(default_factory=set)

    @property
    def metrics(self) -> set[str]:
        return {s.metric for s in self.selectors}


def tokens(expr: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot read PromQL at {expr[pos : pos + 30]!r}")
        kind = match.lastgroup or ""
        if kind not in ("ws", "comment"):
            out.append((kind, match.group()))
        pos = match.end()
    return out


def _matchers(toks: list[tuple[str, str]], start: int) -> tuple[set[str], int]:
    """The label names of the ``{...}`` opening at ``start``, and the index after it."""
    labels: set[str] = set()
    i = start + 1
    while toks[i] != ("punct", "}"):
        kind, text = toks[i]
        if kind == "ident" and toks[i + 1][0] == "op":
            labels.add(text)
        i += 1
    return labels, i + 1


def reads(expr: str) -> Reads:
    toks = tokens(expr)
    toks.append(("end", ""))
    found = Reads()
    i = 0
    while i < len(toks) - 1:
        kind, text = toks[i]
        following = toks[i + 1]
        if kind == "ident" and text in GROUPING and following == ("punct", "("):
            i += 2
            while toks[i] != ("punct", ")"):
                if toks[i][0] == "ident":
                    found.grouping.add(toks[i][1])
                i += 1
            i += 1
        elif kind == "ident" and following == ("punct", "("):
            i += 1  # a function or an aggregation
        elif kind == "ident" and text.lower() not in KEYWORDS:
            selector = Selector(text)
            i += 1
            if toks[i] == ("punct", "{"):
                selector.labels, i = _matchers(toks, i)
            found.selectors.append(selector)
        elif (kind, text) == ("punct", "{"):
            raise ValueError(f"a selector without a metric name in {expr!r}")
        else:
            i += 1
    return found
