"""Split SQL*Plus scripts into statements; find string literals, comments and EXECUTE IMMEDIATE DDL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Kind = Literal["sql", "plsql", "sqlplus", "error"]
SQLPLUS = {"set", "whenever", "prompt", "spool", "rem", "remark", "show", "exit", "quit", "define", "undefine"}
PLSQL_START = re.compile(
    r"(begin|declare|create\s+(or\s+replace\s+)?(procedure|function|package|trigger|type))\b", re.I
)
Q_CLOSE = {"[": "]", "(": ")", "{": "}", "<": ">"}


@dataclass(frozen=True)
class Statement:
    """One statement of a script: its text (no terminator), first line (1-based) and kind."""

    text: str
    line: int
    kind: Kind
    offset: int = 0


def literals(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, value)`` of every string literal ('…' with '' escapes, and q'[…]' quotes)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"':
            j = text.find('"', i + 1)
            i = n if j < 0 else j + 1
        elif c in "qQ" and text.startswith("'", i + 1) and i + 2 < n and (i == 0 or not _word(text[i - 1])):
            close = Q_CLOSE.get(text[i + 2], text[i + 2]) + "'"
            j = text.find(close, i + 3)
            end = n if j < 0 else j + 2
            yield i, end, text[i + 3 : end - 2]
            i = end
        elif c == "'":
            j, parts = i + 1, []
            while j < n:
                k = text.find("'", j)
                if k < 0:
                    j = n
                    break
                parts.append(text[j:k])
                if text.startswith("''", k):
                    parts.append("'")
                    j = k + 2
                    continue
                j = k + 1
                break
            yield i, j, "".join(parts)
            i = j
        else:
            i += 1


def _word(c: str) -> bool:
    return c.isalnum() or c in "_$#"


def mask(text: str) -> str:
    """``text`` with comments and string contents blanked (quotes, newlines and length kept) for pattern rules."""
    out = list(text)
    literal_spans = [(s, e) for s, e, _ in literals(text)]
    _blank(out, literal_spans)
    for s, e in literal_spans:
        out[s] = out[e - 1] = "'"
    comments = re.finditer(r"--[^\n]*|/\*.*?\*/", "".join(out), re.S)
    _blank(out, [(m.start(), m.end()) for m in comments])
    return "".join(out)


def _blank(chars: list[str], spans: list[tuple[int, int]]) -> None:
    for start, end in spans:
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "


def split_script(text: str) -> list[Statement]:
    """Statements of a SQL*Plus script: SQL ends at ``;``, PL/SQL blocks at a line holding only ``/``."""
    masked = mask(text)
    out: list[Statement] = []
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and masked[pos].isspace():
            pos += 1
        if pos >= n:
            break
        line = masked.count("\n", 0, pos) + 1
        eol = masked.find("\n", pos)
        eol = n if eol < 0 else eol
        first = masked[pos:eol].strip()
        word = first.split()[0].lower().rstrip(";") if first.split() else ""
        if word in SQLPLUS or first.startswith("@"):
            out.append(Statement(text[pos:eol].strip(), line, "sqlplus", pos))
            pos = eol + 1
        elif first == "/":
            out.append(Statement("stray '/' re-runs the previous statement", line, "error", pos))
            pos = eol + 1
        elif PLSQL_START.match(masked, pos):
            m = re.compile(r"^[ \t]*/[ \t]*$", re.M).search(masked, pos)
            if m is None:
                out.append(Statement("PL/SQL block not terminated by a line holding only '/'", line, "error", pos))
                out.append(Statement(text[pos:], line, "plsql", pos))
                break
            out.append(Statement(text[pos : m.start()].rstrip(), line, "plsql", pos))
            pos = m.end()
        else:
            semi = masked.find(";", pos)
            if semi < 0:
                if out:
                    out.append(Statement("statement not terminated by ';'", line, "error", pos))
                out.append(Statement(text[pos:].strip(), line, "sql", pos))
                break
            out.append(Statement(text[pos:semi].strip(), line, "sql", pos))
            pos = semi + 1
    return out


def dynamic_sql(stmt: Statement) -> list[tuple[str, int]]:
    """``(sql, line)`` for each ``EXECUTE IMMEDIATE '<literal>'`` of a PL/SQL block (literal unescaped)."""
    found = []
    masked = mask(stmt.text)
    starts = {start: (end, value) for start, end, value in literals(stmt.text)}
    for m in re.finditer(r"\bexecute\s+immediate\s+", masked, re.I):
        if m.end() in starts:
            _, value = starts[m.end()]
            # the literal's content starts on the line after the opening quote when it begins with a newline
            lead = len(value) - len(value.lstrip("\n"))
            line = stmt.line + stmt.text.count("\n", 0, m.end()) + lead
            found.append((value.strip(), line))
    return found
