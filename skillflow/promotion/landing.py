"""Store and stamp a validated skill in one transaction, or record a rejection with its backoff.

The unique ``skillbox.live_key`` makes a second live skill for a class impossible: a concurrent or earlier
store shows up as ``already covered by a live skill``, never as a duplicate. The unique ``live_name_key`` does
the same for names within a tenant: a name taken by a concurrent store is retried once with the class-hash
suffix ``unique_name`` gives, then rejected with ``NAME_TAKEN``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Engine, and_, insert, select, update
from sqlalchemy.exc import IntegrityError

from skillflow.kernel import canonical
from skillflow.kernel.config import PromotionConfig, get_settings
from skillflow.kernel.models import ClassStats, InjectionRole, SkillStatus, utcnow
from skillflow.promotion.distill import DistillOutcome
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.gates import COVERED
from skillflow.promotion.validation import ValidationResult
from skillflow.storage.aggregate import class_samples
from skillflow.storage.schema import class_state
from skillflow.storage.skills import insert_skill, live_key, live_skill_for_class, next_version, tenant_filter

if TYPE_CHECKING:
    from skillflow.injection.embeddings import Embedder
    from skillflow.promotion.skillmd import ParsedSkill

log = logging.getLogger("skillflow.promotion.landing")

ACTOR = "flow:promotion-cycle"
Decision = Literal["promoted", "would promote", "rejected", "skipped", "ineligible", "backoff", "below cut"]


@dataclass(frozen=True)
class ClassResult:
    """The end of one class's way through distillation, validation and store."""

    canonical_hash: str
    decision: Decision
    reasons: list[str]
    skill_id: str | None = None
    status: str | None = None


def trigger_queries(conn: Connection, evidence: Evidence, config: PromotionConfig) -> list[str]:
    """Up to ``max_trigger_queries`` distinct recent successful queries of the class, literals redacted.

    Trigger queries are stored, embedded and shown to reviewers, so they pass the same rules as the skill
    (docs/SECURITY.md): redacted, and a query that still holds a literal (read folded, as validation reads a
    skill), a hidden character or reads as an instruction to the model is left out rather than stored.
    """
    from skillflow.kernel.textnorm import fold, hidden_kinds
    from skillflow.promotion.detectors import literal_findings
    from skillflow.promotion.hijack import hijack_findings
    from skillflow.promotion.redact import redact_query, source_literals, structural_names

    s = evidence.stats
    recent, _ = class_samples(conn, s.agent_id, s.user_id, s.canonical_hash, s.since, config.max_trigger_queries * 4, 0)
    pool = Evidence(s, evidence.signature, [*evidence.successes, *recent], evidence.failures, evidence.toolbox)
    literals = source_literals(pool)
    names = structural_names(pool)
    out: dict[str, str] = {}
    for run in pool.successes:
        redacted = redact_query(run.query, literals)
        if literal_findings(fold(redacted), names) or hidden_kinds(redacted) or hijack_findings(redacted):
            continue
        key = canonical.normalize_query(redacted)
        if key and key not in out:
            out[key] = redacted
        if len(out) >= config.max_trigger_queries:
            break
    return list(out.values())


NAME_TAKEN = "name already used by another live skill of the tenant"


def unique_name(conn: Connection, agent_id: str, user_id: str, name: str, canonical_hash: str) -> str | None:
    """``name``, or when another live skill of the tenant uses it ``name-<class hash prefix>`` (deterministic:
    the same class always gets the same name); ``None`` when even the longest prefix is taken."""
    from skillflow.storage.schema import skillbox

    taken = set(
        conn.execute(
            select(skillbox.c.name).where(
                tenant_filter(skillbox, agent_id, user_id),
                skillbox.c.live_name_key.is_not(None),
                skillbox.c.canonical_hash != canonical_hash,
            )
        ).scalars()
    )
    if name not in taken:
        return name
    for n in (6, 12, 24):
        suffix = canonical_hash[:n].lower()
        candidate = f"{name[: 64 - len(suffix) - 1].rstrip('-')}-{suffix}"
        if candidate not in taken:
            return candidate
    return None


