"""The conversation so far, as retrieval sees it: earlier user messages and the tool calls already made.

An agent calls ``Skillflow.prepare(query, user_id, conversation=...)`` before every model call; the
conversation gives retrieval the request's context (the view the tenant's fitted rule chose) and the
calls made since the last state-changing call (the prefix a skill's procedure must continue). Build it
from the agent's messages with :meth:`Conversation.from_messages` (OpenAI chat messages or Anthropic content
blocks), or directly.

Done means done (docs/guide/runtime.md, "Which skill, or none"): each call knows how many user messages
came before it, so the request is read from the first user message after the last successful write, and an
intent whose write succeeded with no user message after it is done (:meth:`Conversation.done`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from skillflow.kernel.messages import blank, message_line, message_text, openai_form

LAST = "last"  # the latest user message
RECENT = "recent"  # the last three user messages, newest first, one text
RECENT_MESSAGES = 3
# The characters of a message a view reads: more than the embedding model reads (256 word pieces), and a bound
# on the redaction every model call pays, whatever the length of a message (docs/guide/runtime.md).
MAX_VIEW_CHARS = 2_000


@dataclass(frozen=True)
class ToolCall:
    """One call the agent already made: the tool, its top-level argument keys, whether it errored, and how many
    user messages came before it (``None``: unknown, as in a conversation built without them)."""

    tool: str
    arg_keys: tuple[str, ...] = ()
    errored: bool = False
    users_before: int | None = None


@dataclass(frozen=True)
class Conversation:
    """Earlier user messages (oldest first) and the tool calls already made (in order)."""

    user_messages: tuple[str, ...] = ()
    calls: tuple[ToolCall, ...] = ()

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]]) -> Conversation:
        """From chat messages: ``user`` contents and the ``tool_calls`` of ``assistant`` messages.

        OpenAI chat messages, or Anthropic Messages API ones (an assistant's ``tool_use`` content blocks are its
        calls, the next user message's ``tool_result`` blocks their results), read as the OpenAI messages they
        stand for, as capture reads them (:func:`skillflow.kernel.messages.openai_form`). A user message's
        content is a string or a list of text parts (read as capture reads it); a blank one is not a message, as
        a stored query has no blank line. A call is errored when its ``tool`` reply's text starts with ``Error``
        (the corpora's convention) or it carries an ``error`` (an Anthropic ``is_error`` result), as capture reads
        it. Unknown roles and malformed entries are skipped, never raised on.
        """
        users: list[str] = []
        calls: list[ToolCall] = []
        pending: dict[str, int] = {}
        entries = list(messages) if isinstance(messages, Sequence) and not isinstance(messages, str | bytes) else []
        for entry in entries:
            try:
                read = openai_form(entry, strict=False)
            except Exception:  # noqa: BLE001 - an unreadable entry (hostile __str__, odd types) is skipped
                continue
            for m in read:
                try:
                    _read(m, users, calls, pending)
                except Exception:  # noqa: BLE001 - as above
                    continue
        return cls(tuple(users), tuple(calls))

    def with_request(self, query: str) -> tuple[str, ...]:
        """The user messages including the current request (not repeated when it is already the last one)."""
        users = list(self.user_messages)
        if query.strip() and (not users or users[-1] != query):
            users.append(query)
        return tuple(users)

    def _writes(self, changes_state: Callable[[str], bool]) -> list[ToolCall]:
        """The successful state-changing calls whose place among the user messages is known."""
        return [c for c in self.calls if c.users_before is not None and not c.errored and changes_state(c.tool)]

    def request(self, query: str, changes_state: Callable[[str], bool]) -> tuple[str, ...]:
        """The user messages of the current request: :meth:`with_request` from the first message after the last
        successful write that has one after it, so an earlier request's text cannot choose a skill by itself."""
        messages = self.with_request(query)
        starts = [c.users_before for c in self._writes(changes_state) if c.users_before is not None]
        cut = max((n for n in starts if n < len(messages)), default=0)
        return messages[cut:]

    def done(self, intent: str, query: str, changes_state: Callable[[str], bool]) -> bool:
        """Whether ``intent``'s write already succeeded and no user message (``query`` included) came after it."""
        total = len(self.with_request(query))
        return any(c.tool == intent and (c.users_before or 0) >= total for c in self._writes(changes_state))

    def prefix(self, changes_state: Callable[[str], bool]) -> tuple[str, ...]:
        """Tools called since the last state-changing call (what the next procedure must start with)."""
        out: list[str] = []
        for c in self.calls:
            if changes_state(c.tool) and not c.errored:
                out = []
            else:
                out.append(c.tool)
        return tuple(out)


def view_text(messages: Sequence[str], view: str, form: Callable[[str], str] = lambda t: t) -> str:
    """The text one single-text view embeds (see :mod:`skillflow.injection.views`).

    A message is read as one line (:func:`skillflow.kernel.messages.message_line`), as a stored segment's
    query holds it, its first ``MAX_VIEW_CHARS`` characters only, and ``form`` (redaction) is applied per
    message: stored history and live requests give the same text.
    """
    if view not in (LAST, RECENT):
        raise ValueError(f"unknown view {view!r}; expected {LAST} or {RECENT}")
    need = 1 if view == LAST else RECENT_MESSAGES
    lines = [message_line(m[:MAX_VIEW_CHARS]) for m in messages if m and m.strip()]
    newest: list[str] = []  # only the lines the view reads are redacted, newest first
    for line in reversed(lines):
        text = " ".join(form(line).split())
        if text:
            newest.append(text)
            if len(newest) == need:
                break
    return " | ".join(newest)


def _read(m: Any, users: list[str], calls: list[ToolCall], pending: dict[str, int]) -> None:
    """Fold one message into the user messages, the calls and the open call ids (plain strings only)."""
    if not isinstance(m, Mapping):
        return
    role = m.get("role")
    if role == "user" and isinstance(m.get("content"), str | list | tuple):
        text = message_text(m["content"])
        if text.strip():
            users.append(text)
    elif role == "assistant" and isinstance(m.get("tool_calls"), Sequence):
        for tc in m["tool_calls"]:
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
                continue
            calls.append(ToolCall(fn["name"], _arg_keys(fn.get("arguments")), users_before=len(users)))
            if isinstance(tc.get("id"), str) and tc["id"]:
                pending[tc["id"]] = len(calls) - 1
    elif role == "tool" and (message_text(m.get("content")).startswith("Error") or not blank(m.get("error"))):
        call_id = m.get("tool_call_id")
        idx = pending.get(call_id, len(calls) - 1) if isinstance(call_id, str) else len(calls) - 1
        if 0 <= idx < len(calls):
            calls[idx] = replace(calls[idx], errored=True)


def _arg_keys(arguments: Any) -> tuple[str, ...]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments else {}
        except ValueError:
            return ()
    return tuple(sorted(k for k in arguments if isinstance(k, str))) if isinstance(arguments, Mapping) else ()
