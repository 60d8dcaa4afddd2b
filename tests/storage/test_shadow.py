"""Shadow evaluation: one idempotent record per fresh run, exact tenant scope, safe concurrent drains."""

from __future__ import annotations

import threading

from sqlalchemy import Engine, func, select, update

from skillflow.kernel.models import SkillStatus
from skillflow.lifecycle.shadow import DrainReport, drain_batch, drain_shadow_evaluations
from skillflow.storage import outbox
from skillflow.storage.schema import shadow_observations, skill_activations, skillbox, workflow_memory
from skillflow.storage.skills import get_skill
from tests.support.lifecycle import AGENT, EMBEDDER, USER, class_hash, config, earlier, make_skill, other_steps, record


def _run(engine: Engine, run_id: str):  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(select(workflow_memory).where(workflow_memory.c.id == run_id)).mappings().one()


def _observations(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(shadow_observations)).scalar() or 0)


def _setup(engine: Engine):  # type: ignore[no-untyped-def]
    """A source run (pre-skill) and a SHADOW skill built from it."""
    source = record(engine, "cancel my reservation", at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source])
    return source, skill


def test_fresh_run_gets_exactly_one_record_and_rerun_adds_none(engine: Engine) -> None:
    cfg = config()
    _source, skill = _setup(engine)
    run_id = record(engine, "please cancel my reservation")
    report = drain_shadow_evaluations(engine, cfg, EMBEDDER)
    assert report.status == "ok" and report.records == 1 and report.pending_left == 0
    row = _run(engine, run_id)
    assert row["shadow_pending"] == 0 and row["shadow_claimed_at"] is None
    [rec] = row["shadow_evaluations"]
    assert rec["idempotency_key"] == f"{run_id}:{skill.id}:v1"
    assert rec["skill_id"] == skill.id and rec["skill_version"] == 1 and rec["evaluator_version"] == "v1"
    assert rec["expected_canonical_hash"] == rec["observed_canonical_hash"] == skill.canonical_hash
    assert rec["trajectory_match"] is True and rec["applicability_mismatch"] is False
    assert rec["matched_trajectory_succeeded"] is True and rec["observed_outcome"] == "success"
    assert 0.6 <= rec["similarity"] <= 1.0
    # A re-run of the flow finds nothing to do; a row forced back into the outbox (a crash after the
    # commit of its observation) converges on the same single record.
    assert drain_shadow_evaluations(engine, cfg, EMBEDDER).records == 0
    with engine.begin() as conn:
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == run_id).values(shadow_pending=1))
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == run_id).values(shadow_evaluations=None))
    drain_shadow_evaluations(engine, cfg, EMBEDDER)
    assert len(_run(engine, run_id)["shadow_evaluations"]) == 1
    assert _observations(engine) == 1
    with engine.connect() as conn:
        stats = get_skill(conn, skill.id).stats or {}
        status = get_skill(conn, skill.id).status
    shadow = stats["shadow"]
    assert shadow["observations"] == 1 and shadow["trajectory_matches"] == 1 and shadow["matched_successes"] == 1
    assert shadow["trajectory_mismatches"] == 0 and shadow["matched_failures"] == 0
    assert shadow["last_evaluated_at"] is not None and len(shadow["recent_evaluations"]) == 1
    assert status == "shadow"  # evaluation never changes a lifecycle status


def test_cross_tenant_source_and_pre_skill_runs_are_never_evaluated(engine: Engine) -> None:
    source, skill = _setup(engine)
    with engine.begin() as conn:  # the source run is still in the outbox: it must be skipped, not evaluated
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == source).values(shadow_pending=1))
    pre = record(engine, "cancel my reservation", at=earlier(1))
    other_user = record(engine, "cancel my reservation", user="u2")
    other_agent = record(engine, "cancel my reservation", agent="agent-b")
    report = drain_shadow_evaluations(engine, config(), EMBEDDER)
    assert report.claimed == 4 and report.records == 0 and report.no_candidate == 4
    for run_id in (source, pre, other_user, other_agent):
        row = _run(engine, run_id)
        assert row["shadow_pending"] == 0 and not row["shadow_evaluations"]
    assert _observations(engine) == 0
    with engine.connect() as conn:  # the skill exists, a SHADOW candidate for u1/agent only, and it saw nothing
        stored = get_skill(conn, skill.id)
    assert (stored.status, stored.agent_id, stored.user_id) == ("shadow", AGENT, USER)
    assert (stored.stats or {}).get("shadow", {}).get("observations", 0) == 0


