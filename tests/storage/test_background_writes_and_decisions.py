"""A flow's bookkeeping on a skill never refuses a reviewer's decision (a concurrency audit, 2026-12-05).

A decision is a compare-and-set on what the reviewer's checks read: a decision, edit or demotion committed since
refuses it ("the skill changed while this decision was made"). Drift's figures and the shadow drain's reconcile
wrote ``skillbox.updated_at`` too, so a busy drain refused decisions that nothing had changed. They now leave it:
``updated_at`` moves with what a reviewer decides on (status, content, role, vectors), not with derived figures.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle.shadow import reconcile
from skillflow.storage.skills import InvalidTransition, get_skill, transition, update_stats
from tests.support.lifecycle import class_hash, config, make_skill, record


def _seen(engine: Engine, status: SkillStatus = SkillStatus.SHADOW) -> str:
    skill = make_skill(engine, class_hash(engine, record(engine)), status=status)
    return skill.id


def test_a_shadow_reconcile_between_a_decision_s_read_and_its_write_does_not_refuse_it(engine: Engine) -> None:
    skill_id = _seen(engine)
    with engine.connect() as conn:
        seen = get_skill(conn, skill_id)
    with engine.begin() as conn:
        assert reconcile(conn, [skill_id], config()) == 1
    with engine.begin() as conn:
        moved = transition(conn, skill_id, SkillStatus.ACTIVE, actor="reviewer", seen=seen)
    assert moved.status == SkillStatus.ACTIVE.value
    with engine.connect() as conn:
        assert "shadow" in get_skill(conn, skill_id).stats


def test_drift_s_figures_between_a_decision_s_read_and_its_write_do_not_refuse_it(engine: Engine) -> None:
    skill_id = _seen(engine, SkillStatus.ACTIVE)
    with engine.connect() as conn:
        seen = get_skill(conn, skill_id)
    with engine.begin() as conn:
        update_stats(conn, skill_id, {"active": {"executions": 3, "success_rate": 1.0}})
    with engine.begin() as conn:
        moved = transition(conn, skill_id, SkillStatus.DEMOTED, actor="reviewer", reason="stale", seen=seen)
    assert moved.status == SkillStatus.DEMOTED.value


def test_a_decision_committed_meanwhile_still_refuses_it(engine: Engine) -> None:
    skill_id = _seen(engine)
    with engine.connect() as conn:
        seen = get_skill(conn, skill_id)
    with engine.begin() as conn:
        transition(conn, skill_id, SkillStatus.REJECTED, actor="other reviewer", reason="no", seen=seen)
    with pytest.raises(InvalidTransition), engine.begin() as conn:
        transition(conn, skill_id, SkillStatus.ACTIVE, actor="reviewer", seen=seen)
