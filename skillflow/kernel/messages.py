"""A chat message's text, and a user message as one line of a stored query.

A recorded conversation's procedure stores its user messages as one query, a message a line
(docs/guide/runtime.md, "Conversations"). A message that spans lines is stored on one line, its line breaks
read as spaces, so the stored query keeps where each message starts; the live request is read message by
message the same way, and both sides give the applicability rule the same texts and the same openings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def blank(value: Any) -> bool:
    """``None`` or the empty string; never compares a caller's object (its ``__eq__`` may raise or be odd)."""
    return value is None or (isinstance(value, str) and not str.__len__(value))


def message_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list; anything else its ``str``
    (empty when that raises)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return str.__str__(content)
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(str.__str__(p) for p in parts if isinstance(p, str))
    try:
        text = str(content)
    except Exception:  # noqa: BLE001 - a caller's object whose __str__ raises has no text
        return ""
    return text if isinstance(text, str) else ""


def message_line(text: str) -> str:
    """One user message as one line: its line breaks as spaces."""
    return text.replace("\r\n", " ").replace("\n", " ")
