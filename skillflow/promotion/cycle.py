"""The promotion pipeline: its stages as plain functions, their one composition, and the report they fill.

Stages (docs/design.md, "Promotion"): plan (cadence) → staleness sweep → aggregate + gates (+ rejection
backoff) → rank → evidence + distill → validate → land (store and stamp, or record the rejection) →
finish (report, cycle mark). :func:`run_partition` composes them for one (agent, user) partition and
:func:`promote_class` for one class ("Distill now"); the Prefect flows only orchestrate these two
(fan-out, retries, artifacts). Writes are idempotent so a killed cycle re-runs to the same rows.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Engine, case, func, select

from skillflow.kernel.config import PromotionConfig, Settings, get_settings
from skillflow.kernel.errors import is_transient
from skillflow.kernel.models import ClassStats, SkillStatus, new_id, utcnow
from skillflow.promotion.distill import DistillOutcome
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.gates import INSUFFICIENT, UNKNOWN_CLASS, GateResult, evaluate_gates, whole_days_since
from skillflow.promotion.landing import ACTOR, ClassResult, Decision, record_rejection, store_skill
from skillflow.promotion.ranking import by_score, score
from skillflow.promotion.validation import ValidationResult
from skillflow.storage.aggregate import (
    class_samples,
    class_signature,
    cycle_count,
    mark_cycle,
    runs_since_rejection,
)
from skillflow.storage.aggregate import runs_since_last_cycle as _runs_since
from skillflow.storage.reports import report_id, write_report
from skillflow.storage.schema import class_state, skill_activations, skillbox
from skillflow.storage.skills import declared_state_changes, last_retired, next_version, tenant_filter

log = logging.getLogger("skillflow.promotion.cycle")

LEASE_TTL_SECONDS = 900.0
LEASE_HELD = "lease held by another promotion cycle"


class GateRow(BaseModel):
    """One line of the per-class gate table."""

    hash: str
    canonical_hash: str
    executions: int
    success_rate: float
    distinct_queries: int
    last_seen_days: int
    checks: dict[str, bool]
    score: float | None = None
    decision: str = "ineligible"
    reason: str | None = None


class PromotionReport(BaseModel):
    """What one cycle (or one "Distill now") did in one (agent, user) partition; stored and published."""

    kind: Literal["promotion"] = "promotion"
    mode: Literal["cycle", "distill"] = "cycle"
    agent_id: str
    user_id: str
    cycle: int
    dry_run: bool = False
    flow_run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    partition_skipped: str | None = None
    partition_failed: str | None = None
    promoted: list[str] = Field(default_factory=list)
    would_promote: list[str] = Field(default_factory=list)
    rejected: list[tuple[str, list[str]]] = Field(default_factory=list)
    skipped: list[tuple[str, str]] = Field(default_factory=list)
    deprecated: list[tuple[str, str]] = Field(default_factory=list)
    review_flags: list[str] = Field(default_factory=list)
    candidates_considered: int = 0
    gates: list[GateRow] = Field(default_factory=list)
    applicability: dict[str, Any] | None = None  # the fitted injection rule (promotion/calibrate.py)

    def decide(self, canonical_hash: str, decision: Decision, reason: str | None = None) -> None:
        for row in self.gates:
            if row.canonical_hash == canonical_hash:
                row.decision, row.reason = decision, reason


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


@dataclass(frozen=True)
class Plan:
    """Whether a partition runs now, and the cycle number it would be."""

    agent_id: str
    user_id: str
    cycle: int
    runs_since: int
    run: bool
    reason: str | None = None


@dataclass(frozen=True)
class Assessment:
    """A class's SQL aggregate, its gates, its score and any rejection backoff."""

    stats: ClassStats
    gate: GateResult
    score: float
    backoff: str | None = None

    @property
    def eligible(self) -> bool:
        return self.gate.eligible and self.backoff is None


def lease_name(agent_id: str, user_id: str) -> str:
    name = f"promotion:{agent_id}:{user_id}"
    return name if len(name) <= 300 else "promotion:" + hashlib.sha256(name.encode()).hexdigest()


