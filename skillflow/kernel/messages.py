"""A chat message's text, a user message as one line of a stored query, and either chat format as OpenAI's.

A recorded conversation's procedure stores its user messages as one query, a message a line
(docs/guide/runtime.md, "Conversations"). A message that spans lines is stored on one line, its line breaks
read as spaces, so the stored query keeps where each message starts; the live request is read message by
message the same way, and both sides give the applicability rule the same texts and the same openings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from skillflow.kernel.errors import InputError


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
        parts = [p.get("text") for p in map(as_mapping, content) if p is not None]
        return "\n".join(str.__str__(p) for p in parts if isinstance(p, str))
    try:
        text = str(content)
    except Exception:  # noqa: BLE001 - a caller's object whose __str__ raises has no text
        return ""
    return text if isinstance(text, str) else ""


def message_line(text: str) -> str:
    """One user message as one line: its line breaks as spaces."""
    return text.replace("\r\n", " ").replace("\n", " ")


# -- the two chat formats ---------------------------------------------------------------------------------------
# An agent keeps its conversation in the form of its provider's API: OpenAI chat messages (an assistant's
# ``tool_calls``, a ``tool`` message per result) or Anthropic Messages API content blocks (an assistant's
# ``tool_use`` blocks, the next user message's ``tool_result`` blocks). Both are read as OpenAI chat messages, so
# one conversation gives the same calls, procedures and runs in either form (docs/guide/runtime.md,
# "Conversations").

TOOL_USE = "tool_use"
TOOL_RESULT = "tool_result"


class UnreadableMessage(InputError):
    """A message whose tool use is in a form not read (raised when reading strictly). The message names the
    position, never a value; capture refuses the conversation with it (``ConversationError``)."""


def _blocks(content: Any) -> TypeGuard[Sequence[Any]]:
    """Whether ``content`` is a list of content blocks (not text)."""
    return isinstance(content, Sequence) and not isinstance(content, str | bytes | bytearray)


def _tool_like(kind: Any, *words: str) -> bool:
    """Whether a block's or an item's ``type`` names tool use (``server_tool_use``, ``function_call``, ...)."""
    if not isinstance(kind, str):
        return False
    low = str.lower(kind)
    return any(w in low for w in ("tool", "function", *words))


def _foreign(message: Mapping[str, Any], i: int) -> None:
    """Refuse tool use in a form neither format has (the legacy ``function_call``, OpenAI Responses API items)."""
    role = message.get("role")
    if role == "function" or not blank(message.get("function_call")):
        raise UnreadableMessage(
            f"messages[{i}] uses the legacy function_call format, which is not read: use tool_calls"
        )
    if not isinstance(role, str) and _tool_like(message.get("type"), "call"):
        raise UnreadableMessage(
            f"messages[{i}] is a tool item of a format not read (OpenAI chat messages and Anthropic content blocks are)"
        )


def sdk_dump(value: Any) -> Any:
    """An SDK object's JSON form, as its own SDK sends it (the ``openai``/``anthropic`` clients dump a pydantic
    model with ``exclude_unset``, ``mode="json"`` and its ``__api_exclude__``): a message or content block appended
    to the history as the SDKs' documentation does (``completion.choices[0].message``, ``response.content``,
    ``ollama``'s ``response.message``). None for anything else, or when dumping fails."""
    try:
        dump = getattr(value, "model_dump", None)
        if not callable(dump):
            return None
        out = dump(mode="json", exclude_unset=True, exclude=getattr(value, "__api_exclude__", None))
    except Exception:  # noqa: BLE001 - a caller's object: read as its text instead
        return None
    return out if isinstance(out, dict | list) else None


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """A message or content block as a mapping: itself, an SDK object's dict (:func:`sdk_dump`), else None."""
    if isinstance(value, Mapping):
        return value
    dumped = sdk_dump(value)
    return dumped if isinstance(dumped, dict) else None


def _not_read(i: int, j: int) -> UnreadableMessage:
    return UnreadableMessage(
        f"messages[{i}].content[{j}] is a tool block of a kind not read (tool_use from the assistant, tool_result "
        "from the user)"
    )


def _not_a_block(i: int, j: int) -> UnreadableMessage:
    return UnreadableMessage(
        f"messages[{i}].content[{j}] must be a mapping (a content block as a dict, e.g. model_dump())"
    )


