"""Defect 5: a reviewer's rejection puts the class in backoff until enough NEW evidence arrives."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, select

from skillflow.kernel.models import utcnow
from skillflow.lifecycle.decisions import reject_skill
from skillflow.promotion.cycle import run_partition
from skillflow.storage.schema import skillbox
from tests.support.promotion import AGENT, agent, config, record_cancel


def _skills(engine: Engine) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        return [(r.version, r.status) for r in conn.execute(select(skillbox).order_by(skillbox.c.version))]


def test_rejected_class_waits_for_new_runs(engine: Engine, offline_providers: None) -> None:
    sf = agent(engine, require_shadow=True)
    cfg = config(require_shadow=True, rejection_requalify_runs=3)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [skill_id] = run_partition(engine, AGENT, "u1", cfg).promoted
    reject_skill(engine, skill_id, "procedure skips the refund check", actor="reviewer")

    again = run_partition(engine, AGENT, "u1", cfg)
    assert again.promoted == []
    [row] = again.gates
    assert row.decision == "backoff"
    assert row.reason == "rejected by a reviewer: 0 new runs < rejection_requalify_runs 3"
    assert _skills(engine) == [(1, "rejected")]

    for i in range(6, 8):  # two new runs: still not enough
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    assert run_partition(engine, AGENT, "u1", cfg).promoted == []
    record_cancel(sf, "u1", 8, when=utcnow() + timedelta(seconds=9))
    [new_id] = run_partition(engine, AGENT, "u1", cfg).promoted
    assert new_id != skill_id and _skills(engine) == [(1, "rejected"), (2, "shadow")]
