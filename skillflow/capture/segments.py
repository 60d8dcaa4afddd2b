"""A conversation → procedures anchored on state-changing calls (docs/guide/runtime.md, "Conversations").

The conversation is OpenAI chat messages or Anthropic Messages API content blocks (``tool_use`` / ``tool_result``),
read as the OpenAI messages they stand for (:func:`skillflow.kernel.messages.chat_messages`): one conversation
gives the same procedures in either form, and tool use in a form neither has is refused, naming the position.

A segment is every tool call since the previous state-changing call up to and including the next one, across
user turns; its query is the user messages since the previous segment closed, up to that call, one a line
(a message's own line breaks read as spaces, :func:`skillflow.kernel.messages.message_line`, so the query
keeps where each message starts). A failed write the agent retries with the same tool next (no-op tools
skipped) does not close the segment: the retry does. Calls after the last write form one ``read-only``
segment whose query is the user messages before its last call; a conversation without a tool call has no
segment.

One call reads at most ``MAX_MESSAGES`` messages (the bound on its work): of a longer conversation, the procedures
closed within its first ``MAX_MESSAGES`` messages, read as a conversation still going on (:func:`too_long` names
the rest).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillflow.kernel.errors import InputError
from skillflow.kernel.messages import UnreadableMessage, blank, chat_messages, message_line, message_text
from skillflow.kernel.models import Step
from skillflow.kernel.state import NOOP_TOOLS, READ_VERBS, WRITE_VERBS, changes_state, verb

__all__ = [
    "NO_RESULT",
    "READ_ONLY",
    "READ_VERBS",
    "RUN_PREFIX",
    "WRITE_VERBS",
    "ConversationError",
    "Segment",
    "changes_state",
    "segment_conversation",
    "segment_run_id",
    "too_long",
    "verb",
]

READ_ONLY = "read-only"
RUN_PREFIX = "conv-"  # segment_run_id's ids: record_run refuses a caller's run id that starts with it
NO_RESULT = "no tool result recorded"
ERROR_PREFIX = "Error"
MAX_MESSAGES = 5000  # the messages one call reads (docs/guide/runtime.md, "Conversations")


class ConversationError(InputError):
    """A conversation that cannot be read; the message names the position, never a value."""


@dataclass(frozen=True)
class Segment:
    """One procedure of a conversation: its user messages, its calls, the write it ends with, its position."""

    query: str
    steps: list[Step]
    intent: str  # the closing state-changing tool, or READ_ONLY
    index: int


def _arguments(raw: Any) -> Any:
    if raw is None:
        return {}
    if not isinstance(raw, str):
        return raw
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {"_raw": raw}  # a broken call stays visible in the signature (argument shape ["_raw"])


def _result(message: Mapping[str, Any] | None) -> tuple[Any, str | None, str | None]:
    """(result, error, error_class) of a tool message; a missing message is an error of its own."""
    if message is None:
        return None, NO_RESULT, "Error:no_result"
    if not blank(message.get("error")):
        return None, message_text(message.get("error")) or ERROR_PREFIX, None
    content = message.get("content")
    text = message_text(content)
    if text.startswith(ERROR_PREFIX):
        return None, text, None
    if isinstance(content, str):
        try:
            return json.loads(content), None, None
        except ValueError:
            return content, None, None
    if isinstance(content, list):  # OpenAI content parts
        return text, None, None
    return content, None, None


def _calls(chat: list[tuple[int, Any]]) -> list[tuple[str, int, Any]]:
    """Ordered events: ``("user", i, text)`` and ``("call", i, Step)``, each call paired with its tool message;
    ``chat`` is the conversation in OpenAI form, each message with its position in the caller's list."""
    events: list[tuple[str, int, Any]] = []
    for k, (i, message) in enumerate(chat):
        if not isinstance(message, Mapping):
            raise ConversationError(f"messages[{i}] must be a mapping")
        role = message.get("role")
        if role == "user":
            text = message_line(message_text(message.get("content")))
            if text.strip():  # a blank message is no message (nor is it live, ``Conversation.from_messages``)
                events.append(("user", i, text))
            continue
        calls = message.get("tool_calls") if role == "assistant" else None
        if not calls:
            continue
        if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
            raise ConversationError(f"messages[{i}].tool_calls must be a list")
        replies: list[Mapping[str, Any]] = []
        for _, later in _after(chat, k):
            if not isinstance(later, Mapping) or later.get("role") != "tool":
                break
            replies.append(later)
        by_id = {r.get("tool_call_id"): r for r in replies if r.get("tool_call_id") not in (None, "")}
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if not isinstance(name, str) or not name.strip():
                raise ConversationError(f"messages[{i}].tool_calls[{j}] has no function name")
            assert isinstance(function, Mapping)
            call_id = call.get("id")
            reply = by_id.get(call_id) if call_id not in (None, "") and len(by_id) == len(replies) else None
            if reply is None and j < len(replies):
                reply = replies[j]  # ids missing or not unique (τ-bench): the tool messages in call order
            result, error, error_class = _result(reply)
            step = Step(name.strip(), _arguments(function.get("arguments")), result, error, error_class)
            events.append(("call", i, step))
    return events


