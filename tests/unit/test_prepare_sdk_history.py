"""A history as the SDKs' own documentation builds it reaches the provider as that SDK would send it.

An outside audit of the request assembly (2026-12-06): Anthropic's response content appended as is
(``{"role": "assistant", "content": response.content}``) reached the wire as Python reprs with no error (the
``tool_use`` lost, its ``tool_result`` orphaned); OpenAI's ``completion.choices[0].message`` and Ollama's
``response.message`` were dropped with their tool results kept (a ``tool`` message with no call before it); one
entry without a role made Ollama's and an OpenAI-compatible server's request lose the whole history, the
application's system prompt included; a system message's blocks were hoisted into Anthropic's ``system`` as a repr.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from skillflow.kernel.models import InjectionRole, SkillStatus
from tests.unit.test_prompting import QUERY, add_skill, sf_for

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")


@pytest.fixture
def sf(engine: Engine) -> Any:
    add_skill(engine, "a", "u", "h1", SkillStatus.ACTIVE, InjectionRole.USER)
    return sf_for(engine, "a")


def test_anthropic_content_blocks_appended_as_is_are_sent_as_blocks(sf: Any) -> None:
    from anthropic.types import TextBlock, ToolUseBlock

    history = [
        {"role": "user", "content": "where is order A1?"},
        {"role": "assistant", "content": [
            TextBlock(type="text", text="Let me look."),
            ToolUseBlock(id="toolu_1", type="tool_use", name="lookup_order", input={"order_id": "A1"}),
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"}]},
        {"role": "assistant", "content": "It shipped."},
    ]  # fmt: skip
    prepared = sf.prepare(QUERY, "u", history=history, provider="anthropic")
    assert prepared.error is None and prepared.skill_ids
    sent = prepared.request["messages"]
    assert sent[1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": "A1"}},
    ]
    assert sent[:4] == [history[0], sent[1], history[2], history[3]]


def test_openai_and_ollama_message_objects_appended_as_is_are_kept(sf: Any) -> None:
    from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageToolCall

    call = ChatCompletionMessageToolCall(
        id="call_1", type="function", function={"name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    )
    reply = ChatCompletionMessage(role="assistant", content=None, tool_calls=[call])
    history = [
        {"role": "user", "content": "where is order A1?"},
        reply,
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
    ]
    for provider in ("openai", "ollama", "openai-compatible"):
        prepared = sf.prepare(QUERY, "u", history=history, provider=provider)
        assert prepared.error is None and prepared.skill_ids, provider
        sent = prepared.request["messages"]
        assistant = next(m for m in sent if m["role"] == "assistant")
        assert assistant["tool_calls"] == [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'},
            }
        ]
        roles = [m["role"] for m in sent]
        assert roles.index("assistant") < roles.index("tool"), roles


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama", "openai-compatible"])
def test_an_entry_without_a_role_is_left_out_and_the_rest_kept(sf: Any, provider: str) -> None:
    history = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "where is order A1?"},
        {"content": "a note the application kept, no role"},
        {"role": "assistant", "content": "It shipped yesterday."},
    ]
    prepared = sf.prepare(QUERY, "u", history=history, provider=provider)
    assert prepared.error is not None and "history[2]" in prepared.error
    request = prepared.request
    sent = request["messages"]
    assert all("role" in m for m in sent)
    texts = [m["content"] for m in sent] + [request.get("system", "")]
    assert any("You are a support agent." in str(t) for t in texts)  # the application's system prompt stays
    assert {"role": "assistant", "content": "It shipped yesterday."} in sent
    assert not any("a note the application kept" in str(t) for t in texts)


def test_a_dropped_entry_takes_its_tool_results_with_it(sf: Any) -> None:
    """What answered an entry that cannot be read would be a tool message with no call before it."""
    history = [
        {"role": "user", "content": "where is order A1?"},
        object(),  # unreadable: dropped
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
        {"role": "tool", "tool_call_id": "call_2", "content": "paid"},
        {"role": "assistant", "content": "It shipped."},
    ]
    prepared = sf.prepare(QUERY, "u", history=history, provider="openai")
    assert prepared.error is not None and "history[1]" in prepared.error
    roles = [m["role"] for m in prepared.request["messages"]]
    assert "tool" not in roles and roles.count("assistant") == 1


def test_anthropic_system_messages_of_blocks_are_read_as_their_text(sf: Any) -> None:
    history = [
        {"role": "system", "content": [{"type": "text", "text": "Policy A"}, {"type": "text", "text": "Policy B"}]},
        {"role": "developer", "content": None},
        {"role": "user", "content": "hello"},
    ]
    prepared = sf.prepare(QUERY, "u", history=history, provider="anthropic")
    system = prepared.request["system"]
    assert "Policy A" in system and "Policy B" in system
    assert "{'type'" not in system and "\n\nNone\n\n" not in system and not system.endswith("None")


def test_record_conversation_reads_sdk_objects_as_their_dicts(engine: Engine, tmp_path: Any) -> None:
    """The same messages list goes to ``prepare`` on each call and to ``record_conversation`` at the end: SDK
    objects appended as is are read as the dicts their SDK sends (they were refused: ``must be a mapping``)."""
    from anthropic.types import TextBlock, ToolUseBlock
    from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageToolCall
    from sqlalchemy import select

    from skillflow.injection.conversation import Conversation
    from skillflow.runtime import Skillflow
    from skillflow.storage.schema import workflow_memory as wm

    use = ToolUseBlock(id="t1", type="tool_use", name="cancel_reservation", input={"id": "ABC"})
    call = ChatCompletionMessageToolCall(
        id="c1", type="function", function={"name": "cancel_reservation", "arguments": '{"id": "ABC"}'}
    )
    anthropic_form = [
        {"role": "user", "content": "cancel reservation ABC"},
        {"role": "assistant", "content": [TextBlock(type="text", text="ok"), use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]},
    ]
    openai_form = [
        {"role": "user", "content": "cancel reservation ABC"},
        ChatCompletionMessage(role="assistant", content=None, tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    sf = Skillflow(agent_id="sdk", engine=engine, spool_dir=tmp_path)
    for n, messages in enumerate((anthropic_form, openai_form)):
        assert [(r.stored, r.error) for r in sf.record_conversation(messages, "u", conversation_id=f"c{n}")] == [
            (True, None)
        ]
        assert [c.tool for c in Conversation.from_messages(messages).calls] == ["cancel_reservation"]
    with engine.connect() as conn:
        rows = conn.execute(select(wm.c.query, wm.c.steps).where(wm.c.agent_id == "sdk").order_by(wm.c.id)).all()
    assert len(rows) == 2 and rows[0] == rows[1]
    assert rows[0].query == "cancel reservation ABC"


def test_a_system_prompt_of_text_blocks_degrades_to_its_text_not_a_repr(sf: Any) -> None:
    blocks = [{"type": "text", "text": "You are a support agent.", "cache_control": {"type": "ephemeral"}}]
    prepared = sf.prepare(QUERY, "u", system_prompt=blocks, provider="anthropic")
    assert prepared.error is not None and "system_prompt must be a string" in prepared.error
    system = prepared.request["system"]
    assert system.startswith("You are a support agent.") and "{'type'" not in system


def test_before_the_first_fit_a_later_call_of_the_turn_embeds_nothing(engine: Engine) -> None:
    """The audit timed a tenant without a fitted rule: each call of a turn embedded the request again (26 ms each);
    a fitted rule's later calls reuse the turn's vectors, and so does the fixed threshold now."""
    from skillflow.injection.embeddings import HashingEmbedder
    from skillflow.injection.views import RECENT_TEXTS
    from skillflow.kernel.config import PromotionConfig
    from skillflow.runtime import Skillflow

    class Counting(HashingEmbedder):
        calls = 0

        def embed(self, texts: list[str]) -> Any:
            Counting.calls += 1
            return super().embed(texts)

    add_skill(engine, "a", "u", "h1", SkillStatus.ACTIVE, InjectionRole.USER)
    sf = Skillflow(agent_id="a", engine=engine, config=PromotionConfig(retrieval_min_similarity=0.5),
                   embedder=Counting(), continual_learning=True)  # fmt: skip
    RECENT_TEXTS.clear()
    first = sf.prepare(QUERY + " today", "u")
    after_first = Counting.calls
    again = sf.prepare(QUERY + " today", "u")
    assert first.skill_ids == again.skill_ids and first.skill_ids
    assert after_first >= 1 and Counting.calls == after_first
