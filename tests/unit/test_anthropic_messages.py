"""An Anthropic agent's conversation reads as its OpenAI twin: ``tool_use`` / ``tool_result`` content blocks are calls.

An Anthropic Messages API agent keeps ``messages`` whose assistant content holds ``{"type": "tool_use", "id", "name",
"input"}`` blocks and whose next user message holds ``{"type": "tool_result", "tool_use_id", "content",
"is_error"?}`` blocks. ``Conversation.from_messages`` (what ``prepare`` sees) and ``segment_conversation`` (what
``record_conversation`` stores) read them as the OpenAI conversation they stand for; before, both read no call at
all. A conversation whose tool use is in a form neither reads is refused naming the position, never read as a
conversation without a call (docs/guide/runtime.md, "Conversations").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from skillflow.capture.segments import ConversationError, segment_conversation
from skillflow.injection.conversation import Conversation, ToolCall
from skillflow.kernel.messages import chat_messages

LONG = "x" * 9_000  # cut to 8 000 characters when stored, whichever format carried it


def openai_call(cid: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}


def openai_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "cancel my reservation R1"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                openai_call("toolu_1", "get_reservation_details", {"reservation_id": "R1"}),
                openai_call("toolu_2", "get_user_details", {"user_id": "u\x001"}),
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"id": "R1", "status": "booked"}'},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": f"user {LONG}"}]},
        {"role": "user", "content": "yes, please proceed"},
        {"role": "assistant", "content": None, "tool_calls": [openai_call("toolu_3", "cancel_reservation", {})]},
        {"role": "tool", "tool_call_id": "toolu_3", "content": "Error: payment service unavailable"},
        {"role": "assistant", "content": None, "tool_calls": [openai_call("toolu_4", "cancel_reservation", {})]},
        {"role": "tool", "tool_call_id": "toolu_4", "content": '{"status": "cancelled"}'},
        {"role": "assistant", "content": "Done. Anything else?"},
        {"role": "user", "content": "what is my balance?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [openai_call("toolu_5", "get_balance", {"user_id": "u1", "when": "\ud800now"})],
        },
        {"role": "tool", "tool_call_id": "toolu_5", "content": "5 EUR"},
    ]


def tool_use(cid: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": tool, "input": args}


def tool_result(cid: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": cid, "content": content, **extra}


def anthropic_conversation() -> list[dict[str, Any]]:
    """The same conversation as an Anthropic agent keeps it (the system prompt is a request parameter there)."""
    return [
        {"role": "user", "content": "cancel my reservation R1"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                tool_use("toolu_1", "get_reservation_details", {"reservation_id": "R1"}),
                tool_use("toolu_2", "get_user_details", {"user_id": "u\x001"}),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_1", '{"id": "R1", "status": "booked"}'),
                tool_result("toolu_2", [{"type": "text", "text": f"user {LONG}"}]),
                {"type": "text", "text": "yes, please proceed"},
            ],
        },
        {"role": "assistant", "content": [tool_use("toolu_3", "cancel_reservation", {})]},
        {"role": "user", "content": [tool_result("toolu_3", "Error: payment service unavailable")]},
        {"role": "assistant", "content": [tool_use("toolu_4", "cancel_reservation", {})]},
        {"role": "user", "content": [tool_result("toolu_4", '{"status": "cancelled"}')]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done. Anything else?"}]},
        {"role": "user", "content": [{"type": "text", "text": "what is my balance?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "a read", "signature": "sig"},
                tool_use("toolu_5", "get_balance", {"user_id": "u1", "when": "\ud800now"}),
            ],
        },
        {"role": "user", "content": [tool_result("toolu_5", "5 EUR")]},
    ]


def test_prepare_sees_the_calls_of_an_anthropic_conversation_as_of_its_openai_twin() -> None:
    anthropic = Conversation.from_messages(anthropic_conversation())
    assert anthropic == Conversation.from_messages(openai_conversation())
    assert [c.tool for c in anthropic.calls] == [
        "get_reservation_details", "get_user_details", "cancel_reservation", "cancel_reservation", "get_balance"
    ]  # fmt: skip
    assert anthropic.user_messages == ("cancel my reservation R1", "yes, please proceed", "what is my balance?")
    assert anthropic.calls[2] == ToolCall("cancel_reservation", (), errored=True, users_before=2)


@pytest.mark.parametrize("complete", [True, False])
def test_an_anthropic_conversation_segments_as_its_openai_twin(complete: bool) -> None:
    """Before, ``segment_conversation`` read no call: ``record_conversation`` returned ``[]``, nothing stored."""
    anthropic = segment_conversation(anthropic_conversation(), complete=complete)
    assert anthropic == segment_conversation(openai_conversation(), complete=complete)
    procedures = [(s.intent, [st.tool for st in s.steps]) for s in anthropic]
    reads, write = ["get_reservation_details", "get_user_details"], ["cancel_reservation"] * 2  # a retried write
    assert procedures == [("cancel_reservation", reads + write)] + [("read-only", ["get_balance"])] * complete
    first = anthropic[0]
    assert first.query == "cancel my reservation R1\nyes, please proceed"
    assert first.steps[0].result == {"id": "R1", "status": "booked"} and first.steps[2].errored


def test_a_tool_result_marked_is_error_is_a_failed_call() -> None:
    messages = [
        {"role": "user", "content": "refund order 7"},
        {"role": "assistant", "content": [tool_use("t1", "issue_refund", {"order_id": 7})]},
        {"role": "user", "content": [tool_result("t1", "order not found", is_error=True)]},
        {"role": "assistant", "content": [tool_use("t2", "issue_refund", {"order_id": 7})]},
        {"role": "user", "content": [tool_result("t2", [{"type": "text", "text": "refunded"}], is_error=False)]},
    ]
    [seg] = segment_conversation(messages)  # the failed write retried with the same tool: one procedure
    assert [(s.tool, s.error, s.result) for s in seg.steps] == [
        ("issue_refund", "order not found", None),
        ("issue_refund", None, "refunded"),
    ]
    calls = Conversation.from_messages(messages).calls
    assert [c.errored for c in calls] == [True, False]
    # Without a result yet (the conversation goes on), a call is the error ``no tool result recorded``.
    [open_seg] = segment_conversation(messages[:4])
    assert open_seg.steps[1].error == "no tool result recorded"


def test_calls_pair_by_tool_use_id_then_by_position() -> None:
    parallel = [
        {"role": "user", "content": "two lookups"},
        {"role": "assistant", "content": [tool_use("a", "get_a", {}), tool_use("b", "get_b", {"k": 1})]},
        {"role": "user", "content": [tool_result("b", "B"), tool_result("a", "A")]},
    ]
    [seg] = segment_conversation(parallel)
    assert [(s.tool, s.arguments, s.result) for s in seg.steps] == [("get_a", {}, "A"), ("get_b", {"k": 1}, "B")]
    no_ids = [parallel[0], parallel[1], {"role": "user", "content": [tool_result(None, "A"), tool_result(None, "B")]}]
    assert [s.result for s in segment_conversation(no_ids)[0].steps] == ["A", "B"]


def test_the_openai_form_of_each_message_keeps_its_position() -> None:
    chat = chat_messages(anthropic_conversation())
    assert [(i, m["role"]) for i, m in chat][:5] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (2, "tool"),
        (2, "user"),
    ]
    assert chat_messages(openai_conversation()) == list(enumerate(openai_conversation()))


HI = {"role": "user", "content": "hi"}
NOT_READ = "is a tool block of a kind not read"
UNREADABLE = {
    # An SDK object appended as is (``response.content``): not read, and not silently a conversation without calls.
    "sdk object": ([HI, {"role": "assistant", "content": [object()]}], "messages[1].content[0] must be a mapping"),
    "no name": (
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}],
        "messages[0].content[0] has no tool name",
    ),
    "server tool": (  # Anthropic server tools (web search): a tool block of a kind not read
        [{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search"}]}],
        f"messages[0].content[0] {NOT_READ}",
    ),
    "tool_use from the user": (
        [{"role": "user", "content": [tool_use("t", "get_x", {})]}],
        f"messages[0].content[0] {NOT_READ}",
    ),
    "responses api": (
        [HI, {"type": "function_call", "call_id": "c", "name": "get_x", "arguments": "{}"}],
        "messages[1] is a tool item of a format not read",
    ),
    "legacy functions": (
        [{"role": "assistant", "content": None, "function_call": {"name": "get_x", "arguments": "{}"}}],
        "messages[0] uses the legacy function_call format",
    ),
    "orphan results": (  # tool results whose calls were in a field neither format has
        [{"role": "assistant", "calls": [{"name": "get_x"}]}, {"role": "tool", "tool_call_id": "c", "content": "x"}],
        "messages[1] is a tool result, but no tool call was read",
    ),
}


@pytest.mark.parametrize(("messages", "needle"), list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_tool_use_in_a_form_not_read_is_refused_naming_the_position(messages: Any, needle: str) -> None:
    with pytest.raises(ConversationError) as caught:
        segment_conversation(messages)
    assert needle in str(caught.value)
    Conversation.from_messages(messages)  # prepare never raises on them: the unreadable entries are skipped


def test_a_conversation_without_tool_use_is_still_no_procedure() -> None:
    plain = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image", "source": {}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}, {"type": "thinking", "thinking": "."}]},
    ]
    assert segment_conversation(plain) == [] and Conversation.from_messages(plain).calls == ()
