"""A decision and a fold take a class's statistics row and its runs in one order (a concurrency audit, 2026-12-05).

A fold upserts the class's ``class_stats`` row, then clears its runs' pending marks; a decision (activate, demote,
rollback, and the cycle's stamp repair) stamped the class's runs, then marked the ``class_stats`` row for a
recount. Each held what the other wanted next: PostgreSQL broke the deadlock by failing one of them (3 decisions and
1 drift check in 20 s of the audit's stress run). A stamp now marks the class first, so the two queue instead.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine, func, select, text

from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.storage import class_stats_sql as q
from skillflow.storage.class_stats import fold
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import get_skill, repair_stamps, transition
from tests.support.lifecycle import AGENT, USER, class_hash, make_skill, record


def _class_with_pending_runs(engine: Engine) -> str:
    """A class whose statistics row exists and which has runs not yet folded; returns its hash."""
    first = record(engine, "cancel my reservation please")
    record(engine, "please cancel my flight booking")
    fold(engine)
    record(engine, "I want to cancel the reservation")
    record(engine, "cancel reservation R1 now")
    return class_hash(engine, first)


def _stamped(engine: Engine, canonical_hash: str, skill_id: str | None) -> int:
    wm = workflow_memory.c
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(wm.canonical_hash == canonical_hash, wm.promoted_skill_id == skill_id)
            ).scalar_one()
        )


def _race(engine: Engine, decide: object) -> list[BaseException]:
    """Run ``decide`` (in its own transaction) while a fold holds the class's statistics row, then let the fold
    clear the runs' pending marks as it does next; returns what either side raised."""
    errors: list[BaseException] = []

    def decision() -> None:
        try:
            with engine.begin() as conn:
                decide(conn)  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    with engine.connect() as folding:
        folding.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        folding.execute(q.fold_stats("postgresql", utcnow(), None, None))  # the fold's first write: the row
        thread = threading.Thread(target=decision)
        thread.start()
        time.sleep(1.5)  # the decision now waits on the row (and, before the fix, holds the class's runs)
        try:
            folding.execute(q.clear_pending(None, None))  # the fold's next write: the runs
            folding.commit()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            folding.rollback()
    thread.join(30)
    assert not thread.is_alive()
    return errors


@pytest.mark.postgres
def test_an_activation_and_a_fold_at_once_both_complete(pg_engine: Engine) -> None:
    engine = pg_engine
    canonical_hash = _class_with_pending_runs(engine)
    with engine.connect() as conn:
        skill = get_skill(conn, make_skill(engine, canonical_hash).id)

    def activate(conn: object) -> None:
        transition(conn, skill.id, SkillStatus.ACTIVE, actor="reviewer", seen=skill)  # type: ignore[arg-type]

    assert _race(engine, activate) == []
    with engine.connect() as conn:
        assert get_skill(conn, skill.id).status == SkillStatus.ACTIVE.value
    assert _stamped(engine, canonical_hash, skill.id) == 4


@pytest.mark.postgres
def test_a_demotion_and_a_fold_at_once_both_complete(pg_engine: Engine) -> None:
    engine = pg_engine
    canonical_hash = _class_with_pending_runs(engine)
    skill = make_skill(engine, canonical_hash, status=SkillStatus.ACTIVE)
    record(engine, "cancel it, the reservation")  # a pending run stamped with the live skill
    assert _stamped(engine, canonical_hash, skill.id) == 5
    with engine.connect() as conn:
        live = get_skill(conn, skill.id)

    def demote(conn: object) -> None:
        transition(conn, skill.id, SkillStatus.DEMOTED, actor="drift", reason="broken", seen=live)  # type: ignore[arg-type]

    assert _race(engine, demote) == []
    assert _stamped(engine, canonical_hash, None) == 5


@pytest.mark.postgres
def test_the_cycle_s_stamp_repair_and_a_fold_at_once_both_complete(pg_engine: Engine) -> None:
    engine = pg_engine
    canonical_hash = _class_with_pending_runs(engine)
    skill = make_skill(engine, canonical_hash, status=SkillStatus.ACTIVE)
    wm = workflow_memory
    with engine.begin() as conn:  # runs a decision's set-based stamp could not see (the repair's subject)
        conn.execute(wm.update().where(wm.c.canonical_hash == canonical_hash).values(promoted_skill_id=None))
    assert _stamped(engine, canonical_hash, skill.id) == 0

    assert _race(engine, lambda conn: repair_stamps(conn, AGENT, USER)) == []
    assert _stamped(engine, canonical_hash, skill.id) == 4


@pytest.mark.postgres
def test_a_backfill_batch_and_a_fold_at_once_both_complete(pg_engine: Engine) -> None:
    """A backfill re-hashes runs and marks their classes, as a stamp does: the same order."""
    from skillflow.operations.backfill import backfill_batch

    engine = pg_engine
    canonical_hash = _class_with_pending_runs(engine)
    wm = workflow_memory
    with engine.begin() as conn:  # a pending run without its identity yet (a legacy writer's row)
        legacy = conn.execute(
            select(wm.c.id).where(wm.c.canonical_hash == canonical_hash, wm.c.stats_pending.is_not(None)).limit(1)
        ).scalar_one()
        conn.execute(wm.update().where(wm.c.id == legacy).values(canonical_hash=None, signature=None,
                                                                   tool_sequence=None))  # fmt: skip

    assert _race(engine, lambda conn: backfill_batch(conn, None)) == []
    with engine.connect() as conn:
        assert conn.execute(select(wm.c.canonical_hash).where(wm.c.id == legacy)).scalar_one() == canonical_hash
