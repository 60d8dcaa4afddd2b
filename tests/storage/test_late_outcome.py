"""A conversation recorded turn by turn takes the outcome given when it ends, wherever its procedures went.

The documented pattern: ``record_conversation(..., complete=False)`` after every turn (the outcome is not known
yet, so each closed procedure is stored by its execution), then once more at the end with ``outcome=``. Before,
the final call found the rows already stored and kept them: a failed conversation's procedures stayed
successes (in the class statistics, the activations drift reads and the shadow records), and the call answered
``stored=True, outcome="success"``.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.runtime import Skillflow
from skillflow.storage import class_stats
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.schema import shadow_observations, skill_activations, workflow_memory
from skillflow.storage.skills import get_skill
from tests.support import patient_capture
from tests.support.lifecycle import AGENT, CANCEL_TOOLS, EMBEDDER, USER, config, earlier, make_skill


def _call(cid: str, tool: str, result: str) -> list[dict[str, Any]]:
    fn = {"name": tool, "arguments": json.dumps({"reservation_id": "R1"})}
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": cid, "content": result},
    ]


MESSAGES = [
    {"role": "user", "content": "cancel my reservation please"},
    *_call("c1", "get_reservation_details", '{"status": "ok"}'),
    *_call("c2", "cancel_reservation", '{"ok": true}'),
    {"role": "assistant", "content": "Cancelled. Anything else?"},
    {"role": "user", "content": "no, that was the wrong one"},
]


def _agent(engine: Engine) -> Skillflow:
    with patient_capture():
        sf = Skillflow(agent_id=AGENT, engine=engine, config=config(), continual_learning=True)
    sf.register_tools(CANCEL_TOOLS)
    return sf


def _rows(engine: Engine, user: str) -> list[tuple[Any, ...]]:
    wm = workflow_memory.c
    with engine.connect() as conn:
        q = select(wm.segment_index, wm.outcome, wm.outcome_source, wm.learning_error).where(wm.user_id == user)
        return [tuple(r) for r in conn.execute(q.order_by(wm.segment_index))]


def _turn_by_turn(sf: Skillflow, user: str, **final: Any) -> list[Any]:
    for n in range(1, len(MESSAGES) + 1):
        sf.record_conversation(MESSAGES[:n], user, conversation_id="c1", complete=False, **final.get("turns", {}))
    return sf.record_conversation(MESSAGES, user, conversation_id="c1", **final.get("end", {}))


def test_the_outcome_given_at_the_end_is_each_stored_procedures(engine: Engine) -> None:
    sf = _agent(engine)
    sf.record_conversation(MESSAGES, "whole", conversation_id="c1", outcome=False)  # one final call: the reference
    for n in range(1, len(MESSAGES) + 1):
        sf.record_conversation(MESSAGES[:n], USER, conversation_id="c1", complete=False)
    assert _rows(engine, USER) == [(0, "success", "execution", None)]  # stored by execution meanwhile
    class_stats.fold(engine)  # and already folded into the class statistics
    final = sf.record_conversation(MESSAGES, USER, conversation_id="c1", outcome=False)
    assert [(r.stored, r.outcome, r.error) for r in final] == [(True, "failure", None)]
    assert _rows(engine, USER) == _rows(engine, "whole") == [(0, "failure", "given", None)]
    class_stats.fold(engine)
    maintained = class_stats.partition_stats(engine, AGENT, USER)
    with engine.connect() as conn:
        reference = aggregate_classes(conn, AGENT, USER)
    assert [(s.successes, s.failures) for s in maintained] == [(s.successes, s.failures) for s in reference]
    assert [(s.successes, s.failures) for s in maintained] == [(0, 1)]
    # Asked again, nothing changes; a later, different verdict does not overwrite the one given.
    again = sf.record_conversation(MESSAGES, USER, conversation_id="c1", outcome=True)
    assert [(r.outcome, r.already_stored) for r in again] == [("failure", True)]
    assert _rows(engine, USER) == [(0, "failure", "given", None)]


def test_a_late_failure_reaches_the_activations_drift_reads(engine: Engine) -> None:
    sf = _agent(engine)
    sf.record_conversation(MESSAGES, "probe", conversation_id="p")  # the class's hash
    with engine.connect() as conn:
        chash = conn.execute(
            select(workflow_memory.c.canonical_hash).where(workflow_memory.c.user_id == "probe")
        ).scalar()
    skill = make_skill(engine, str(chash), status=SkillStatus.ACTIVE)
    for n in range(1, len(MESSAGES) + 1):
        sf.record_conversation(
            MESSAGES[:n], USER, conversation_id="c1", complete=False, skills_activated={0: [skill.id]}
        )
    with engine.connect() as conn:
        before = conn.execute(select(skill_activations.c.outcome)).scalars().all()
    assert before == ["success"]
    sf.record_conversation(MESSAGES, USER, conversation_id="c1", outcome=False, skills_activated={0: [skill.id]})
    with engine.connect() as conn:
        assert conn.execute(select(skill_activations.c.outcome)).scalars().all() == ["failure"]


def test_a_late_failure_corrects_the_shadow_records_of_its_procedures(engine: Engine) -> None:
    cfg = config()
    sf = _agent(engine)
    sf.record_conversation(MESSAGES, "probe", conversation_id="p", created_at=earlier(3))
    with engine.connect() as conn:
        chash = conn.execute(
            select(workflow_memory.c.canonical_hash).where(workflow_memory.c.user_id == "probe")
        ).scalar()
    skill = make_skill(engine, str(chash), status=SkillStatus.SHADOW, user=USER)
    for n in range(1, len(MESSAGES) + 1):
        sf.record_conversation(MESSAGES[:n], USER, conversation_id="c1", complete=False)
    assert drain_shadow_evaluations(engine, cfg, EMBEDDER).records == 1
    with engine.connect() as conn:
        assert (get_skill(conn, skill.id).stats or {})["shadow"]["matched_successes"] == 1
    sf.record_conversation(MESSAGES, USER, conversation_id="c1", outcome=False)
    drain_shadow_evaluations(engine, cfg, EMBEDDER)
    with engine.connect() as conn:
        obs = conn.execute(
            select(shadow_observations.c.observed_outcome, shadow_observations.c.matched_succeeded)
        ).all()
        run = conn.execute(
            select(workflow_memory.c.shadow_evaluations).where(workflow_memory.c.user_id == USER)
        ).scalar()
        shadow = (get_skill(conn, skill.id).stats or {})["shadow"]
    assert [tuple(o) for o in obs] == [("failure", 0)]
    assert [(r["observed_outcome"], r["matched_trajectory_succeeded"]) for r in run] == [("failure", False)]
    assert shadow["matched_successes"] == 0 and shadow["observations"] == 1