def _sorted_blocks(
    blocks: Sequence[Any], wanted: str, i: int, strict: bool
) -> tuple[list[tuple[int, Mapping[str, Any]]], list[Any]]:
    """The content blocks of message ``i`` of type ``wanted`` (with their positions), and the others kept as they
    are. A block that is not a mapping is skipped (strict: refused, text excepted), and so is a tool block of
    another kind (strict: refused)."""
    found: list[tuple[int, Mapping[str, Any]]] = []
    others: list[Any] = []
    for j, block in enumerate(blocks):
        if isinstance(block, str):
            continue
        read = as_mapping(block)
        if read is None:
            if strict:
                raise _not_a_block(i, j)
            continue
        kind = read.get("type")
        if kind == wanted:
            found.append((j, read))
        elif strict and _tool_like(kind):
            raise _not_read(i, j)
        else:
            others.append(read)
    return found, others


def _assistant(message: Mapping[str, Any], blocks: Sequence[Any], i: int, strict: bool) -> Mapping[str, Any]:
    """An assistant message whose content holds ``tool_use`` blocks, as the OpenAI message with ``tool_calls``."""
    calls: list[dict[str, Any]] = []
    uses, kept = _sorted_blocks(blocks, TOOL_USE, i, strict)
    for j, block in uses:
        name = block.get("name")
        if not isinstance(name, str) or not str.strip(name):
            if strict:
                raise UnreadableMessage(f"messages[{i}].content[{j}] has no tool name")
            continue
        function = {"name": name, "arguments": block.get("input")}
        calls.append({"id": block.get("id"), "type": "function", "function": function})
    if not calls:
        return message
    if not blank(message.get("tool_calls")):
        if strict:
            raise UnreadableMessage(f"messages[{i}] holds both tool_calls and tool_use blocks")
        return message
    return {"role": "assistant", "content": kept or None, "tool_calls": calls}


def _user(message: Mapping[str, Any], blocks: Sequence[Any], i: int, strict: bool) -> list[Mapping[str, Any]]:
    """A user message whose content holds ``tool_result`` blocks, as the OpenAI ``tool`` messages (in order), then
    the user message of its other blocks (its text), if any."""
    results: list[Mapping[str, Any]] = []
    found, rest = _sorted_blocks(blocks, TOOL_RESULT, i, strict)
    for _, block in found:
        content = block.get("content")
        reply: dict[str, Any] = {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content}
        if block.get("is_error") is True:  # the result text is the error, as a tool message's ``error`` field
            reply["error"] = message_text(content) or "Error"
        results.append(reply)
    if not results:
        return [message]
    return results + ([{"role": "user", "content": rest}] if rest else [])


def openai_form(message: Any, i: int = 0, *, strict: bool = True) -> list[Any]:
    """One message of either format as the OpenAI chat messages it stands for (most often itself).

    ``strict``: tool use in a form not read raises :class:`UnreadableMessage` naming position ``i`` (a content
    block that is not a mapping, such as an SDK object appended as is; a tool block of another kind, such as
    Anthropic's server tools; the legacy ``function_call``; an OpenAI Responses API item). Not strict, such blocks
    are skipped. Anything that is not a mapping is returned as it is, for the caller to refuse or skip."""
    read = as_mapping(message)  # an SDK message object (``completion.choices[0].message``) as its SDK sends it
    if read is None:
        return [message]
    message = read
    if strict:
        _foreign(message, i)
    role, content = message.get("role"), message.get("content")
    if role not in ("assistant", "user") or not _blocks(content):
        return [message]
    blocks = list(content)
    if role == "assistant":
        return [_assistant(message, blocks, i, strict)]
    return _user(message, blocks, i, strict)


def chat_messages(messages: Sequence[Any], *, strict: bool = True) -> list[tuple[int, Any]]:
    """``messages`` (either format) as OpenAI chat messages, each with the position in ``messages`` it came from.

    ``strict`` as in :func:`openai_form`; not strict, a message that cannot be read at all is skipped."""
    out: list[tuple[int, Any]] = []
    for i, message in enumerate(messages):
        if strict:
            out += [(i, m) for m in openai_form(message, i)]
            continue
        try:
            out += [(i, m) for m in openai_form(message, i, strict=False)]
        except Exception:  # noqa: BLE001 - read leniently (prepare): an unreadable entry is skipped, never raised on
            continue
    return out
