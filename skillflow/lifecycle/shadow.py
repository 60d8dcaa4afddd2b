"""Passive shadow evaluation: compare SHADOW skills with fresh production runs, never act on them.

For each run taken from the durable outbox the evaluator retrieves semantically matching SHADOW skills
under the run's exact agent and user, keeps only skills the run is fair evidence for (created strictly
after the skill, not one of its source workflows, not already evaluated), and compares the expected and
observed canonical hashes plus the already-recorded outcome. It appends a versioned, idempotent record to
``workflow_memory.shadow_evaluations``, indexes it in ``shadow_observations`` and then reconciles
``skillbox.stats["shadow"]`` from that index in SQL. It never builds model context, calls an LLM or a tool,
or changes a lifecycle status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Connection, Engine, case, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from skillflow.injection.embeddings import Embedder
from skillflow.injection.retrieval import search_skills
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.errors import TransientError, is_transient
from skillflow.kernel.models import SkillStatus, WorkflowOutcome, utcnow
from skillflow.lifecycle.shadow_match import Candidate, load_tenant, top_k
from skillflow.storage import outbox
from skillflow.storage.outbox import PendingRun
from skillflow.storage.schema import shadow_observations, skillbox
from skillflow.storage.skills import update_stats

EVALUATOR_VERSION = "v1"
log = logging.getLogger("skillflow.lifecycle.shadow")


class DrainReport(BaseModel):
    """Counts of one drain (no queries, bodies or results)."""

    status: Literal["ok", "disabled", "dry_run"] = "ok"
    batches: int = 0
    claimed: int = 0
    evaluated_runs: int = 0
    records: int = 0
    no_candidate: int = 0
    failed: int = 0
    skills_reconciled: int = 0
    pending_left: int | None = None
    seconds: float = 0.0
    failed_ids: list[str] = Field(default_factory=list)

    def add(self, other: DrainReport) -> None:
        for name in ("batches", "claimed", "evaluated_runs", "records", "no_candidate", "failed", "skills_reconciled"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failed_ids.extend(other.failed_ids)


def idempotency_key(run_id: str, skill_id: str) -> str:
    return f"{run_id}:{skill_id}:{EVALUATOR_VERSION}"


def shadow_record(
    run: PendingRun,
    *,
    skill_id: str,
    skill_version: int,
    expected_hash: str,
    similarity: float,
    evaluated_at: datetime,
) -> dict[str, Any]:
    """The versioned record of docs/design.md, Shadow and drift (pure)."""
    match = run.canonical_hash is not None and run.canonical_hash == expected_hash
    succeeded = _matched_succeeded(match, run.outcome)
    return {
        "idempotency_key": idempotency_key(run.id, skill_id),
        "skill_id": skill_id,
        "skill_version": skill_version,
        "similarity": round(float(similarity), 6),
        "expected_canonical_hash": expected_hash,
        "observed_canonical_hash": run.canonical_hash,
        "trajectory_match": match,
        "applicability_mismatch": not match,
        "matched_trajectory_succeeded": succeeded,
        "observed_outcome": run.outcome,
        "evaluated_at": evaluated_at.isoformat(),
        "evaluator_version": EVALUATOR_VERSION,
    }


def _matched_succeeded(match: bool, outcome: str) -> bool | None:
    """Whether a run on the skill's trajectory succeeded; None off the trajectory or with an unknown outcome."""
    if not match or outcome not in (WorkflowOutcome.SUCCESS.value, WorkflowOutcome.FAILURE.value):
        return None
    return outcome == WorkflowOutcome.SUCCESS.value


def eligible(run: PendingRun, skill_created_at: datetime, source_ids: Iterable[str]) -> bool:
    """Fresh evidence only: created strictly after the skill and not one of its source workflows."""
    return run.created_at > skill_created_at and run.id not in set(source_ids)