def _after(chat: list[tuple[int, Any]], k: int) -> Iterator[tuple[int, Any]]:
    """The messages after the ``k``-th, read one by one (a slice would copy the rest of the conversation for every
    assistant message: quadratic in its length)."""
    for n in range(k + 1, len(chat)):
        yield chat[n]


def too_long(messages: Sequence[Any]) -> str | None:
    """The refusal of what :func:`segment_conversation` does not read: messages past the first ``MAX_MESSAGES``."""
    if len(messages) <= MAX_MESSAGES:
        return None
    return (
        f"a conversation is read up to its first {MAX_MESSAGES} messages: the procedures not closed within them "
        "were not stored"
    )


def segment_conversation(
    messages: Sequence[Mapping[str, Any]], declared: Mapping[str, bool] | None = None, *, complete: bool = True
) -> list[Segment]:
    """The procedures of a conversation, in order (see the module docstring).

    ``declared`` maps tool names to whether they change state (else the verb rule of
    :func:`skillflow.kernel.state.changes_state`). With ``complete=False`` (a conversation still going on) the
    open tail is left out: the trailing read-only calls, and a failed last write the agent may still retry.
    Of a conversation longer than ``MAX_MESSAGES``, its first ``MAX_MESSAGES`` messages are read, as one still
    going on (:func:`too_long`). Raises :class:`ConversationError` on input it cannot read, tool use in a form
    not read included.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ConversationError("messages must be a list of chat messages")
    if too_long(messages) is not None:
        messages = list(itertools.islice(messages, MAX_MESSAGES))
        complete = False  # the conversation goes on past what is read
    try:
        chat = chat_messages(messages)
    except UnreadableMessage as exc:
        raise ConversationError(str(exc)) from None
    events = _calls(chat)
    calls_only = [e[2] for e in events if e[0] == "call"]
    if not calls_only:
        orphan = next((i for i, m in chat if isinstance(m, Mapping) and m.get("role") == "tool"), None)
        if orphan is not None:  # results of calls kept where neither format keeps them: never "no tool call"
            raise ConversationError(
                f"messages[{orphan}] is a tool result, but no tool call was read (calls are read from an assistant's "
                "tool_calls, or its tool_use content blocks)"
            )
    # The tool of the first call at or after each position that is not a no-op (what a failed write is retried with).
    upcoming: list[str | None] = [None] * (len(calls_only) + 1)
    for n in range(len(calls_only) - 1, -1, -1):
        tool = calls_only[n].tool
        upcoming[n] = upcoming[n + 1] if tool in NOOP_TOOLS else tool
    segments: list[Segment] = []
    steps: list[Step] = []
    queries: list[str] = []
    users_at_last_call = 0
    seen_calls = 0
    for kind, _, value in events:
        if kind == "user":
            queries.append(str(value))
            continue
        assert isinstance(value, Step)
        step = value
        seen_calls += 1
        steps.append(step)
        users_at_last_call = len(queries)
        if not changes_state(step.tool, declared):
            continue
        following = upcoming[seen_calls]
        if step.errored and following == step.tool:
            continue  # a failed write retried with the same tool: the retry closes the segment
        if step.errored and following is None and not complete:
            break  # the agent may still retry it
        segments.append(Segment("\n".join(queries), steps, step.tool, len(segments)))
        steps, queries = [], []
    else:
        if steps and complete:
            # The probe moment of a read-only segment is just before its last call.
            segments.append(Segment("\n".join(queries[:users_at_last_call]), steps, READ_ONLY, len(segments)))
    return segments


def segment_run_id(agent_id: str, user_id: str, conversation_id: str, index: int) -> str:
    """The deterministic run id of segment ``index`` of a tenant's conversation (re-recording converges)."""
    digest = hashlib.sha256(f"{agent_id}\x00{user_id}\x00{conversation_id}".encode("utf-8", "surrogatepass"))
    return f"{RUN_PREFIX}{digest.hexdigest()[:40]}-{index}"
