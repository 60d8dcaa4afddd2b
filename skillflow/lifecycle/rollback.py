"""Roll a class back to an earlier version: that version ACTIVE again, the current one retired, one transaction.

Only a version that was once ACTIVE (it has ``activated_at``) can come back; it is re-checked against the
agent's current toolbox (staleness), its text against today's literal, injection and canonical-form checks
(a version stored before a check existed may carry what it now refuses; docs/SECURITY.md) and, for
developer authority, the same rules as an activation. The live version of the class (if any) leaves
first — ACTIVE is demoted, SHADOW/CANDIDATE rejected — with the reviewer's reason (cleaned and redacted,
``redact.clean_reason``), its stamps released; then the earlier version is reinstated and stamps the class. The
unique ``live_key`` keeps a concurrent activation from leaving two live versions, and ``live_name_key`` another
class's live skill from sharing the earlier version's name: such a rollback is refused with the holder named.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine, update
from sqlalchemy.exc import IntegrityError

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.config import PromotionConfig, load_promotion_config
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.lifecycle.decisions import ActivationRefused, tool_problems, went_through_shadow
from skillflow.lifecycle.revisions import source_evidence
from skillflow.promotion.redact import clean_reason, structural_names
from skillflow.promotion.refit import refresh_rule
from skillflow.promotion.validation import class_tools, text_problems
from skillflow.storage.schema import skillbox
from skillflow.storage.skills import (
    InvalidTransition,
    SkillRecord,
    get_skill,
    list_skills,
    live_keys,
    live_skill_for_class,
    name_holder,
    record_event,
    stamp_class,
    start_activation_stats,
    transition,
)

log = logging.getLogger("skillflow.lifecycle.rollback")


def rollback_problems(conn: Connection, target: SkillRecord, config: PromotionConfig) -> list[str]:
    """Every reason the earlier version may not come back (empty: allowed)."""
    problems: list[str] = []
    if target.activated_at is None:
        problems.append(f"v{target.version} was never active ({target.status}); only a once-active version comes back")
    problems += tool_problems(conn, target, config)
    if target.injection_role == "developer" and not (config.require_shadow and went_through_shadow(conn, target.id)):
        problems.append("developer authority requires require_shadow=True and a shadow review")
    evidence = source_evidence(conn, target)
    names = structural_names(evidence)
    smuggled = text_problems(
        target.content, class_tools(evidence) | set(target.tools or []), names, target.canonical_hash
    )
    problems += [f"v{target.version}'s text fails today's checks: {p}" for p in smuggled]
    holder = name_holder(conn, target.agent_id, target.user_id, target.name)
    if holder is not None and holder.canonical_hash != target.canonical_hash:  # the class's own live version leaves
        problems.append(
            f"name {target.name} is now used by live skill {holder.id} (v{holder.version}, {holder.status}) of "
            "another class; retire or rename that skill first"
        )
    return problems


def rollback_skill(
    engine: Engine,
    skill_id: str,
    to_version: int,
    *,
    actor: str,
    reason: str,
    config: PromotionConfig | None = None,
    flow_run_id: str | None = None,
    embedder: Embedder | None = None,
) -> SkillRecord:
    """Make version ``to_version`` of ``skill_id``'s class ACTIVE again; raises :class:`ActivationRefused`.

    Rolling back to the version that is already ACTIVE changes nothing. After the commit the tenant's
    applicability rule is refit for the new live skills (never raises; a failure leaves the stale rule).
    """
    if not reason or not reason.strip():
        raise ValueError("a reason is required")
    config = config or load_promotion_config()
    reason = clean_reason(reason) or "rolled back"
    try:
        restored, changed = _rollback(engine, skill_id, to_version, actor, reason, config, flow_run_id)
    except IntegrityError as exc:  # a concurrent store or activation took the class or the name meanwhile
        raise ActivationRefused(
            [f"v{to_version} could not go live: its class or name was made live concurrently; re-read and retry"]
        ) from exc
    if changed:
        log.info("class %s rolled back to v%d (%s) by %s", restored.canonical_hash[:12], to_version, restored.id, actor)
    # Also when it already was the active version: asked again, the refit repairs a crash after the commit.
    refresh_rule(engine, restored.agent_id, restored.user_id, embedder=embedder, config=config)
    return restored


class _TargetChanged(Exception):
    """The rollback's target was written by another decision since it was read (the transaction is undone)."""

    def __init__(self, target_id: str) -> None:
        super().__init__(target_id)
        self.target_id = target_id