# -- plan ------------------------------------------------------------------------------------------
def plan_partition(engine: Engine, agent_id: str, user_id: str, config: PromotionConfig, force: bool) -> Plan:
    """Cadence (item 9): unless forced, run only after ``promotion_every_n_runs`` new runs; 0 = manual only."""
    with engine.connect() as conn:
        cycle = cycle_count(conn, agent_id, user_id) + 1
        since = _runs_since(conn, agent_id, user_id)
    every = config.promotion_every_n_runs
    if force:
        return Plan(agent_id, user_id, cycle, since, True)
    if every == 0:
        return Plan(agent_id, user_id, cycle, since, False, "manual only: promotion_every_n_runs = 0")
    if since < every:
        return Plan(agent_id, user_id, cycle, since, False, f"cadence: {since} runs since last cycle < {every}")
    return Plan(agent_id, user_id, cycle, since, True)


# -- aggregate + gates -----------------------------------------------------------------------------
def assess_classes(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    now: datetime,
    cycle: int,
    canonical_hash: str | None = None,
    respect_backoff: bool = True,
    *,
    write_stats: bool = True,
) -> list[Assessment]:
    """Read the partition's maintained class statistics and evaluate every gate; apply the rejection backoff.

    The statistics equal the full aggregation (docs/guide/aggregate.md); ``write_stats=False`` (a dry run) reads
    the full aggregation instead, so nothing is written.
    """
    from skillflow.storage.class_stats import partition_stats

    stats = partition_stats(engine, agent_id, user_id, canonical_hash, write=write_stats)
    with engine.connect() as conn:
        live_q = select(skillbox.c.canonical_hash).where(
            tenant_filter(skillbox, agent_id, user_id), skillbox.c.live_key.is_not(None)
        )
        live = set(conn.execute(live_q).scalars())
        declared = declared_state_changes(conn, agent_id)
        waits: dict[str, int] = {}
        fresh: dict[str, int] = {}
        if respect_backoff:
            fresh = runs_since_rejection(conn, agent_id, user_id)
            rows = conn.execute(
                select(class_state.c.canonical_hash, class_state.c.retry_after_cycle).where(
                    tenant_filter(class_state, agent_id, user_id), class_state.c.retry_after_cycle >= cycle
                )
            )
            waits = {r[0]: int(r[1]) for r in rows}
    out = []
    for s in stats:
        gate = evaluate_gates(s, config, now, live_skill=s.canonical_hash in live, declared=declared)
        backoff = None
        if gate.eligible and s.canonical_hash in waits:
            backoff = f"backoff: retry after cycle {waits[s.canonical_hash]}"
        elif (
            gate.eligible
            and fresh.get(s.canonical_hash, config.rejection_requalify_runs) < config.rejection_requalify_runs
        ):
            n = fresh[s.canonical_hash]
            backoff = (
                f"rejected by a reviewer: {n} new runs < rejection_requalify_runs {config.rejection_requalify_runs}"
            )
        out.append(Assessment(s, gate, score(s, config, now), backoff))
    return out


def gate_rows(assessments: list[Assessment], now: datetime) -> list[GateRow]:
    rows = []
    for a in assessments:
        s = a.stats
        decision: Decision = "backoff" if a.backoff else ("ineligible" if not a.gate.eligible else "below cut")
        rows.append(
            GateRow(
                hash=s.canonical_hash[:12],
                canonical_hash=s.canonical_hash,
                executions=s.executions,
                success_rate=round(s.success_rate, 4),
                distinct_queries=s.distinct_queries,
                last_seen_days=whole_days_since(s.last_seen, now),
                checks=dict(a.gate.checks),
                score=round(a.score, 4) if a.gate.eligible else None,
                decision=decision,
                reason=a.backoff or a.gate.reason,
            )
        )
    return rows


# -- rank ------------------------------------------------------------------------------------------
def choose(
    assessments: list[Assessment], config: PromotionConfig, now: datetime
) -> tuple[list[ClassStats], list[tuple[str, str]]]:
    """Top classes by score among the eligible; the rest of the eligible are skipped with their rank."""
    ordered = by_score([a.stats for a in assessments if a.eligible], config, now)
    cap = config.max_promotions_per_cycle
    below = [
        (s.canonical_hash, f"rank {i} > max_promotions_per_cycle {cap}") for i, s in enumerate(ordered[cap:], cap + 1)
    ]
    return ordered[:cap], below


# -- evidence, distill, validate -------------------------------------------------------------------
def gather_evidence(engine: Engine, stats: ClassStats, config: PromotionConfig) -> Evidence:
    """Newest successes (+ failures) after the demotion cutoff, signature, toolbox, previous demotion reason."""
    from skillflow.promotion.staleness import registered_tools

    a, u, h = stats.agent_id, stats.user_id, stats.canonical_hash
    with engine.connect() as conn:
        ok, bad = class_samples(conn, a, u, h, stats.since, config.distill_sample_size, config.include_failure_samples)
        retired = last_retired(conn, a, u, h)
        return Evidence(
            stats=stats,
            signature=class_signature(conn, a, u, h),
            successes=ok,
            failures=bad,
            toolbox=registered_tools(conn, a),
            previous_demotion_reason=retired.demotion_reason if retired else None,
            version=next_version(conn, a, u, h),
        )


