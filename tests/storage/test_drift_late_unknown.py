"""A late ``unknown`` outcome must leave the drift grace period as it is: known outcomes are what it counts.

docs/guide/lifecycle.md (drift-demotion) and ``decide``: a skill is judged only once it has at least
``min_activations_before_drift_check`` activations with a known outcome. A procedure of a conversation recorded
turn by turn is stored by its execution (``success``) and takes the conversation's outcome when it ends
(``_late_outcome``: the run and its ``skill_activations`` rows follow). When a drift check has already counted
those activations as successes, the incremental counts in ``stats["active"]`` keep them as successes after
they became ``unknown``: the grace count stays above the floor while the window holds a single known outcome.
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from skillflow.kernel.models import SkillStatus, WorkflowOutcome
from skillflow.lifecycle.drift import run_drift
from skillflow.storage.schema import skill_activations, workflow_memory
from skillflow.storage.skills import get_skill
from tests.storage.test_late_outcome import MESSAGES, _agent
from tests.support.lifecycle import USER, config, make_skill


def test_activations_that_become_unknown_do_not_end_the_grace(engine: Engine) -> None:
    sf = _agent(engine)
    sf.record_conversation(MESSAGES, "probe", conversation_id="p")
    with engine.connect() as conn:
        chash = conn.execute(
            select(workflow_memory.c.canonical_hash).where(workflow_memory.c.user_id == "probe")
        ).scalar()
    skill = make_skill(engine, str(chash), status=SkillStatus.ACTIVE, baseline=0.9)
    used = {0: [skill.id]}
    for c in range(5):  # five conversations still going on: each procedure stored by its execution
        for n in range(1, len(MESSAGES) + 1):
            sf.record_conversation(MESSAGES[:n], USER, conversation_id=f"c{c}", complete=False, skills_activated=used)
    assert [d.decision for d in run_drift(engine, config()).skills] == ["keep"]  # 5 known successes: judged, kept
    for c in range(5):  # they end without a verdict
        sf.record_conversation(
            MESSAGES, USER, conversation_id=f"c{c}", outcome=WorkflowOutcome.UNKNOWN, skills_activated=used
        )
    sf.record_conversation(MESSAGES, USER, conversation_id="c5", outcome=False, skills_activated=used)
    with engine.connect() as conn:
        outcomes = sorted(conn.execute(select(skill_activations.c.outcome)).scalars())
    assert outcomes == ["failure"] + ["unknown"] * 5  # one known outcome: inside the grace period
    report = run_drift(engine, config())
    with engine.connect() as conn:
        status = get_skill(conn, skill.id).status
    assert [d.decision for d in report.skills] == ["grace"] and status == "active"