def _rollback(
    engine: Engine,
    skill_id: str,
    to_version: int,
    actor: str,
    reason: str,
    config: PromotionConfig,
    flow_run_id: str | None,
) -> tuple[SkillRecord, bool]:
    """The rollback transaction: the reinstated version, and whether anything changed. The target is written as a
    compare-and-set on the status and ``updated_at`` read: a rollback that lost a race to another (or to any other
    decision on the target) rolls back whole and changes nothing when the target is ACTIVE now, as a rollback to
    the ACTIVE version does, and is refused otherwise."""
    try:
        with engine.begin() as conn:
            skill = get_skill(conn, skill_id)
            versions = list_skills(conn, skill.agent_id, skill.user_id, canonical_hash=skill.canonical_hash)
            found = [v for v in versions if v.version == to_version]
            if not found:
                raise InvalidTransition(f"the class of {skill.id} has no version {to_version}")
            target = found[0]
            if target.status == SkillStatus.ACTIVE.value:
                return target, False
            problems = rollback_problems(conn, target, config)
            if problems:
                raise ActivationRefused(problems)
            current = live_skill_for_class(conn, skill.agent_id, skill.user_id, skill.canonical_hash)
            leave: SkillStatus | None = None
            if current is not None and current.id != target.id:
                leave = SkillStatus.DEMOTED if current.status == SkillStatus.ACTIVE.value else SkillStatus.REJECTED
                transition(
                    conn, current.id, leave, actor=actor, reason=f"rolled back to v{to_version}: {reason}",
                    flow_run_id=flow_run_id,
                )  # fmt: skip
            now = utcnow()
            written = conn.execute(
                update(skillbox)
                .where(
                    skillbox.c.id == target.id,
                    skillbox.c.status == target.status,
                    skillbox.c.updated_at == target.updated_at,
                )
                .values(
                    status=SkillStatus.ACTIVE.value,
                    **live_keys(target.agent_id, target.user_id, target.canonical_hash, target.name, True),
                    activated_at=now,
                    updated_at=now,
                    demoted_at=None,
                    demotion_reason=None,
                )
            )
            if written.rowcount != 1:  # another decision wrote the target since it was read: undo this one whole
                raise _TargetChanged(target.id)
            start_activation_stats(conn, target.id)  # its earlier activation's figures are not this one's
            restored = get_skill(conn, target.id)
            stamped = stamp_class(conn, restored)
            # The replaced version and the status it left in: the rollback's event, sent again by a repeat, reads
            # them from this row (docs/guide/ops.md, "Events and automations").
            record_event(
                conn, restored, "rolled_back", actor=actor, from_status=target.status,
                to_status=SkillStatus.ACTIVE.value, reason=reason, flow_run_id=flow_run_id,
                details={"review": True, "decision": "rollback", "replaced": current.id if current else None,
                         "replaced_status": leave.value if leave else None, "stamped": stamped,
                         "role": restored.injection_role},
            )  # fmt: skip
        return restored, True
    except _TargetChanged as lost:
        with engine.connect() as conn:
            reread = get_skill(conn, lost.target_id)
        if reread.status == SkillStatus.ACTIVE.value:
            return reread, False
        raise InvalidTransition(f"{reread.id} changed while this rollback was made (now {reread.status})") from None
