"""``Skillflow.record`` stores runs of its own agent only, and a conversation's run ids only as its own procedures
(a gate-integrity audit, 2026-12-06).

``record`` is public (the simulator and the corpus readers use it), but it stored a mapping under whatever
``agent_id`` it named and took any ``conv-`` run id: a handle made for one agent credited failures to another
agent's ACTIVE skill (drift then demoted it), took that agent's conversation run ids in advance (its own
procedure was then never stored), and flipped its stored successes to failures through ``conversation=``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from skillflow.capture.outcome import ConversationOutcome
from skillflow.capture.segments import segment_run_id
from skillflow.kernel.models import WorkflowOutcome
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory
from tests.support import patient_capture

STEPS = [{"tool": "get_reservation_details", "arguments": {"reservation_id": "R1"}, "result": {"ok": True}},
         {"tool": "cancel_reservation", "arguments": {"reservation_id": "R1"}, "result": {"ok": True}}]  # fmt: skip


def _handle(engine: Engine, agent: str) -> Skillflow:
    with patient_capture():
        return Skillflow(agent_id=agent, engine=engine)


def _rows(engine: Engine) -> list[tuple[str, str, str, str]]:
    wm = workflow_memory.c
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(wm.id, wm.agent_id, wm.query, wm.outcome).order_by(wm.id))]


def test_a_handle_does_not_store_a_run_of_another_agent(engine: Engine) -> None:
    other = _handle(engine, "other-agent")
    result = other.record({"query": "cancel it", "agent_id": "victim-agent", "user_id": "alice", "steps": STEPS})
    assert not result.stored and result.error == "agent_id: this handle records the runs of its own agent only"
    assert _rows(engine) == []


def test_a_conversation_s_run_id_is_taken_only_as_that_conversation_s_procedure(engine: Engine) -> None:
    victim, other = _handle(engine, "victim-agent"), _handle(engine, "other-agent")
    planted = segment_run_id("victim-agent", "alice", "chat-42", 0)
    result = other.record({"query": "planted", "agent_id": "other-agent", "user_id": "alice", "steps": STEPS,
                           "run_id": planted})  # fmt: skip
    assert not result.stored and result.error == "run_id: the prefix 'conv-' is reserved for record_conversation"
    messages = [
        {"role": "user", "content": "cancel my reservation R1"},
        {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {
            "name": "cancel_reservation", "arguments": "{\"reservation_id\": \"R1\"}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "{\"ok\": true}"},
        {"role": "assistant", "content": "done"},
    ]  # fmt: skip
    stored = victim.record_conversation(messages, "alice", conversation_id="chat-42")
    assert [(r.run_id, r.stored, r.already_stored) for r in stored] == [(planted, True, False)]
    assert [(r[0], r[1], r[2]) for r in _rows(engine)] == [(planted, "victim-agent", "cancel my reservation R1")]
    # The corpus readers hand record() a conversation's procedure with its own id: still stored.
    procedure = {"query": "cancel my reservation R1", "agent_id": "victim-agent", "user_id": "alice", "steps": STEPS,
                 "run_id": planted, "conversation_id": "chat-42", "segment_index": 0}  # fmt: skip
    again = victim.record(procedure)
    assert again.stored and again.already_stored


def test_a_handle_cannot_change_another_agent_s_outcome(engine: Engine) -> None:
    victim, other = _handle(engine, "victim-agent"), _handle(engine, "other-agent")
    run = victim.record_run("cancel my reservation", "alice", STEPS)
    assert run.stored and run.outcome == "success"
    flipped = other.record(
        {"query": "x", "agent_id": "victim-agent", "user_id": "alice", "steps": [], "run_id": run.run_id},
        conversation=ConversationOutcome(WorkflowOutcome.FAILURE, "given"),
    )
    assert not flipped.stored
    assert [r[3] for r in _rows(engine)] == ["success"]


def test_a_step_with_an_error_class_alone_is_a_failed_call(engine: Engine) -> None:
    """The README marks a failed call with ``error`` or ``error_class``; a step with only ``error_class`` (an agent
    that records the exception's class) counted as a success, so a class whose every refund failed was promoted at
    a success rate of 1.0 (the same audit)."""
    sf = _handle(engine, "agent")
    failed = [STEPS[0], {"tool": "cancel_reservation", "arguments": {"reservation_id": "R1"},
                         "error_class": "PaymentDeclined"}]  # fmt: skip
    result = sf.record_run("cancel my reservation", "alice", failed)
    assert result.stored and result.outcome == "failure"
    ok = sf.record_run("cancel my reservation", "alice", STEPS)
    assert ok.outcome == "success" and ok.canonical_hash != result.canonical_hash


def test_a_hostile_str_subclass_as_the_handle_s_agent_id_never_makes_capture_raise(engine: Engine) -> None:
    """The agent check compares plain strings: a ``str`` subclass whose ``__ne__`` raises (the outside audit of
    2026-12-05's hostile values) would otherwise raise out of ``record_run``."""

    class Hostile(str):
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq")

        def __ne__(self, other: object) -> bool:
            raise RuntimeError("ne")

        __hash__ = str.__hash__

    sf = _handle(engine, Hostile("agent"))
    result = sf.record_run("cancel my reservation", "alice", STEPS)
    assert result.stored and [r[1] for r in _rows(engine)] == ["agent"]


_IDS = st.one_of(
    st.none(), st.integers(), st.text(max_size=12), st.just("victim-agent"), st.just("agent"),
    st.builds(lambda s: "conv-" + s, st.text(max_size=12)),
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(agent=_IDS, user=_IDS, run_id=_IDS, conversation=_IDS, index=st.one_of(st.none(), st.integers(-2, 3), _IDS))
def test_record_of_any_mapping_never_raises_and_writes_only_its_own_agent_s_runs(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, agent: Any, user: Any, run_id: Any,
    conversation: Any, index: Any,
) -> None:  # fmt: skip
    """The attack on ``record``'s two refusals: any values for the tenant, run id, conversation and position. A
    stored run is the handle's agent's, and a ``conv-`` id is stored only as its own conversation's procedure."""
    sf = Skillflow(agent_id="agent", engine=engine, spool_dir=tmp_path_factory.mktemp("spool"))
    run = {"query": "cancel it", "agent_id": agent, "user_id": user, "steps": STEPS, "run_id": run_id,
           "conversation_id": conversation, "segment_index": index}  # fmt: skip
    result = sf.record(run)
    assert result.stored or result.error
    if result.stored and not result.already_stored:
        wm = workflow_memory.c
        with engine.connect() as conn:
            row = conn.execute(select(wm.agent_id, wm.user_id).where(wm.id == result.run_id)).one()
        assert row.agent_id == "agent"
        if result.run_id.startswith("conv-"):
            assert result.run_id == segment_run_id("agent", row.user_id, conversation, index)
