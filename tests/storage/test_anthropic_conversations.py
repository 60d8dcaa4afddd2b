"""``record_conversation`` of an Anthropic agent's messages stores the rows of the same conversation in OpenAI form.

Before, an Anthropic conversation (``tool_use`` / ``tool_result`` content blocks, as the README's
``provider="anthropic"`` agent keeps it) was read as a conversation without a tool call: ``record_conversation``
returned ``[]``, no run stored and no error. Now both forms give identical rows, the evaluator sees the same
conversation, and tool use in a form neither has is a named refusal, never ``[]`` (docs/guide/runtime.md,
"Conversations").
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from sqlalchemy import Engine, select

from skillflow.capture.outcome import Workflow
from skillflow.capture.segments import segment_run_id
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory
from tests.unit.test_anthropic_messages import LONG, anthropic_conversation, openai_conversation

PER_CONVERSATION = {"id", "conversation_id", "created_at"}


def _rows(engine: Engine, conversation_id: str) -> list[dict[str, Any]]:
    c = workflow_memory.c
    query = select(workflow_memory).where(c.conversation_id == conversation_id).order_by(c.segment_index)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def test_an_anthropic_conversation_stores_the_rows_of_its_openai_twin(engine: Engine) -> None:
    seen: list[Workflow] = []

    def judged(workflow: Workflow) -> bool:
        seen.append(workflow)
        return True

    sf = Skillflow(agent_id="airline", engine=engine, workflow_outcome_evaluator=judged)
    twin = sf.record_conversation(openai_conversation(), "alice", conversation_id="openai", metadata={"t": 1})
    results = sf.record_conversation(anthropic_conversation(), "alice", conversation_id="anthropic", metadata={"t": 1})
    assert [(r.stored, r.error) for r in results] == [(True, None)] * 2  # was []: nothing stored, no error
    assert [r.run_id for r in results] == [segment_run_id("airline", "alice", "anthropic", i) for i in range(2)]
    assert [(r.outcome, r.canonical_hash) for r in results] == [(r.outcome, r.canonical_hash) for r in twin]
    rows, twin_rows = _rows(engine, "anthropic"), _rows(engine, "openai")
    assert [{k: v for k, v in r.items() if k not in PER_CONVERSATION} for r in rows] == [
        {k: v for k, v in r.items() if k not in PER_CONVERSATION} for r in twin_rows
    ]
    # The capture's own sanitising applies to Anthropic content as to OpenAI's: NUL and a lone surrogate replaced,
    # long text cut.
    first, second = rows
    assert first["steps"][1]["arguments"] == {"user_id": "u\ufffd1"}
    assert first["steps"][1]["result"].endswith("…[truncated]") and len(first["steps"][1]["result"]) < len(LONG)
    assert second["steps"][0]["arguments"]["when"] == "\ufffdnow"
    assert first["query"] == "cancel my reservation R1\nyes, please proceed" and first["outcome"] == "success"
    # The evaluator saw the same conversation in both forms.
    openai_seen, anthropic_seen = seen
    assert (anthropic_seen.query, anthropic_seen.steps, anthropic_seen.outcome) == (
        openai_seen.query,
        openai_seen.steps,
        openai_seen.outcome,
    )


def test_an_anthropic_conversation_recorded_turn_by_turn_converges(engine: Engine) -> None:
    messages = anthropic_conversation()
    sf = Skillflow(agent_id="airline", engine=engine)
    for end in range(1, len(messages) + 1):
        for r in sf.record_conversation(messages[:end], "alice", conversation_id="c", complete=False):
            assert r.stored, r.error
    assert [r["segment_index"] for r in _rows(engine, "c")] == [0]
    final = sf.record_conversation(messages, "alice", conversation_id="c")
    assert [(r.stored, r.already_stored) for r in final] == [(True, True), (True, False)]


def test_sdk_objects_appended_as_they_are_are_read_as_their_sdk_sends_them(engine: Engine) -> None:
    """Anthropic's SDK answers ``response.content`` as objects; appended as they are, they are read as the dicts
    the SDK sends (an audit of the request assembly, 2026-12-06: they were refused here and sent as reprs by
    ``prepare``), and store what the dicts store. An object that is no SDK model stays a named refusal."""
    block = anthropic.types.ToolUseBlock(id="toolu_1", name="cancel_reservation", input={"id": "R1"}, type="tool_use")
    result_block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"ok": true}'}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "cancel R1"},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": [result_block]},
    ]
    sf = Skillflow(agent_id="airline", engine=engine)
    [stored] = sf.record_conversation(messages, "alice", conversation_id="objects")
    assert stored.stored and stored.error is None
    assert [r["tool_sequence"] for r in _rows(engine, "objects")] == ["cancel_reservation"]
    as_dicts = [*messages[:1], {"role": "assistant", "content": [block.model_dump()]}, *messages[2:]]
    [again] = sf.record_conversation(as_dicts, "alice", conversation_id="objects")
    assert again.already_stored  # the same conversation, the same rows
    messages[1] = {"role": "assistant", "content": [object()]}
    [refused] = sf.record_conversation(messages, "alice", conversation_id="not-a-model")
    assert not refused.stored and refused.error is not None
    assert refused.error.startswith("messages[1].content[0] must be a mapping")
    with pytest.raises(ValueError, match=r"messages\[1\]\.content\[0\]"):
        sf.record_conversation(messages, "alice", conversation_id="not-a-model", strict=True)
    assert _rows(engine, "not-a-model") == []