def distill_evidence(evidence: Evidence, config: PromotionConfig, settings: Settings | None = None) -> DistillOutcome:
    """Ask the configured distiller for a SKILL.md (a ``DistillOutcome``; INSUFFICIENT is a value)."""
    from skillflow.promotion.backends import get_distiller

    return get_distiller(settings or get_settings()).distill(evidence, config.skill_max_content_chars)


def distill_rejection(outcome: DistillOutcome) -> list[str] | None:
    """The rejection reasons of a distillation, or None when it produced a SKILL.md."""
    if outcome.insufficient or not outcome.skill_md:
        return [INSUFFICIENT, *[r for r in outcome.reasons if r != INSUFFICIENT]]
    return None


def validate_draft(
    skill_md: str, evidence: Evidence, config: PromotionConfig, settings: Settings | None = None
) -> ValidationResult:
    """Every mandatory validation check plus the fail-closed judge (a ``ValidationResult``)."""
    from skillflow.promotion.backends import get_judge
    from skillflow.promotion.validation import validate_skill

    return validate_skill(skill_md, evidence, get_judge(settings or get_settings()), config.skill_max_content_chars)


# -- finish ----------------------------------------------------------------------------------------
def review_flags(engine: Engine, agent_id: str, user_id: str) -> list[str]:
    """ACTIVE skills whose activations mostly took another path (> 50 % deviation): review, never auto-demote."""
    # A run with no identity (NULL hash) took another path too.
    dev = func.sum(case((skill_activations.c.canonical_hash == skillbox.c.canonical_hash, 0), else_=1))
    q = (
        select(skillbox.c.id, func.count().label("n"), dev.label("dev"))
        .select_from(skillbox.join(skill_activations, skill_activations.c.skill_id == skillbox.c.id))
        .where(tenant_filter(skillbox, agent_id, user_id), skillbox.c.status == SkillStatus.ACTIVE.value)
        .group_by(skillbox.c.id)
    )
    with engine.connect() as conn:
        rows = list(conn.execute(q))
    return [
        f"deviation {int(r.dev or 0)}/{int(r.n)} > 50% for skill {r.id}: check retrieval"
        for r in rows
        if (r.dev or 0) * 2 > r.n
    ]


def unhashed_flags(engine: Engine, agent_id: str, user_id: str) -> list[str]:
    """Legacy rows without an identity are not aggregated: say so, with the exact backfill command."""
    from skillflow.storage.aggregate import unhashed_runs

    with engine.connect() as conn:
        n = unhashed_runs(conn, agent_id, user_id)
    if not n:
        return []
    return [f"{n} legacy run(s) have no canonical hash and are not aggregated: run {backfill_command(engine)}"]


def backfill_command(engine: Engine) -> str:
    """The exact command that hashes legacy rows of this database (password hidden)."""
    return f"`skillflow backfill --db {engine.url.render_as_string(hide_password=True)}`"


def finished_report(engine: Engine, flow_run_id: str | None, agent_id: str, user_id: str) -> PromotionReport | None:
    """The stored cycle report of this flow run in this partition, if the cycle already finished (else None)."""
    from skillflow.storage.schema import reports

    if not flow_run_id:
        return None
    rid = report_id("promotion", flow_run_id, "cycle", agent_id, user_id)
    with engine.connect() as conn:
        body = conn.execute(select(reports.c.body).where(reports.c.id == rid)).scalar()
    if not body or body.get("partition_skipped") == LEASE_HELD or body.get("partition_failed"):
        return None
    return PromotionReport.model_validate(body)


def finish_partition(engine: Engine, report: PromotionReport, mark: bool) -> str | None:
    """Store the report and (for a real cycle) mark the partition's cycle, in one idempotent transaction."""
    if report.dry_run:
        return None
    rid = report_id("promotion", report.flow_run_id, report.mode, report.agent_id, report.user_id)
    with engine.begin() as conn:
        write_report(
            conn,
            report_id=rid,
            kind="promotion",
            body=report.model_dump(mode="json"),
            created_at=report.created_at,
            agent_id=report.agent_id,
            user_id=report.user_id,
            flow_run_id=report.flow_run_id,
        )
        if mark:
            mark_cycle(conn, report.agent_id, report.user_id, report.created_at, cycle=report.cycle)
    return rid