def renamed(content: str, old: str, new: str) -> str:
    """``content`` with its frontmatter ``name:`` line set to ``new`` (the body is left alone)."""
    head, sep, body = content.partition("\n---")
    pattern = re.compile(rf"^name:[ \t]*([\"']?){re.escape(old)}\1[ \t]*$", re.MULTILINE)
    return pattern.sub(f"name: {new}", head, count=1) + sep + body


def baseline_of(stats: ClassStats) -> dict[str, Any]:
    return {
        "executions": stats.executions,
        "success_rate": stats.success_rate,
        "window_start": stats.first_seen.isoformat(),
        "window_end": stats.last_seen.isoformat(),
    }


def store_skill(
    engine: Engine,
    evidence: Evidence,
    outcome: DistillOutcome,
    validation: ValidationResult,
    config: PromotionConfig,
    *,
    actor: str = ACTOR,
    flow_run_id: str | None = None,
    embedder_name: str | None = None,
) -> ClassResult:
    """Insert the skill (SHADOW or ACTIVE + stamping), its vectors and the cleared backoff in ONE transaction.

    A live skill for the class (a concurrent or earlier cycle) makes this a skip, also when the unique
    ``live_key`` fires at insert time. When ``live_name_key`` fires instead (another class took the name
    meanwhile), the store is retried once, where ``unique_name`` now sees the name taken; a second collision
    rejects the class with ``NAME_TAKEN``.
    """
    from skillflow.injection.embeddings import get_embedder

    s = evidence.stats
    parsed, content = validation.parsed, validation.content  # the canonical text the checks read, not the draft
    if not validation.ok or parsed is None or content is None:
        raise ValueError("store_skill takes only a distilled SKILL.md that passed validation")
    embedder = get_embedder(embedder_name or get_settings().embedder)
    for attempt in (1, 2):
        try:
            return _land(engine, evidence, outcome, validation, parsed, content, config, actor, flow_run_id, embedder)
        except IntegrityError as exc:
            # live_key (or the version) fired, or both keys did (the name is the class's own): the class is covered.
            if "live_name_key" not in str(exc.orig).lower() or _class_is_live(engine, s):
                return ClassResult(s.canonical_hash, "skipped", [COVERED])
            # The name (or its suffixed form) was taken by a store of another class that committed meanwhile.
            log.info("skill name of class %s taken concurrently (attempt %d)", s.canonical_hash[:12], attempt)
    return ClassResult(s.canonical_hash, "rejected", [f"{NAME_TAKEN}: {parsed.name}"])


def _class_is_live(engine: Engine, stats: ClassStats) -> bool:
    """A live skill holds the class's ``live_key`` (looked up by the key itself, after an insert failed)."""
    from skillflow.storage.schema import skillbox

    key = live_key(stats.agent_id, stats.user_id, stats.canonical_hash)
    with engine.connect() as conn:
        return conn.execute(select(skillbox.c.id).where(skillbox.c.live_key == key)).first() is not None


def landed_by_run(engine: Engine, agent_id: str, user_id: str, flow_run_id: str) -> dict[str, ClassResult]:
    """The partition's live skills this flow run stored, per class, as their store returned them: an earlier
    attempt of the flow run, killed after a store committed, that a retry (the same flow-run id) reports as
    promoted again instead of as covered by a live skill (docs/RELIABILITY.md, "Found by the suite"). One
    statement: the partition's live skills joined to their ``created`` lifecycle row of this flow run."""
    from skillflow.storage.schema import skill_events, skillbox

    sb, ev = skillbox.c, skill_events.c
    q = (
        select(sb.canonical_hash, sb.id, ev.to_status)
        .join(skill_events, ev.skill_id == sb.id)
        .where(
            tenant_filter(skillbox, agent_id, user_id),
            sb.live_key.is_not(None),
            ev.event == "created",
            ev.flow_run_id == flow_run_id,
        )
    )
    with engine.connect() as conn:
        return {h: ClassResult(h, "promoted", [], sid, status) for h, sid, status in conn.execute(q)}


