"""The promotion pipeline's one composition: a partition's cycle and a single class ("Distill now").

Stages (docs/design.md, "Promotion"): plan (cadence) → staleness sweep → aggregate + gates (+ rejection
backoff) → rank → evidence + distill → validate → land (store and stamp, or record the rejection) →
finish (report, cycle mark). :func:`run_partition` composes them for one (agent, user) partition and
:func:`promote_class` for one class ("Distill now"); the Prefect flows only orchestrate these two
(fan-out, retries, artifacts). Writes are idempotent so a killed cycle re-runs to the same rows.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from skillflow.kernel.config import PromotionConfig, Settings, get_settings
from skillflow.kernel.errors import is_transient
from skillflow.kernel.models import ClassStats, new_id, utcnow
from skillflow.promotion.backends import check_providers
from skillflow.promotion.chunk import LEASE_HELD, Prefetched, finished_reports
from skillflow.promotion.distill import DistillOutcome
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.gates import INSUFFICIENT, UNKNOWN_CLASS
from skillflow.promotion.landing import ACTOR, ClassResult, landed_by_run, record_rejection, store_skill
from skillflow.promotion.report import (
    PromotionReport,
    apply_assessments,
    apply_ranking,
    apply_result,
    finish_partition,
)
from skillflow.promotion.stages import (
    assess_classes,
    calibrate_rule,
    choose,
    distill_evidence,
    distill_rejection,
    gather_evidence,
    plan_partition,
    review_flags,
    stage_failure,
    unhashed_flags,
    validate_draft,
)
from skillflow.promotion.validation import ValidationResult
from skillflow.storage.aggregate import (
    cycle_count,
)
from skillflow.storage.skills import repair_stamps, tenant_filter

log = logging.getLogger("skillflow.promotion.cycle")

LEASE_TTL_SECONDS = 900.0


class PartitionFailed(RuntimeError):
    """A partition's cycle stopped at ``stage`` on a non-transient error; the message names classes only."""

    def __init__(self, agent_id: str, user_id: str, stage: str, exc: BaseException) -> None:
        self.agent_id, self.user_id, self.stage = agent_id, user_id, stage
        self.reason = f"{stage} failed: {type(exc).__name__}"
        super().__init__(f"partition {agent_id}/{user_id}: {self.reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # survives pickling (Prefect persists task failures)
        return (_partition_failed, (self.agent_id, self.user_id, self.stage, self.reason))


def _partition_failed(agent_id: str, user_id: str, stage: str, reason: str) -> PartitionFailed:
    err = PartitionFailed.__new__(PartitionFailed)
    err.agent_id, err.user_id, err.stage, err.reason = agent_id, user_id, stage, reason
    RuntimeError.__init__(err, f"partition {agent_id}/{user_id}: {reason}")
    return err


def lease_name(agent_id: str, user_id: str) -> str:
    """The partition's lease: one per (agent, user), however the ids are spelled (``acme:eu``/``bob`` and
    ``acme``/``eu:bob`` are two partitions)."""
    return _bounded(f"promotion:{len(agent_id)}:{agent_id}:{user_id}")


def legacy_lease_name(agent_id: str, user_id: str) -> str:
    """The name workers before the length prefix take for the partition: held too, so that an old and a new
    worker never run one partition at once during a rolling upgrade (docs/RELIABILITY.md, "Found by the
    suite"). Partitions spelled alike share it, so they take turns while it is held, which is safe."""
    return _bounded(f"promotion:{agent_id}:{user_id}")


def _bounded(name: str) -> str:
    """A lease name as stored: itself, or its sha256 when longer than the column allows."""
    return name if len(name) <= 300 else "promotion:" + hashlib.sha256(name.encode()).hexdigest()


def lease_names(agent_id: str, user_id: str) -> tuple[str, str]:
    """The leases a partition's cycle holds, in the order taken: its own, then the legacy name."""
    return lease_name(agent_id, user_id), legacy_lease_name(agent_id, user_id)


def finished_report(engine: Engine, flow_run_id: str | None, agent_id: str, user_id: str) -> PromotionReport | None:
    """The stored cycle report of this flow run in this partition, if the cycle already finished (else None)."""
    if not flow_run_id:
        return None
    return finished_reports(engine, flow_run_id, [(agent_id, user_id)]).get((agent_id, user_id))


def process_class(
    engine: Engine,
    stats: ClassStats,
    config: PromotionConfig,
    cycle: int,
    *,
    dry_run: bool,
    actor: str,
    flow_run_id: str | None,
    settings: Settings | None = None,
) -> ClassResult:
    """Distill → validate → land one ranked class (shared by :func:`run_partition` and :func:`promote_class`).

    A transient error (rate limit, timeout, 5xx, lost connection) propagates so the task retries. Any other
    error (a provider 400/401, a ``RedactionError``, an unusable answer) is the class's own failure: it
    becomes a recorded rejection ``<stage> failed: <ErrorClass>`` with the usual backoff (the error text
    is never recorded: it may quote evidence), and the cycle goes on with the next class.
    """
    stage = "evidence"
    ready: tuple[Evidence, DistillOutcome, ValidationResult] | None = None
    reasons: list[str] | None = None
    try:
        evidence = gather_evidence(engine, stats, config)
        stage = "distillation"
        outcome = distill_evidence(evidence, config, settings)
        reasons = distill_rejection(outcome)
        if reasons is None and outcome.skill_md:
            stage = "validation"
            validation = validate_draft(outcome.skill_md, evidence, config, settings)
            if validation.ok:
                ready = (evidence, outcome, validation)
            else:
                reasons = list(validation.reasons)
    except Exception as exc:
        if is_transient(exc):
            raise
        log.warning("class %s: %s failed: %s", stats.canonical_hash[:12], stage, type(exc).__name__)
        reasons = [stage_failure(stage, exc)]
    if ready is not None:
        if dry_run:
            return ClassResult(stats.canonical_hash, "would promote", [])
        # Not a class failure: a store error (the database) fails the partition, which a retry re-runs.
        return store_skill(engine, *ready, config, actor=actor, flow_run_id=flow_run_id)
    reasons = reasons or [INSUFFICIENT]
    if dry_run:
        return ClassResult(stats.canonical_hash, "rejected", reasons)
    return record_rejection(engine, stats, cycle, reasons, config)


def run_partition(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    *,
    dry_run: bool = False,
    force: bool = True,
    now: datetime | None = None,
    actor: str = ACTOR,
    flow_run_id: str | None = None,
    settings: Settings | None = None,
    prefetched: Prefetched | None = None,
) -> PromotionReport:
    """One partition's cycle: the one composition of the stages (the ``promotion-cycle`` flow runs it per partition).

    ``prefetched`` is the partition's share of its chunk's read (:func:`skillflow.promotion.chunk.prefetch`):
    counters, class statistics and any finished report of this flow run, so a partition that is not due issues
    no statement and a due one reads neither again (docs/guide/aggregate.md). ``settings`` (default: read once
    here) serve every stage of the partition: reading them costs about 2 ms, more than some stages do.
    """
    from skillflow.promotion.staleness import sweep
    from skillflow.storage.leases import acquire_all, release_all

    now = now or utcnow()
    plan = plan_partition(engine, agent_id, user_id, config, force, prefetched.counters if prefetched else None)
    if prefetched is not None and not plan.run:
        done = prefetched.done
    else:  # a due partition asks again: a task retry may follow a finished attempt its prefetched data predates
        done = finished_report(engine, flow_run_id, agent_id, user_id) if not dry_run else None
    if done is not None:  # a retry of a flow run whose cycle already finished here (e.g. killed after the mark)
        release_all(engine, lease_names(agent_id, user_id), flow_run_id or "")  # the crashed attempt's leases
        return done
    report = PromotionReport(
        agent_id=agent_id, user_id=user_id, cycle=plan.cycle, dry_run=dry_run, flow_run_id=flow_run_id
    )
    if not plan.run:
        report.partition_skipped = plan.reason
        return report
    settings = settings or get_settings()
    check_providers(settings)  # a missing key fails the partition naming it; no class is rejected for it
    holder = flow_run_id or new_id()
    if not dry_run and not acquire_all(engine, lease_names(agent_id, user_id), holder, LEASE_TTL_SECONDS):
        report.partition_skipped = LEASE_HELD
        finish_partition(engine, report, mark=False)
        return report
    if not dry_run:  # another flow run may have cycled the partition between the read above and the lease
        with engine.connect() as conn:
            current = cycle_count(conn, agent_id, user_id) + 1
        if current != plan.cycle:
            plan = replace(plan, cycle=current)
            report.cycle = current
    stage = "sweep"
    try:
        swept = sweep(
            engine, agent_id, user_id, actor=actor, flow_run_id=flow_run_id, dry_run=dry_run,
            handoffs_allowed=config.promote_handoff_classes,
        )  # fmt: skip
        report.deprecated = list(swept.deprecated)
        if swept.note:
            report.review_flags.append(swept.note)
        if not dry_run:  # runs captured while a decision on their class committed take its stamp now
            with engine.begin() as conn:
                if repaired := repair_stamps(conn, agent_id, user_id):
                    log.info("partition %s/%s: %d run stamp(s) repaired", agent_id, user_id, repaired)
        stage = "aggregation"
        # A retry of this flow run finds the skills an earlier attempt stored: reported as that attempt would have
        own = landed_by_run(engine, agent_id, user_id, flow_run_id) if flow_run_id and not dry_run else {}
        assessments = assess_classes(
            engine,
            agent_id,
            user_id,
            config,
            now,
            plan.cycle,
            write_stats=not dry_run,
            prefetched=prefetched.stats if prefetched else None,
            own=own,
        )
        apply_assessments(report, assessments, now)
        report.review_flags.extend(unhashed_flags(engine, agent_id, user_id))
        chosen, below = choose(assessments, config, now)
        apply_ranking(report, below)
        stage = "classes"
        for stats in chosen:
            result = own.get(stats.canonical_hash) or process_class(
                engine,
                stats,
                config,
                plan.cycle,
                dry_run=dry_run,
                actor=actor,
                flow_run_id=flow_run_id,
                settings=settings,
            )
            apply_result(report, result)
        stage = "calibration"
        report.applicability = calibrate_rule(engine, agent_id, user_id, config, plan.cycle, dry_run, settings)
        stage = "report"
        report.review_flags.extend(review_flags(engine, agent_id, user_id))
        finish_partition(engine, report, mark=True)
    except Exception as exc:
        if is_transient(exc):
            raise  # the task retries the whole (idempotent) partition
        raise PartitionFailed(agent_id, user_id, stage, exc) from exc
    finally:
        if not dry_run:
            release_all(engine, lease_names(agent_id, user_id), holder)
    log.info(
        "cycle %d %s/%s: promoted=%d rejected=%d skipped=%d",
        plan.cycle,
        agent_id,
        user_id,
        len(report.promoted),
        len(report.rejected),
        len(report.skipped),
    )
    return report


def failure_reason(error: object) -> str:
    """Why a partition failed: ``<stage> failed: <ErrorClass>`` (a transient error past its retries has no stage)."""
    if isinstance(error, PartitionFailed):
        return error.reason
    return f"failed: {type(error).__name__}"


def record_partition_failure(
    engine: Engine,
    agent_id: str,
    user_id: str,
    reason: str,
    *,
    dry_run: bool = False,
    flow_run_id: str | None = None,
) -> PromotionReport:
    """The stored report of a partition whose cycle failed: stage and error class, no cycle mark."""
    with engine.connect() as conn:
        cycle = cycle_count(conn, agent_id, user_id) + 1
    report = PromotionReport(
        agent_id=agent_id,
        user_id=user_id,
        cycle=cycle,
        dry_run=dry_run,
        flow_run_id=flow_run_id,
        partition_failed=reason,
    )
    log.error("cycle %d %s/%s failed: %s", cycle, agent_id, user_id, reason)
    finish_partition(engine, report, mark=False)
    return report


def resolve_hash(engine: Engine, agent_id: str, user_id: str, prefix: str) -> str | None:
    """The one class hash of the tenant starting with ``prefix`` (None if none; ValueError if ambiguous)."""
    from skillflow.storage.schema import workflow_memory as wm

    q = (
        select(wm.c.canonical_hash)
        .where(tenant_filter(wm, agent_id, user_id), wm.c.canonical_hash.like(prefix.lower() + "%"))
        .distinct()
        .limit(2)
    )
    with engine.connect() as conn:
        found = list(conn.execute(q).scalars())
    if len(found) > 1:
        raise ValueError(f"hash prefix {prefix!r} is ambiguous in this tenant")
    return found[0] if found else None


def promote_class(
    engine: Engine,
    agent_id: str,
    user_id: str,
    canonical_hash: str,
    config: PromotionConfig,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    actor: str = "flow:distill-class",
    flow_run_id: str | None = None,
    settings: Settings | None = None,
) -> PromotionReport:
    """``promote_class`` ("Distill now"): the same gates and validation for one class; hand-picking bypasses nothing.

    The rejection backoff (a cost control for scheduled cycles) does not block an explicit request.
    """
    from skillflow.storage.leases import acquire_all, release_all

    now = now or utcnow()
    settings = settings or get_settings()
    check_providers(settings)  # a missing key fails the request naming it; the class is not rejected for it
    with engine.connect() as conn:
        cycle = cycle_count(conn, agent_id, user_id)
    report = PromotionReport(
        mode="distill", agent_id=agent_id, user_id=user_id, cycle=cycle, dry_run=dry_run, flow_run_id=flow_run_id
    )
    full = resolve_hash(engine, agent_id, user_id, canonical_hash) if len(canonical_hash) >= 4 else None
    assessments = (
        assess_classes(
            engine, agent_id, user_id, config, now, cycle, full, respect_backoff=False, write_stats=not dry_run
        )
        if full
        else []
    )
    if not assessments:
        report.skipped.append((canonical_hash, UNKNOWN_CLASS))
        finish_partition(engine, report, mark=False)
        return report
    apply_assessments(report, assessments, now)
    if assessments[0].eligible:
        holder = flow_run_id or new_id()
        if not dry_run and not acquire_all(engine, lease_names(agent_id, user_id), holder, LEASE_TTL_SECONDS):
            report.partition_skipped = LEASE_HELD
        else:
            try:
                result = process_class(
                    engine,
                    assessments[0].stats,
                    config,
                    cycle,
                    dry_run=dry_run,
                    actor=actor,
                    flow_run_id=flow_run_id,
                    settings=settings,
                )
                apply_result(report, result)
            finally:
                if not dry_run:
                    release_all(engine, lease_names(agent_id, user_id), holder)
    finish_partition(engine, report, mark=False)
    return report
