"""Drift test builders: a drifting ACTIVE skill, one whose drift state is corrupted, the rule fingerprint."""

from __future__ import annotations

from sqlalchemy import Engine, select

from skillflow.injection.applicability import fingerprint
from skillflow.kernel.models import SkillStatus
from skillflow.storage.schema import applicability_rules
from skillflow.storage.skills import SkillRecord, update_stats
from tests.support.lifecycle import AGENT, EMBEDDER, USER, class_hash, earlier, later, make_skill, other_steps, record


def drifting(engine: Engine, user: str = USER) -> SkillRecord:
    """An ACTIVE skill (baseline 0.9) whose last 10 activations succeeded 6 times: demoted at delta 0.25."""
    source = record(engine, "cancel my reservation", user=user, at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source], status=SkillStatus.ACTIVE, user=user)
    for i in range(10):
        record(engine, f"cancel reservation {i}", user=user, skills=(skill.id,), ok=i < 6, at=later(1 + i))
    return skill


def corrupted(engine: Engine, user: str = USER) -> SkillRecord:
    """An ACTIVE skill whose stored drift watermark is not a timestamp: its check raises ValueError."""
    source = record(engine, "refund please", user=user, steps=other_steps(), at=earlier(2))
    skill = make_skill(
        engine, class_hash(engine, source), sources=[source], status=SkillStatus.ACTIVE, user=user, name="refund-order"
    )
    since = skill.activated_at.isoformat() if skill.activated_at else None
    with engine.begin() as conn:
        # Recounted just now, so the check advances from the watermark (and fails reading it).
        active = {"since": since, "watermark": "not-a-timestamp", "watermark_run": "x", "recounted_at": since}
        update_stats(conn, skill.id, {"active": active})
    return skill


def rule_fingerprint(engine: Engine, user: str = USER) -> tuple[str, str]:
    """(stored rule's fingerprint, fingerprint of the tenant's live skills now)."""
    with engine.connect() as conn:
        stored = conn.execute(
            select(applicability_rules.c.fingerprint).where(
                applicability_rules.c.agent_id == AGENT, applicability_rules.c.user_id == user
            )
        ).scalar_one()
        return str(stored), fingerprint(conn, AGENT, user, EMBEDDER.model_id)