def _land(
    engine: Engine,
    evidence: Evidence,
    outcome: DistillOutcome,
    validation: ValidationResult,
    parsed: ParsedSkill,
    content: str,
    config: PromotionConfig,
    actor: str,
    flow_run_id: str | None,
    embedder: Embedder,
) -> ClassResult:
    """One landing transaction; raises ``IntegrityError`` when a unique live key fires at insert time."""
    from skillflow.injection.retrieval import write_skill_vectors
    from skillflow.promotion.skillmd import parse_skill_md

    s = evidence.stats
    status = SkillStatus.SHADOW if config.require_shadow else SkillStatus.ACTIVE
    with engine.begin() as conn:
        if live_skill_for_class(conn, s.agent_id, s.user_id, s.canonical_hash) is not None:
            return ClassResult(s.canonical_hash, "skipped", [COVERED])
        # Live names are unique per tenant: a taken name gets the class hash prefix as a suffix.
        name = unique_name(conn, s.agent_id, s.user_id, parsed.name, s.canonical_hash)
        if name is None:
            return ClassResult(s.canonical_hash, "rejected", [f"{NAME_TAKEN}: {parsed.name}"])
        if name != parsed.name:
            content = renamed(content, parsed.name, name)
            if parse_skill_md(content).name != name:  # a frontmatter the rename cannot rewrite
                return ClassResult(s.canonical_hash, "rejected", [f"{NAME_TAKEN}: {parsed.name}"])
            log.info("skill name of class %s taken; stored as %s", s.canonical_hash[:12], name)
        skill = insert_skill(
            conn,
            agent_id=s.agent_id,
            user_id=s.user_id,
            canonical_hash=s.canonical_hash,
            name=name,
            description=parsed.description,
            content=content,
            status=status,
            injection_role=InjectionRole(config.skill_injection_role),
            version=next_version(conn, s.agent_id, s.user_id, s.canonical_hash),
            preconditions=list(parsed.preconditions),
            tools=list(parsed.allowed_tools),
            trigger_queries=trigger_queries(conn, evidence, config),
            source_workflow_ids=evidence.source_ids,
            baseline=baseline_of(s),
            validation=dict(validation.checks),
            prompt_version=outcome.prompt_version,
            distiller=outcome.distiller,
            embedding_model=embedder.model_id,
            actor=actor,
            flow_run_id=flow_run_id,
        )
        write_skill_vectors(conn, skill, embedder, config.max_trigger_queries)
        conn.execute(
            class_state.delete().where(
                tenant_filter(class_state, s.agent_id, s.user_id), class_state.c.canonical_hash == s.canonical_hash
            )
        )
    log.info("stored skill %s (class %s, %s, v%d)", skill.id, s.canonical_hash[:12], status.value, skill.version)
    return ClassResult(s.canonical_hash, "promoted", [], skill.id, status.value)


def record_rejection(
    engine: Engine, stats: ClassStats, cycle: int, reasons: list[str], config: PromotionConfig
) -> ClassResult:
    """Record a rejection in ``class_state``: the class waits ``rejection_backoff_cycles`` cycles (idempotent)."""
    retry_after = cycle + config.rejection_backoff_cycles
    key = and_(
        tenant_filter(class_state, stats.agent_id, stats.user_id), class_state.c.canonical_hash == stats.canonical_hash
    )
    values = {
        "last_rejected_cycle": cycle,
        "retry_after_cycle": retry_after,
        "last_reasons": reasons,
        "updated_at": utcnow(),
    }
    with engine.begin() as conn:
        prior = conn.execute(select(class_state.c.last_rejected_cycle).where(key)).first()
        if prior is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(class_state).values(
                            agent_id=stats.agent_id,
                            user_id=stats.user_id,
                            canonical_hash=stats.canonical_hash,
                            rejections=1,
                            **values,
                        )
                    )
            except IntegrityError:
                conn.execute(update(class_state).where(key).values(**values))
        elif prior[0] != cycle:  # a retry within the same cycle counts once
            conn.execute(update(class_state).where(key).values(rejections=class_state.c.rejections + 1, **values))
    return ClassResult(stats.canonical_hash, "rejected", reasons)
