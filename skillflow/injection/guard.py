"""What ``prepare`` accepts: its arguments read without raising, and values made strict, encodable JSON.

A wrong-typed argument is not an exception for the agent: it is recorded as a problem (naming the
parameter, never its value) and the turn degrades to a request without skills (docs/guide/runtime.md,
"When prepare degrades"). Values inside messages are coerced (:func:`json_safe`), never refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skillflow.injection.conversation import Conversation
from skillflow.kernel.messages import as_mapping, message_text, sdk_dump
from skillflow.kernel.textnorm import encodable, id_problem

MAX_RETRIEVAL_CHARS = 20_000  # the query prefix skills are selected on (capture stores as much)


def safe_text(value: Any) -> str:
    """Text for any value, never raising: bytes decode as UTF-8 (errors replaced), a failing ``__str__``
    becomes ``<unprintable T>``."""
    if isinstance(value, str):
        return encodable(str.__str__(value))  # a str subclass's own methods are never called
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a caller's object whose __str__ raises
        return f"<unprintable {type(value).__name__}>"
    return encodable(text) if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


def json_safe(value: Any, _depth: int = 0, _path: frozenset[int] = frozenset()) -> Any:
    """A strict-JSON copy: NaN/inf → null, bytes → ``<n bytes>``, sets/tuples → lists, keys → text, an SDK
    object → its JSON form (:func:`sdk_dump`), other objects → their text, cycles → ``<cycle>``, nesting deeper
    than 50 → ``<nested too deep>``."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return encodable(str.__str__(value))
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if _depth > 50:
        return "<nested too deep>"
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        if id(value) in _path:
            return "<cycle>"
        path = _path | {id(value)}
        try:
            if isinstance(value, Mapping):
                return {safe_text(k): json_safe(v, _depth + 1, path) for k, v in list(value.items())}
            return [json_safe(v, _depth + 1, path) for v in list(value)]
        except Exception:  # noqa: BLE001 - a container that fails while being read
            return f"<unreadable {type(value).__name__}>"
    if id(value) in _path:  # an SDK object whose dump holds it again
        return "<cycle>"
    dumped = sdk_dump(value)
    if dumped is not None:
        return json_safe(dumped, _depth + 1, _path | {id(value)})
    return safe_text(value)


def _items(value: Any, name: str, problems: list[str]) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        problems.append(f"{name} must be a list")
        return []
    try:
        return list(value)
    except Exception as exc:  # noqa: BLE001 - an iterable that fails while iterating
        problems.append(f"{name} could not be read ({type(exc).__name__})")
        return []


@dataclass
class PrepareArgs:
    """``prepare``'s arguments as the assembly can use them, and the problems found reading them."""

    query: str
    user_id: str
    provider: str
    system_prompt: str | None
    conversation: Conversation | None
    history: list[dict[str, Any]]
    memories: list[Any]
    workflows: list[Any]
    problems: list[str] = field(default_factory=list)

    @classmethod
    def unreadable(cls, providers: Sequence[str], exc: BaseException) -> PrepareArgs:
        """The arguments when reading them failed anyway: an empty request, the error class named."""
        problem = f"arguments could not be read ({type(exc).__name__})"
        return cls("", "", providers[0], None, None, [], [], [], [problem])

    @classmethod
    def read(
        cls,
        query: Any,
        user_id: Any,
        *,
        providers: Sequence[str],
        provider: Any,
        system_prompt: Any,
        conversation: Any,
        history: Any,
        memories: Any,
        workflows: Any,
    ) -> PrepareArgs:
        """Never raises; every problem names a parameter (or a position), never a value."""
        problems: list[str] = []
        if not isinstance(query, str):
            problems.append("query must be a string")
        if not isinstance(user_id, str):
            problems.append("user_id must be a string")
        elif problem := id_problem(str.__str__(user_id)):  # capture refuses it too: no skill was learned for it
            problems.append(f"user_id {problem}")
        known = isinstance(provider, str) and str.__str__(provider) in providers
        if not known:
            problems.append(f"unknown provider; expected one of {', '.join(providers)}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            problems.append("system_prompt must be a string")
        if conversation is not None and not isinstance(conversation, Conversation):
            problems.append("conversation must be a Conversation")
            conversation = None
        messages: list[dict[str, Any]] = []
        answers_dropped = False  # the tool results right after a dropped entry answer it: dropped with it
        for i, message in enumerate(_items(history, "history", problems)):
            safe = json_safe(as_mapping(message))
            role = safe.get("role") if isinstance(safe, dict) else None
            if answers_dropped and role == "tool":
                problem = "answers a dropped entry"
            elif not isinstance(safe, dict):
                problem = "is not a readable message mapping"
            elif not isinstance(role, str) or not role:
                problem = "has no role"
            else:
                messages.append(safe)
                answers_dropped = False
                continue
            problems.append(f"history[{i}] {problem}; dropped")
            answers_dropped = True
        return cls(
            query=safe_text("" if query is None else query),
            user_id=safe_text(user_id),
            provider=str.__str__(provider) if known else providers[0],
            # Anthropic's text blocks (``cache_control``) as their text, not a repr: the turn still degrades.
            system_prompt=None
            if system_prompt is None
            else safe_text(message_text(system_prompt) if isinstance(system_prompt, list) else system_prompt),
            conversation=conversation,
            history=messages,
            memories=_items(memories, "memories", problems),
            workflows=_items(workflows, "workflows", problems),
            problems=problems,
        )