def test_mismatch_failure_and_unrelated_queries(engine: Engine) -> None:
    _source, skill = _setup(engine)
    mismatch = record(engine, "cancel my reservation now", steps=other_steps())
    failed = record(engine, "I want to cancel the reservation", steps=None)
    with engine.begin() as conn:  # a matched trajectory whose recorded business outcome is a failure
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == failed).values(outcome="failure"))
    unrelated = record(engine, "what is the weather in paris tomorrow")
    drain_shadow_evaluations(engine, config(), EMBEDDER)
    [m] = _run(engine, mismatch)["shadow_evaluations"]
    assert m["trajectory_match"] is False and m["applicability_mismatch"] is True
    assert m["matched_trajectory_succeeded"] is None
    [f] = _run(engine, failed)["shadow_evaluations"]
    assert f["trajectory_match"] is True and f["matched_trajectory_succeeded"] is False
    assert not _run(engine, unrelated)["shadow_evaluations"]
    with engine.connect() as conn:
        shadow = (get_skill(conn, skill.id).stats or {})["shadow"]
    assert (shadow["observations"], shadow["trajectory_matches"], shadow["trajectory_mismatches"]) == (2, 1, 1)
    assert (shadow["matched_successes"], shadow["matched_failures"]) == (0, 1)


def test_disabled_clears_nothing_and_dry_run_writes_nothing(engine: Engine) -> None:
    _setup(engine)
    run_id = record(engine, "please cancel my reservation")
    assert drain_shadow_evaluations(engine, config(shadow_evaluation_enabled=False), EMBEDDER).status == "disabled"
    assert _run(engine, run_id)["shadow_pending"] == 1
    dry = drain_batch(engine, config(), EMBEDDER, 10, dry_run=True)
    assert dry.status == "dry_run" and dry.records == 1
    assert _run(engine, run_id)["shadow_pending"] == 1 and _observations(engine) == 0


def test_shadow_skills_are_never_activated_counted_or_stamped(engine: Engine) -> None:
    _source, skill = _setup(engine)
    run_id = record(engine, "please cancel my reservation", skills=(skill.id,))
    row = _run(engine, run_id)
    assert row["skills_activated"] == [] and row["promoted_skill_id"] is None
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(skill_activations)).scalar() == 0
        stamped = conn.execute(select(func.count()).where(workflow_memory.c.promoted_skill_id.is_not(None))).scalar()
    assert stamped == 0
    from tests.support.lifecycle import sf

    prepared = sf(engine).prepare("please cancel my reservation", user_id="u1")  # a SHADOW skill is never injected
    assert skill.id not in repr(prepared) and prepared.skill_ids == ()


def test_concurrent_drains_claim_disjoint_rows(engine: Engine) -> None:
    _setup(engine)
    ids = [record(engine, f"please cancel my reservation number {i}") for i in range(12)]
    with engine.connect() as a, engine.connect() as b:
        if outbox.uses_row_locks(a):
            ta, tb = a.begin(), b.begin()
            first = {r.id for r in outbox.lock_batch(a, 5)}
            second = {r.id for r in outbox.lock_batch(b, 5)}  # SKIP LOCKED: never waits, never overlaps
            ta.rollback()
            tb.rollback()
        else:
            with a.begin():
                first = set(outbox.claim_batch(a, 5))
            with b.begin():
                second = set(outbox.claim_batch(b, 5))
            with a.begin():
                outbox.release(a, [*first, *second])
    assert len(first) == 5 and len(second) == 5 and not first & second
    reports: list[DrainReport] = []
    threads = [
        threading.Thread(
            target=lambda: reports.append(drain_shadow_evaluations(engine, config(), EMBEDDER, batch_size=3))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.claimed for r in reports) == len(ids) + 1  # + the source run, skipped
    assert all(len(_run(engine, i)["shadow_evaluations"]) == 1 for i in ids)
    assert _observations(engine) == len(ids)


def test_recent_window_and_version_bump_invalidate_nothing(engine: Engine) -> None:
    cfg = config(shadow_evaluation_recent_window=2)
    _source, skill = _setup(engine)
    for i in range(4):
        record(engine, f"please cancel my reservation {i}")
    drain_shadow_evaluations(engine, cfg, EMBEDDER)
    with engine.connect() as conn:
        shadow = (get_skill(conn, skill.id).stats or {})["shadow"]
        status = conn.execute(select(skillbox.c.status).where(skillbox.c.id == skill.id)).scalar()
    assert shadow["observations"] == 4 and len(shadow["recent_evaluations"]) == 2
    assert status == SkillStatus.SHADOW.value


def test_empty_outbox_is_a_noop(engine: Engine) -> None:
    report = drain_shadow_evaluations(engine, config(), EMBEDDER)
    assert report.claimed == 0 and report.batches == 1 and report.pending_left == 0
    assert (report.records, report.failed, report.skills_reconciled) == (0, 0, 0)
