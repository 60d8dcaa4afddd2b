"""What an untrusted value may look like on the operator's terminal (docs/SECURITY.md).

Tool names and sequences recorded from agent runs, queries, error messages, judge and reviewer reasons, actors,
skill names, descriptions and contents, tenant ids: the CLI prints them through Rich, whose markup would read
``[/]`` as a tag (a ``MarkupError`` that takes a whole listing down), ``[conceal]…`` as hidden text and
``[link=…]`` as a link; and a control character would reach the terminal raw (``ESC [8m`` hides what follows, an
OSC 8 sequence makes a link, U+202E reverses the text, U+E000 shows as nothing inside a word). :func:`safe` is
every such value as markup that shows it literally; :func:`visible` is the same text without the markup escaping
(for ``markup=False``, ``Text`` and plain ``print``). Neither changes what is stored, and ``--json`` prints the
exact data.

This module needs none of the pipeline (the agent-only ``skillflow migrate`` uses :func:`visible`).
"""

from __future__ import annotations

import unicodedata

from skillflow.kernel.textnorm import hidden_kinds

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_SHOWN_CATEGORIES = frozenset({"Zl", "Zp", "Cs"})  # line/paragraph separators, lone surrogates


def _escaped(ch: str) -> str:
    cp = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _hidden(ch: str, multiline: bool) -> bool:
    if ch in _NAMED:
        return not (multiline and ch != "\r")
    return bool(hidden_kinds(ch)) or unicodedata.category(ch) in _SHOWN_CATEGORIES


def visible(value: object, *, multiline: bool = False) -> str:
    """``value`` as text with every control character shown as an escape (``\\x1b``, ``\\u202e``): C0 and DEL,
    C1, bidi and zero-width/format characters, Unicode tags, variation selectors, line separators, private-use,
    unassigned and noncharacter code points (``\\ue000``: a blank, a box or a vendor's glyph on a terminal). Tabs
    and newlines too, unless ``multiline`` (a SKILL.md, a diff) keeps them. Printable text is returned as is."""
    text = str(value)
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escaped(ch) if _hidden(ch, multiline) else ch for ch in text)


def safe(value: object, *, multiline: bool = False) -> str:
    """``value`` as Rich markup that prints it literally: :func:`visible`, then ``[``/``\\`` escaped. For every
    untrusted value in a ``console.print`` string, a table cell, a title or a caption."""
    from rich.markup import escape  # here, not at the top: the agent-only install has no rich

    return escape(visible(value, multiline=multiline))
