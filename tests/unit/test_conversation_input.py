"""``Conversation.from_messages`` reads whatever an agent hands it: malformed entries are skipped, never raised on."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.injection.conversation import Conversation


class Hostile:
    """An object whose conversions raise, as a broken SDK object might (its repr works: hypothesis prints it)."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        return "Hostile()"

    def __iter__(self) -> Any:
        raise RuntimeError("no iter")


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.just(Hostile())
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["role", "content", "tool_calls", "function", "name", "arguments", "id", "tool_call_id", "x"]
            )
            | st.text(max_size=5),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)
roles = st.sampled_from(["user", "assistant", "tool", "system", None, 3])
# Anthropic content blocks: tool_use / tool_result / text / kinds not read, any field any value.
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_use", "tool_result", "text", "server_tool_use", "image"]) | values},
    optional={"id": values, "name": values, "input": values, "tool_use_id": values, "content": values,
              "is_error": values, "text": values},
)  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries({"role": roles}, optional={"content": values, "tool_calls": values, "tool_call_id": values})
    | st.fixed_dictionaries({"role": roles, "content": st.lists(blocks | values, max_size=4)})
    | values,
    max_size=8,
)


@settings(deadline=None)
@given(messages)
def test_any_message_list_reads_without_raising(msgs: list[Any]) -> None:
    conv = Conversation.from_messages(msgs)
    assert all(isinstance(u, str) for u in conv.user_messages)
    assert all(isinstance(c.tool, str) and c.tool for c in conv.calls)


@settings(deadline=None)
@given(values)
def test_a_non_list_reads_as_an_empty_conversation_or_its_readable_part(doc: Any) -> None:
    Conversation.from_messages(doc)


def test_hostile_entries_are_skipped_and_good_ones_kept() -> None:
    msgs = [
        {"role": "user", "content": "cancel my booking"},
        {"role": "assistant", "tool_calls": 5},
        {"role": "assistant", "tool_calls": [{"id": Hostile(), "function": {"name": Hostile(), "arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "get_user_details", "arguments": 7}}]},
        {"role": "tool", "tool_call_id": "c1", "content": Hostile()},
        Hostile(),
    ]
    conv = Conversation.from_messages(msgs)
    assert conv.user_messages == ("cancel my booking",)
    assert [c.tool for c in conv.calls] == ["get_user_details"]