def apply_result(report: PromotionReport, result: ClassResult) -> None:
    """Record one class's end in the report and its gate row."""
    h = result.canonical_hash
    if result.decision == "promoted" and result.skill_id:
        report.promoted.append(result.skill_id)
        if result.status == SkillStatus.SHADOW.value:
            report.review_flags.append(f"skill {result.skill_id} landed SHADOW: it needs an explicit activation review")
    elif result.decision == "would promote":
        report.would_promote.append(h)
    elif result.decision == "rejected":
        report.rejected.append((h, result.reasons))
    else:
        report.skipped.append((h, result.reasons[0] if result.reasons else ""))
    report.decide(h, result.decision, "; ".join(result.reasons) or None)


def apply_assessments(report: PromotionReport, assessments: list[Assessment], now: datetime) -> None:
    report.candidates_considered = len(assessments)
    report.gates = gate_rows(assessments, now)
    for a in assessments:
        if not a.eligible:
            report.skipped.append((a.stats.canonical_hash, a.backoff or a.gate.reason or ""))


def apply_ranking(report: PromotionReport, below: list[tuple[str, str]]) -> None:
    for h, reason in below:
        report.skipped.append((h, reason))
        report.decide(h, "below cut", reason)


# -- one class, end to end (shared by run_cycle and promote_class) -------------------------------
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


def calibrate_rule(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    cycle: int,
    dry_run: bool,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """Stage: refit and store the tenant's applicability rule for its live skills (every cycle)."""
    from skillflow.injection.embeddings import get_embedder
    from skillflow.promotion.calibrate import calibrate

    embedder = get_embedder((settings or get_settings()).embedder)
    return calibrate(engine, agent_id, user_id, config, cycle, dry_run=dry_run, embedder=embedder)


def stage_failure(stage: str, exc: BaseException) -> str:
    """The stable rejection reason of a failed stage: its name and the error class(es), never a message."""
    cause = exc.__cause__
    return f"{stage} failed: {type(exc).__name__}" + (f" ({type(cause).__name__})" if cause is not None else "")


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
) -> PromotionReport:
    """One partition's cycle: the one composition of the stages (the ``promotion-cycle`` flow runs it per partition)."""
    from skillflow.promotion.staleness import sweep
    from skillflow.storage.leases import acquire, release

    now = now or utcnow()
    done = finished_report(engine, flow_run_id, agent_id, user_id) if not dry_run else None
    if done is not None:  # a retry of a flow run whose cycle already finished here (e.g. killed after the mark)
        from skillflow.storage.leases import release as release_lease

        release_lease(engine, lease_name(agent_id, user_id), flow_run_id or "")  # the crashed attempt's lease
        return done
    plan = plan_partition(engine, agent_id, user_id, config, force)
    report = PromotionReport(
        agent_id=agent_id, user_id=user_id, cycle=plan.cycle, dry_run=dry_run, flow_run_id=flow_run_id
    )
    if not plan.run:
        report.partition_skipped = plan.reason
        return report
    holder = flow_run_id or new_id()
    if not dry_run and not acquire(engine, lease_name(agent_id, user_id), holder, LEASE_TTL_SECONDS):
        report.partition_skipped = LEASE_HELD
        finish_partition(engine, report, mark=False)
        return report
    stage = "sweep"
    try:
        swept = sweep(engine, agent_id, user_id, actor=actor, flow_run_id=flow_run_id, dry_run=dry_run)
        report.deprecated = list(swept.deprecated)
        if swept.note:
            report.review_flags.append(swept.note)
        stage = "aggregation"
        assessments = assess_classes(engine, agent_id, user_id, config, now, plan.cycle, write_stats=not dry_run)
        apply_assessments(report, assessments, now)
        report.review_flags.extend(unhashed_flags(engine, agent_id, user_id))
        chosen, below = choose(assessments, config, now)
        apply_ranking(report, below)
        stage = "classes"
        for stats in chosen:
            result = process_class(
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
            release(engine, lease_name(agent_id, user_id), holder)
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


# -- "Distill now" ---------------------------------------------------------------------------------
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
    from skillflow.storage.leases import acquire, release

    now = now or utcnow()
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
        if not dry_run and not acquire(engine, lease_name(agent_id, user_id), holder, LEASE_TTL_SECONDS):
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
                    release(engine, lease_name(agent_id, user_id), holder)
    finish_partition(engine, report, mark=False)
    return report