def evaluate_batch(
    conn: Connection, runs: Sequence[PendingRun], config: PromotionConfig, embedder: Embedder
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """New records per run id (an empty list: no fresh evidence) and the ids whose evaluation failed. Reads only.

    A database error aborts the batch (its transaction is gone); any other error skips just that run,
    which stays in the outbox.
    """
    out: dict[str, list[dict[str, Any]]] = {r.id: [] for r in runs}
    failed: list[str] = []
    todo = [r for r in runs if r.canonical_hash is not None]
    if not todo:
        return out, failed
    now = utcnow()
    if conn.dialect.name == "oracle":  # ranks in SQL (VECTOR_DISTANCE), one search per run
        vectors = embedder.embed([r.query for r in todo])
        created: dict[str, datetime] = {}
        for run, vec in zip(todo, vectors, strict=True):
            _guarded(
                out,
                failed,
                run,
                lambda r=run, v=vec: _evaluate_run(conn, r, v, config, embedder.model_id, created, now),
            )
        return out, failed
    by_tenant: dict[tuple[str, str], list[PendingRun]] = {}
    for run in todo:
        by_tenant.setdefault((run.agent_id, run.user_id), []).append(run)
    for (agent_id, user_id), tenant_runs in by_tenant.items():
        try:
            matrix = load_tenant(conn, agent_id, user_id, embedder.model_id)
            # Only runs newer than some SHADOW skill can be evidence: the others are not even embedded.
            oldest = min((c.created_at for c in matrix.candidates), default=None)
            fresh = [r for r in tenant_runs if oldest is not None and r.created_at > oldest]
            fresh_vectors = embedder.embed([r.query for r in fresh]) if fresh else None
            ranked = (
                top_k(matrix, fresh_vectors, config.shadow_evaluation_max_candidates, config.shadow_threshold)
                if fresh_vectors is not None
                else []
            )
        except SQLAlchemyError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. mixed dimensions: the tenant's runs stay pending
            log.warning("shadow matching for %d runs failed: %s", len(tenant_runs), type(exc).__name__)
            for run in tenant_runs:
                del out[run.id]
                failed.append(run.id)
            continue
        for run, hits in zip(fresh, ranked, strict=True):
            _guarded(out, failed, run, lambda r=run, h=hits: _records(r, h, now))
    return out, failed


def _guarded(out: dict[str, list[dict[str, Any]]], failed: list[str], run: PendingRun, fn: Any) -> None:
    try:
        out[run.id] = fn()
    except SQLAlchemyError:
        raise
    except Exception as exc:  # noqa: BLE001 - one bad run must not block the outbox; it stays pending
        log.warning("shadow evaluation of run %s failed: %s", run.id, type(exc).__name__)
        del out[run.id]
        failed.append(run.id)


def _records(run: PendingRun, hits: list[tuple[Candidate, float]], now: datetime) -> list[dict[str, Any]]:
    done = {e.get("idempotency_key") for e in run.evaluations}
    return [
        shadow_record(
            run,
            skill_id=c.skill_id,
            skill_version=c.version,
            expected_hash=c.canonical_hash,
            similarity=score,
            evaluated_at=now,
        )
        for c, score in hits
        if eligible(run, c.created_at, c.source_ids) and idempotency_key(run.id, c.skill_id) not in done
    ]


def _evaluate_run(
    conn: Connection,
    run: PendingRun,
    vec: Any,
    config: PromotionConfig,
    model_id: str,
    created: dict[str, datetime],
    now: datetime,
) -> list[dict[str, Any]]:
    hits = search_skills(
        conn,
        vec,
        model_id,
        run.agent_id,
        run.user_id,
        status=SkillStatus.SHADOW,
        k=config.shadow_evaluation_max_candidates,
        min_score=config.shadow_threshold,
    )
    if not hits:
        return []
    missing = [h.skill_id for h in hits if h.skill_id not in created]
    if missing:
        rows = conn.execute(select(skillbox.c.id, skillbox.c.created_at).where(skillbox.c.id.in_(missing)))
        created.update((str(r[0]), r[1]) for r in rows)
    done = {e.get("idempotency_key") for e in run.evaluations}
    return [
        shadow_record(
            run,
            skill_id=hit.skill_id,
            skill_version=hit.version,
            expected_hash=hit.canonical_hash,
            similarity=hit.score,
            evaluated_at=now,
        )
        for hit in hits
        if eligible(run, created[hit.skill_id], hit.source_workflow_ids)
        and idempotency_key(run.id, hit.skill_id) not in done
    ]


def persist(conn: Connection, runs: Sequence[PendingRun], new: dict[str, list[dict[str, Any]]]) -> set[str]:
    """Clear the batch from the outbox, append records, index them; returns the skill ids touched."""
    by_id = {r.id: r for r in runs}
    corrected = _corrected(conn, runs)
    outbox.clear(conn, [rid for rid, recs in new.items() if not recs and rid not in corrected])
    keys = [rec["idempotency_key"] for recs in new.values() for rec in recs]
    known: set[str] = set()
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        known.update(
            conn.execute(
                select(shadow_observations.c.idempotency_key).where(shadow_observations.c.idempotency_key.in_(chunk))
            ).scalars()
        )
    evaluations: dict[str, list[dict[str, Any]]] = {rid: list(recs) for rid, recs in corrected.items()}
    rows: list[dict[str, Any]] = []
    touched: set[str] = {str(rec.get("skill_id")) for recs in corrected.values() for rec in recs}
    for rid, recs in new.items():
        if not recs:
            continue
        run = by_id[rid]
        have = {e.get("idempotency_key") for e in run.evaluations}
        kept = corrected.get(rid, list(run.evaluations))
        evaluations[rid] = [*kept, *(r for r in recs if r["idempotency_key"] not in have)]
        for rec in recs:
            touched.add(rec["skill_id"])
            if rec["idempotency_key"] in known:
                continue
            rows.append(_observation_row(run, rec))
    outbox.write_evaluations(conn, evaluations)
    if rows:
        conn.execute(insert(shadow_observations), rows)
    outbox.requeue_changed(conn, runs)
    return touched


def _corrected(conn: Connection, runs: Sequence[PendingRun]) -> dict[str, list[dict[str, Any]]]:
    """Runs whose outcome changed after their records were written (a conversation's outcome given when it
    ended, docs/guide/runtime.md): their records and observation rows take the run's outcome now; returns each
    such run's full list of records."""
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if not any(e.get("observed_outcome") != run.outcome for e in run.evaluations):
            continue
        records = []
        for rec in run.evaluations:
            succeeded = _matched_succeeded(bool(rec.get("trajectory_match")), run.outcome)
            records.append({**rec, "observed_outcome": run.outcome, "matched_trajectory_succeeded": succeeded})
            conn.execute(
                update(shadow_observations)
                .where(shadow_observations.c.idempotency_key == rec.get("idempotency_key"))
                .values(observed_outcome=run.outcome, matched_succeeded=None if succeeded is None else int(succeeded))
            )
        out[run.id] = records
    return out


def _observation_row(run: PendingRun, rec: dict[str, Any]) -> dict[str, Any]:
    succeeded = rec["matched_trajectory_succeeded"]
    return {
        "idempotency_key": rec["idempotency_key"],
        "run_id": run.id,
        "skill_id": rec["skill_id"],
        "agent_id": run.agent_id,
        "user_id": run.user_id,
        "similarity": rec["similarity"],
        "trajectory_match": 1 if rec["trajectory_match"] else 0,
        "matched_succeeded": None if succeeded is None else int(succeeded),
        "observed_outcome": rec["observed_outcome"],
        "evaluator_version": rec["evaluator_version"],
        "evaluated_at": datetime.fromisoformat(rec["evaluated_at"]),
    }


def shadow_aggregates(conn: Connection, skill_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``stats["shadow"]`` counters per skill from ``shadow_observations`` (one GROUP BY; index on skill_id)."""
    if not skill_ids:
        return {}
    so = shadow_observations.c
    q = (
        select(
            so.skill_id,
            func.count().label("observations"),
            func.coalesce(func.sum(so.trajectory_match), 0).label("matches"),
            func.count(so.matched_succeeded).label("judged"),
            func.coalesce(func.sum(so.matched_succeeded), 0).label("successes"),
            func.coalesce(func.sum(case((so.observed_outcome == WorkflowOutcome.UNKNOWN.value, 1), else_=0)), 0).label(
                "unknown"
            ),
            func.max(so.evaluated_at).label("last"),
        )
        .where(so.skill_id.in_(list(skill_ids)))
        .group_by(so.skill_id)
    )
    out: dict[str, dict[str, Any]] = {}
    for row in conn.execute(q):
        obs, matches, judged, successes = int(row.observations), int(row.matches), int(row.judged), int(row.successes)
        last = row.last
        if isinstance(last, str):  # SQLite returns the raw text for an aggregate of a typed column
            last = datetime.fromisoformat(last)
        out[row.skill_id] = {
            "observations": obs,
            "trajectory_matches": matches,
            "trajectory_mismatches": obs - matches,
            "matched_successes": successes,
            "matched_failures": judged - successes,
            "unknown_outcomes": int(row.unknown),
            "last_evaluated_at": last.isoformat() if last is not None else None,
        }
    return out


def recent_evaluations(conn: Connection, skill_id: str, window: int) -> list[dict[str, Any]]:
    """The newest ``window`` observations of one skill (index range scan, LIMIT in SQL)."""
    if window <= 0:
        return []
    so = shadow_observations.c
    rows = conn.execute(
        select(
            so.run_id, so.similarity, so.trajectory_match, so.matched_succeeded, so.observed_outcome, so.evaluated_at
        )
        .where(so.skill_id == skill_id)
        .order_by(so.evaluated_at.desc(), so.idempotency_key.desc())
        .limit(window)
    ).all()
    return [
        {
            "run_id": r.run_id,
            "similarity": r.similarity,
            "trajectory_match": bool(r.trajectory_match),
            "matched_trajectory_succeeded": None if r.matched_succeeded is None else bool(r.matched_succeeded),
            "observed_outcome": r.observed_outcome,
            "evaluated_at": r.evaluated_at.isoformat(),
        }
        for r in rows
    ]


def reconcile(conn: Connection, skill_ids: Iterable[str], config: PromotionConfig) -> int:
    """Recompute ``stats["shadow"]`` of the skills from the index, inside the batch's own transaction.

    Reconciling where the records are persisted means a crash can never leave the cache behind the index
    (docs/RELIABILITY.md). The first statement per skill writes, so it takes the row lock (PostgreSQL,
    Oracle) or the write lock (SQLite): concurrent drains serialize on a skill in sorted order, and the
    later one sees every record the earlier one committed.
    """
    count = 0
    for skill_id in sorted(set(skill_ids)):
        # A write that changes nothing: ``updated_at`` moves only with what a reviewer decides on, so a drain
        # never refuses a decision made meanwhile (storage.skills.update_stats).
        lock = update(skillbox).where(skillbox.c.id == skill_id).values(status=skillbox.c.status)
        locked = conn.execute(lock).rowcount
        if not locked:
            continue
        figures = shadow_aggregates(conn, [skill_id]).get(skill_id) or empty_shadow_stats()
        figures["recent_evaluations"] = recent_evaluations(conn, skill_id, config.shadow_evaluation_recent_window)
        update_stats(conn, skill_id, {"shadow": figures})
        count += 1
    return count


def empty_shadow_stats() -> dict[str, Any]:
    return {
        "observations": 0,
        "trajectory_matches": 0,
        "trajectory_mismatches": 0,
        "matched_successes": 0,
        "matched_failures": 0,
        "unknown_outcomes": 0,
        "last_evaluated_at": None,
    }


class ShadowBatchError(RuntimeError):
    """A batch failed; the message names the error class only (SQL parameters would carry queries)."""


class TransientShadowBatchError(ShadowBatchError, TransientError):
    """A batch failed on a transient error (``kernel.errors.is_transient``): the drain task retries it."""


def drain_batch(
    engine: Engine,
    config: PromotionConfig,
    embedder: Embedder,
    batch_size: int,
    *,
    dry_run: bool = False,
    exclude: set[str] | None = None,
) -> DrainReport:
    """Claim, evaluate and persist one batch; reconcile the skills it touched. ``exclude`` collects failures."""
    exclude = exclude if exclude is not None else set()
    report = DrainReport(status="dry_run" if dry_run else "ok", batches=1)
    if dry_run:
        with engine.connect() as conn:
            runs = outbox.peek(conn, batch_size)
            new, failed = evaluate_batch(conn, runs, config, embedder)
        report.failed, report.failed_ids = len(failed), failed
        return _counted(report, runs, new)
    report.skills_reconciled = _claim_and_persist(engine, config, embedder, batch_size, exclude, report)
    return report


def _claim_and_persist(
    engine: Engine, config: PromotionConfig, embedder: Embedder, n: int, exclude: set[str], report: DrainReport
) -> int:
    """Claim, evaluate, persist and reconcile one batch; returns how many skills were reconciled."""
    ids: list[str] = []
    try:
        with engine.begin() as conn:
            if outbox.uses_row_locks(conn):
                runs = outbox.lock_batch(conn, n, exclude)
                ids = [r.id for r in runs]
                new, failed = evaluate_batch(conn, runs, config, embedder)
                reconciled = reconcile(conn, persist(conn, runs, new), config)
                _finish(report, runs, new, failed, exclude)
                return reconciled
            ids = outbox.claim_batch(conn, n, exclude=exclude)
        with engine.connect() as conn:
            runs = outbox.read_runs(conn, ids)
            new, failed = evaluate_batch(conn, runs, config, embedder)
        with engine.begin() as conn:
            reconciled = reconcile(conn, persist(conn, runs, new), config)
            outbox.release(conn, failed)
        _finish(report, runs, new, failed, exclude)
        return reconciled
    except Exception as exc:  # noqa: BLE001 - re-raised sanitized: SQL parameters would carry raw queries
        error = TransientShadowBatchError if is_transient(exc) else ShadowBatchError
        log.error("shadow batch of %d runs failed: %s", len(ids), type(exc).__name__)
        if ids and not outbox.uses_row_locks_engine(engine):
            with engine.begin() as conn:
                outbox.release(conn, ids)  # retry promptly instead of after the stale-claim timeout
        raise error(f"shadow batch failed: {type(exc).__name__}") from None


def _finish(
    report: DrainReport,
    runs: Sequence[PendingRun],
    new: dict[str, list[dict[str, Any]]],
    failed: list[str],
    exclude: set[str],
) -> None:
    _counted(report, runs, new)
    report.failed += len(failed)
    report.failed_ids.extend(failed)
    exclude.update(failed)


def _counted(report: DrainReport, runs: Sequence[PendingRun], new: dict[str, list[dict[str, Any]]]) -> DrainReport:
    report.claimed += len(runs)
    report.evaluated_runs += sum(1 for recs in new.values() if recs)
    report.no_candidate += sum(1 for recs in new.values() if not recs)
    report.records += sum(len(recs) for recs in new.values())
    return report


def drain_shadow_evaluations(
    engine: Engine,
    config: PromotionConfig,
    embedder: Embedder,
    timeout: float | None = 5.0,
    batch_size: int | None = None,
    max_batches: int | None = None,
    *,
    dry_run: bool = False,
) -> DrainReport:
    """Drain the outbox batch after batch until it is empty, ``timeout`` passes or ``max_batches`` ran.

    The one composition of shadow evaluation: the ``shadow-evaluation`` flow runs it, and so do tests and a
    controlled shutdown. A ``dry_run`` evaluates one batch without claiming or writing anything.
    """
    if not config.shadow_evaluation_enabled:
        return DrainReport(status="disabled")
    size = batch_size or config.shadow_evaluation_queue_size
    started = time.monotonic()
    total = DrainReport(status="dry_run" if dry_run else "ok", batches=0)
    exclude: set[str] = set()
    while max_batches is None or total.batches < max_batches:
        batch = drain_batch(engine, config, embedder, size, dry_run=dry_run, exclude=exclude)
        total.add(batch)
        timed_out = timeout is not None and time.monotonic() - started >= timeout
        if dry_run or batch.claimed == 0 or batch.claimed == batch.failed or timed_out:
            break
    with engine.connect() as conn:
        total.pending_left = outbox.pending_count(conn)
    total.seconds = round(time.monotonic() - started, 4)
    log.info(
        "shadow drain: batches=%d runs=%d records=%d failed=%d",
        total.batches,
        total.claimed,
        total.records,
        total.failed,
    )
    return total
