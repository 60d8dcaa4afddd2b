"""The promotion stages as plain functions: plan, aggregate + gates, rank, evidence, distill, validate, flags.

:mod:`skillflow.promotion.cycle` composes them (docs/design.md, "Promotion"); each stage is a plain
function of an engine and values, so the composition, its tests and the fault suite share one code path.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select

from skillflow.kernel.canonical import sequence_tools
from skillflow.kernel.config import PromotionConfig, Settings, get_settings
from skillflow.kernel.models import ClassStats, SkillStatus
from skillflow.promotion.distill import DistillOutcome
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.gates import INSUFFICIENT, GateResult, evaluate_gates
from skillflow.promotion.ranking import by_score, score
from skillflow.promotion.validation import ValidationResult
from skillflow.storage.aggregate import (
    RESET_STATUSES,
    class_samples,
    class_signature,
    cycle_count,
    runs_since_rejection,
)
from skillflow.storage.aggregate import runs_since_last_cycle as _runs_since
from skillflow.storage.counters import Counters
from skillflow.storage.schema import class_state, skill_activations, skillbox
from skillflow.storage.skills import (
    called_tools,
    declared_handoffs,
    declared_state_changes,
    last_retired,
    next_version,
    tenant_filter,
)

log = logging.getLogger("skillflow.promotion.stages")


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


def plan_partition(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    force: bool,
    counters: Counters | None = None,
) -> Plan:
    """Cadence (item 9): unless forced, run only after ``promotion_every_n_runs`` new runs; 0 = manual only.

    ``counters`` (read for a whole chunk, :mod:`skillflow.promotion.chunk`) spare the partition's own reads.
    """
    if counters is None:
        with engine.connect() as conn:
            cycle = cycle_count(conn, agent_id, user_id) + 1
            since = _runs_since(conn, agent_id, user_id)
    else:
        cycle, since = counters.cycle_count + 1, counters.runs_since
    every = config.promotion_every_n_runs
    if force:
        return Plan(agent_id, user_id, cycle, since, True)
    if every == 0:
        return Plan(agent_id, user_id, cycle, since, False, "manual only: promotion_every_n_runs = 0")
    if since < every:
        return Plan(agent_id, user_id, cycle, since, False, f"cadence: {since} runs since last cycle < {every}")
    return Plan(agent_id, user_id, cycle, since, True)


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
    prefetched: list[ClassStats] | None = None,
    own: Collection[str] = (),
) -> list[Assessment]:
    """Read the partition's maintained class statistics and evaluate every gate; apply the rejection backoff.

    The statistics equal the full aggregation (docs/guide/aggregate.md); ``write_stats=False`` (a dry run) writes
    nothing (it reads the full aggregation when runs are pending). ``prefetched`` statistics (the chunk's read)
    are used as long as every class's ``since`` still matches its skills; a demotion or deprecation since the
    read (the staleness sweep, a concurrent drift run) makes the partition fold and read its own instead.
    ``own`` are the classes whose live skill this flow run stored (a retry: :func:`landing.landed_by_run`): they
    are gated as the attempt that stored them gated them, before its own skill covered (and stamped) the class.
    """
    from skillflow.promotion.staleness import registered_tools
    from skillflow.storage.class_stats import partition_stats

    with engine.connect() as conn:
        skills = conn.execute(
            select(skillbox.c.canonical_hash, skillbox.c.live_key, skillbox.c.status, skillbox.c.demoted_at).where(
                tenant_filter(skillbox, agent_id, user_id)
            )
        ).all()
    live = {h for h, key, _, _ in skills if key is not None}
    since: dict[str, datetime] = {}
    for h, _, status, at in skills:
        if status in RESET_STATUSES and at is not None and (h not in since or at > since[h]):
            since[h] = at
    if prefetched is not None and all(s.since == since.get(s.canonical_hash) for s in prefetched):
        stats = [s for s in prefetched if canonical_hash is None or s.canonical_hash == canonical_hash]
    else:
        stats = partition_stats(engine, agent_id, user_id, canonical_hash, write=write_stats)
    with engine.connect() as conn:
        declared = declared_state_changes(conn, agent_id)
        handoffs = declared_handoffs(conn, agent_id)
        # The tenant's tools for the read-only gate: registered, and called by its classes (one class's statistics
        # alone, as "Distill now" reads, do not show the others': their tool sequences are read instead).
        tools = set(registered_tools(conn, agent_id)) | {t for s in stats for t in sequence_tools(s.tool_sequence)}
        if canonical_hash is not None:
            tools |= called_tools(conn, agent_id, user_id)
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
        mine = s.canonical_hash in own
        gate = evaluate_gates(
            replace(s, stamped=0) if mine else s, config, now, live_skill=s.canonical_hash in live and not mine,
            declared=declared, handoffs=handoffs, tools=tools,
        )  # fmt: skip
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

    judge = get_judge(settings or get_settings())
    return validate_skill(skill_md, evidence, judge, config.skill_max_content_chars, learned=True)


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
