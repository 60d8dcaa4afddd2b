"""Active-skill monitoring: figures from ``skill_activations`` and the demotion rule (docs/design.md, Shadow and drift).

``skill_activations`` is the normalized index of ``workflow_memory.skills_activated``, written in each
run's own transaction and holding ACTIVE ids only, so SHADOW ids can never count and concurrent writers
never lose an update. The rolling window — the only input of the demotion rule besides the grace
count — is recomputed exactly each time with ``ORDER BY created_at DESC LIMIT w`` on the
``(skill_id, created_at)`` index. Cumulative counts (activations, successes, failures, deviations) are
advanced from a per-skill watermark kept in ``stats["active"]`` (the newest ``(created_at, run_id)``
counted), reading only activations after it, so a check costs O(new activations + w), never O(history).
A run stored later with a ``created_at`` older than the watermark (a backdated import, a spooled run replayed,
an activation whose capture started before a check and committed after it) still enters the window at once and
the cumulative counts at the next daily rebuild (:func:`_recount_due`); ``recount=True`` rebuilds them now.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import Connection, Engine, case, func, select

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.errors import is_transient
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.promotion.refit import refresh_rule
from skillflow.storage.reports import report_id, write_report
from skillflow.storage.schema import skill_activations, skill_events, skillbox
from skillflow.storage.skills import SkillRecord, get_skill, transition, update_stats

log = logging.getLogger("skillflow.lifecycle.drift")

KNOWN = ("success", "failure")
ACTOR = "flow:drift-demotion"


@dataclass(frozen=True)
class ActiveFigures:
    """What ``skill.stats["active"]`` shows."""

    activations: int
    successes: int
    failures: int
    unknown: int
    deviations: int
    window: int
    window_successes: int
    rolling_success_rate: float | None
    since: str | None
    watermark: str | None = None
    watermark_run: str | None = None
    recounted_at: str | None = None  # when the cumulative counts were last rebuilt from every row
    # Known outcomes among the activations as they are now, counted up to the grace period (None: judge the grace
    # on successes + failures). The cumulative counts advance from the watermark and never see an outcome that
    # changed after it was counted (a conversation's late outcome), so the grace is read from the rows.
    known: int | None = None

    def as_stats(
        self, baseline: float | None, flagged: bool, checked_at: datetime, unknown_flag: bool = False
    ) -> dict[str, Any]:
        out = asdict(self)
        out.pop("known")
        out["baseline_success_rate"] = baseline
        out["deviation_rate"] = round(self.deviations / self.activations, 6) if self.activations else 0.0
        out["deviation_flag"] = flagged
        out["unknown_flag"] = unknown_flag
        out["checked_at"] = checked_at.isoformat()
        return out


@dataclass(frozen=True)
class DriftDecision:
    demote: bool
    reason: str | None
    deviation_flag: bool
    grace: bool
    unknown_flag: bool = False


def _after(cond: list[Any], previous: dict[str, Any]) -> list[Any]:
    sa = skill_activations.c
    mark = datetime.fromisoformat(previous["watermark"])
    return [*cond, (sa.created_at > mark) | ((sa.created_at == mark) & (sa.run_id > previous["watermark_run"]))]


def active_figures(
    conn: Connection, skill: SkillRecord, window: int, recount: bool = False, grace: int = 0
) -> ActiveFigures:
    """Counts since activation (incremental from the stored watermark) plus the last ``window`` known outcomes;
    ``known`` counts the known outcomes as the rows hold them now, up to ``max(window, grace)``."""
    sa = skill_activations.c
    cond: list[Any] = [sa.skill_id == skill.id]
    since = skill.activated_at.isoformat() if skill.activated_at else None
    if skill.activated_at is not None:
        cond.append(sa.created_at >= skill.activated_at)
    previous = dict((skill.stats or {}).get("active") or {})
    checked = utcnow()
    incremental = (
        not recount
        and previous.get("since") == since
        and previous.get("watermark") is not None
        and not _recount_due(previous.get("recounted_at"), checked)
    )
    # Read the new watermark first and count up to it, so a row committed meanwhile is counted next time.
    newest = conn.execute(
        select(sa.created_at, sa.run_id).where(*cond).order_by(sa.created_at.desc(), sa.run_id.desc()).limit(1)
    ).first()
    upto: list[Any] = []
    if newest is not None:
        upto = [(sa.created_at < newest[0]) | ((sa.created_at == newest[0]) & (sa.run_id <= newest[1]))]
    counts = conn.execute(
        select(
            func.count().label("n"),
            func.coalesce(func.sum(case((sa.outcome == "success", 1), else_=0)), 0).label("ok"),
            func.coalesce(func.sum(case((sa.outcome == "failure", 1), else_=0)), 0).label("ko"),
            func.coalesce(func.sum(case((sa.canonical_hash == skill.canonical_hash, 0), else_=1)), 0).label("dev"),
        ).where(*(_after(cond, previous) if incremental else cond), *upto)
    ).one()
    base = {k: int(previous.get(k, 0)) for k in ("activations", "successes", "failures", "deviations")}
    if not incremental:
        base = dict.fromkeys(base, 0)
    recent = (
        conn.execute(
            select(sa.outcome)
            .where(*cond, sa.outcome.in_(KNOWN))
            .order_by(sa.created_at.desc(), sa.run_id.desc())
            .limit(max(window, grace))
        )
        .scalars()
        .all()
    )
    known = len(recent)
    recent = recent[:window]
    ok_recent = sum(1 for o in recent if o == "success")
    n, ok, ko = (
        base["activations"] + int(counts.n),
        base["successes"] + int(counts.ok),
        base["failures"] + int(counts.ko),
    )
    keep_mark = incremental and newest is not None and int(counts.n) == 0
    return ActiveFigures(
        activations=n,
        successes=ok,
        failures=ko,
        unknown=n - ok - ko,
        deviations=base["deviations"] + int(counts.dev),
        window=len(recent),
        window_successes=ok_recent,
        rolling_success_rate=(ok_recent / len(recent)) if recent else None,
        since=since,
        watermark=previous["watermark"] if keep_mark else (newest[0].isoformat() if newest else None),
        watermark_run=previous["watermark_run"] if keep_mark else (str(newest[1]) if newest else None),
        recounted_at=previous.get("recounted_at") if incremental else checked.isoformat(),
        known=known,
    )


RECOUNT_EVERY = timedelta(days=1)


def _recount_due(recounted_at: str | None, now: datetime) -> bool:
    """The cumulative counts are rebuilt from the rows once a day: an activation whose row committed after a
    check had moved the watermark past its ``created_at`` (set when its capture started, before the evaluator ran;
    a spooled run replayed later) is otherwise never counted (a concurrency audit, docs/RELIABILITY.md)."""
    if recounted_at is None:
        return True
    try:
        return now - datetime.fromisoformat(recounted_at) >= RECOUNT_EVERY
    except (TypeError, ValueError):  # a value written by hand: rebuild
        return True


def baseline_rate(skill: SkillRecord) -> float | None:
    """The success rate frozen at promotion time (``baseline.success_rate``)."""
    value = (skill.baseline or {}).get("success_rate")
    return float(value) if isinstance(value, int | float) else None


def decide(figures: ActiveFigures, baseline: float | None, config: PromotionConfig) -> DriftDecision:
    """Demote when ``known outcomes >= grace`` and ``rolling < baseline - delta`` (strict).

    Two review flags, never a demotion: more than half the activations took another path (``deviation_flag``),
    and, once there are as many activations as the grace asks, more than ``max_unknown_share`` of them ended
    ``unknown`` (``unknown_flag``: the business evaluator failed on them, e.g. a tool's answer changed shape, so
    drift, which judges known outcomes, cannot judge the skill: the promotion gate refuses such a class)."""
    flagged = figures.activations > 0 and figures.deviations / figures.activations > 0.5
    unknown_flag = (
        figures.activations > 0
        and figures.activations >= config.min_activations_before_drift_check
        and figures.unknown / figures.activations > config.max_unknown_share
    )
    known = figures.known if figures.known is not None else figures.successes + figures.failures
    in_grace = known < config.min_activations_before_drift_check
    if in_grace or baseline is None or figures.rolling_success_rate is None:
        return DriftDecision(False, None, flagged, in_grace, unknown_flag)
    rolling = figures.rolling_success_rate
    # Compare in integers when possible so 7/10 vs 0.9 - 0.2 is exactly "not below" (no float drift).
    threshold = baseline - config.demotion_success_delta
    below = figures.window_successes * 1_000_000 < round(threshold * 1_000_000) * figures.window
    if below:
        reason = f"drift: rolling {rolling:.2f} vs baseline {baseline:.2f}"
        return DriftDecision(True, reason, flagged, False, unknown_flag)
    return DriftDecision(False, None, flagged, False, unknown_flag)


class SkillDrift(BaseModel):
    """One ACTIVE skill's check (ids and figures only)."""

    skill_id: str
    agent_id: str
    user_id: str
    name: str
    version: int
    activations: int
    rolling_success_rate: float | None
    baseline_success_rate: float | None
    deviation_rate: float
    decision: Literal["demote", "keep", "grace", "no_baseline"]
    reason: str | None = None
    deviation_flag: bool = False
    unknown_flag: bool = False


class DriftReport(BaseModel):
    dry_run: bool = False
    checked: int = 0
    demoted: list[SkillDrift] = Field(default_factory=list)
    flagged: list[str] = Field(default_factory=list)
    unknown_flagged: list[str] = Field(default_factory=list)  # skills most of whose activations ended unknown
    skills: list[SkillDrift] = Field(default_factory=list)
    failed: list[tuple[str, str]] = Field(default_factory=list)  # (skill id, "check failed: <ErrorClass>")
    report_id: str | None = None


def active_skill_ids(conn: Connection, agent_id: str | None = None, user_id: str | None = None) -> list[str]:
    q = select(skillbox.c.id).where(skillbox.c.status == SkillStatus.ACTIVE.value)
    if agent_id is not None:
        q = q.where(skillbox.c.agent_id == agent_id)
    if user_id is not None:
        q = q.where(skillbox.c.user_id == user_id)
    return list(conn.execute(q.order_by(skillbox.c.id)).scalars())


def active_partitions(
    conn: Connection, agent_id: str | None = None, user_id: str | None = None
) -> list[tuple[str, str]]:
    """The (agent, user) partitions that have an ACTIVE skill, in order (the units a drift fan-out spreads)."""
    q = select(skillbox.c.agent_id, skillbox.c.user_id).where(skillbox.c.status == SkillStatus.ACTIVE.value)
    if agent_id is not None:
        q = q.where(skillbox.c.agent_id == agent_id)
    if user_id is not None:
        q = q.where(skillbox.c.user_id == user_id)
    q = q.distinct().order_by(skillbox.c.agent_id, skillbox.c.user_id)
    return [(str(a), str(u)) for a, u in conn.execute(q)]


def merge_reports(parts: list[DriftReport], dry_run: bool) -> DriftReport:
    """One report summing the per-partition reports of a fan-out (no id of its own: each part is stored)."""
    total = DriftReport(dry_run=dry_run)
    for part in parts:
        total.checked += part.checked
        total.demoted.extend(part.demoted)
        total.flagged.extend(part.flagged)
        total.unknown_flagged.extend(part.unknown_flagged)
        total.skills.extend(part.skills)
        total.failed.extend(part.failed)
    return total


def check_skill(
    engine: Engine,
    skill_id: str,
    config: PromotionConfig,
    *,
    dry_run: bool = False,
    actor: str = ACTOR,
    flow_run_id: str | None = None,
) -> SkillDrift | None:
    """Recompute one skill's figures, store them, demote on drift — one transaction (None: not ACTIVE now)."""
    with engine.begin() as conn:
        row = conn.execute(select(skillbox.c.status).where(skillbox.c.id == skill_id).with_for_update()).first()
        if row is None or row[0] != SkillStatus.ACTIVE.value:
            return None
        skill = get_skill(conn, skill_id)
        figures = active_figures(
            conn, skill, config.drift_window_activations, grace=config.min_activations_before_drift_check
        )
        baseline = baseline_rate(skill)
        verdict = decide(figures, baseline, config)
        stats = figures.as_stats(baseline, verdict.deviation_flag, utcnow(), verdict.unknown_flag)
        result = SkillDrift(
            skill_id=skill.id,
            agent_id=skill.agent_id,
            user_id=skill.user_id,
            name=skill.name,
            version=skill.version,
            activations=figures.activations,
            rolling_success_rate=figures.rolling_success_rate,
            baseline_success_rate=baseline,
            deviation_rate=stats["deviation_rate"],
            decision="demote"
            if verdict.demote
            else "grace"
            if verdict.grace
            else "no_baseline"
            if baseline is None
            else "keep",
            reason=verdict.reason,
            deviation_flag=verdict.deviation_flag,
            unknown_flag=verdict.unknown_flag,
        )
        if dry_run:
            return result
        previous = {k: v for k, v in ((skill.stats or {}).get("active") or {}).items() if k != "checked_at"}
        if previous != {k: v for k, v in stats.items() if k != "checked_at"}:
            update_stats(conn, skill.id, {"active": stats})
        if verdict.demote:
            transition(conn, skill.id, SkillStatus.DEMOTED, actor=actor, reason=verdict.reason, flow_run_id=flow_run_id)
        return result


def run_drift(
    engine: Engine,
    config: PromotionConfig,
    *,
    agent_id: str | None = None,
    user_id: str | None = None,
    dry_run: bool = False,
    flow_run_id: str | None = None,
    embedder: Embedder | None = None,
) -> DriftReport:
    """Check every ACTIVE skill (optionally of one tenant), demote the drifted unless ``dry_run``, store the report.

    The one composition of drift demotion: the ``drift-demotion`` flow runs it once per partition. A skill
    whose check fails on a non-transient error is recorded in ``failed`` (its id and the error class, never
    the message) and the others are still checked; a transient error propagates so the task retries the
    partition, and the retry lists the demotions an earlier attempt of the same flow run committed (read
    back from ``skill_events``), so its report replaces the earlier one without losing them. Every tenant
    checked has its applicability rule refit afterwards when it no longer matches the live skills (outside
    the demotions' transactions; a failure leaves the stale rule, which injects nothing), so a run killed
    before its refit is repaired by the next one.
    """
    with engine.connect() as conn:
        ids = active_skill_ids(conn, agent_id, user_id)
        earlier = [] if dry_run or not flow_run_id else demoted_by_run(conn, flow_run_id, agent_id, user_id)
    # An earlier attempt's demotions are reported as it reported them, deviation flags included (a retried batch
    # checks the partitions it had finished again: docs/RELIABILITY.md, "Found by the suite").
    flagged = [d.skill_id for d in earlier if d.deviation_flag]
    unknown = [d.skill_id for d in earlier if d.unknown_flag]
    report = DriftReport(
        dry_run=dry_run, checked=len(earlier), demoted=list(earlier), skills=list(earlier), flagged=flagged,
        unknown_flagged=unknown,
    )  # fmt: skip
    for skill_id in ids:
        try:
            result = check_skill(engine, skill_id, config, dry_run=dry_run, flow_run_id=flow_run_id)
        except Exception as exc:
            if is_transient(exc):
                raise
            report.failed.append((skill_id, f"check failed: {type(exc).__name__}"))
            log.error("drift: skill %s check failed: %s", skill_id, type(exc).__name__)
            continue
        if result is None:
            continue
        report.checked += 1
        report.skills.append(result)
        if result.decision == "demote":
            report.demoted.append(result)
        if result.deviation_flag:
            report.flagged.append(result.skill_id)
        if result.unknown_flag:
            report.unknown_flagged.append(result.skill_id)
    report.report_id = store_report(engine, report, agent_id, user_id, flow_run_id)
    if not dry_run:  # every tenant checked, not only those that lost a skill in this run: an earlier run killed
        # before its refit left a stale rule that injects nothing (refresh_rule is a no-op on a current one)
        tenants = {(d.agent_id, d.user_id) for d in (*report.demoted, *report.skills)}
        if agent_id is not None and user_id is not None:
            tenants.add((agent_id, user_id))
        for tenant in sorted(tenants):
            refresh_rule(engine, *tenant, embedder=embedder, config=config)
    log.info(
        "drift: checked=%d demoted=%d flagged=%d failed=%d dry_run=%s",
        report.checked,
        len(report.demoted),
        len(report.flagged),
        len(report.failed),
        dry_run,
    )
    return report


def demoted_by_run(conn: Connection, flow_run_id: str, agent_id: str | None, user_id: str | None) -> list[SkillDrift]:
    """The skills this flow run's drift check already demoted in the scope (an earlier attempt's), as checked, each
    once.

    Their figures are the ``stats["active"]`` written in the demotion's own transaction.
    """
    ev, sk = skill_events.c, skillbox.c
    by_run = select(ev.skill_id).where(
        ev.flow_run_id == flow_run_id, ev.to_status == SkillStatus.DEMOTED.value, ev.actor == ACTOR
    )  # a skill this run demoted, made ACTIVE again and demoted again has two rows: listed once
    q = select(skillbox).where(sk.status == SkillStatus.DEMOTED.value, sk.id.in_(by_run)).order_by(sk.id)
    if agent_id is not None:
        q = q.where(sk.agent_id == agent_id)
    if user_id is not None:
        q = q.where(sk.user_id == user_id)
    out = []
    for row in conn.execute(q).mappings():
        skill = SkillRecord.from_row(row)
        active = (skill.stats or {}).get("active") or {}
        out.append(
            SkillDrift(
                skill_id=skill.id,
                agent_id=skill.agent_id,
                user_id=skill.user_id,
                name=skill.name,
                version=skill.version,
                activations=int(active.get("activations", 0)),
                rolling_success_rate=active.get("rolling_success_rate"),
                baseline_success_rate=active.get("baseline_success_rate"),
                deviation_rate=float(active.get("deviation_rate", 0.0)),
                decision="demote",
                reason=skill.demotion_reason,
                deviation_flag=bool(active.get("deviation_flag", False)),
                unknown_flag=bool(active.get("unknown_flag", False)),
            )
        )
    return out


def store_report(
    engine: Engine, report: DriftReport, agent_id: str | None, user_id: str | None, flow_run_id: str | None
) -> str:
    """Store the report (kind ``drift``) through the one report writer; a retry replaces, never duplicates."""
    with engine.begin() as conn:
        return write_report(
            conn,
            report_id=report_id("drift", flow_run_id, agent_id, user_id),
            kind="drift",
            body=report.model_dump(mode="json"),
            created_at=utcnow(),
            agent_id=agent_id,
            user_id=user_id,
            flow_run_id=flow_run_id,
            dry_run=report.dry_run,
        )


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render_markdown(report: DriftReport) -> str:
    """Figures and ids only (no queries, no skill bodies)."""
    head = "# Drift report" + (" (dry run)" if report.dry_run else "")
    lines = [head, "", f"- ACTIVE skills checked: {report.checked}", f"- demoted: {len(report.demoted)}"]
    lines += [f"  - `{d.skill_id}` {d.name} v{d.version}: {d.reason}" for d in report.demoted]
    if report.failed:
        lines.append(f"- failed checks (skill left as it was): {len(report.failed)}")
        lines += [f"  - `{sid}`: {reason}" for sid, reason in report.failed]
    lines.append(f"- deviation review flags (> 50 % of activations took another path): {len(report.flagged)}")
    lines += [f"  - `{sid}`" for sid in report.flagged]
    lines.append(f"- unknown-outcome review flags (the business outcome of most activations is unknown): "
                 f"{len(report.unknown_flagged)}")  # fmt: skip
    lines += [f"  - `{sid}`" for sid in report.unknown_flagged]
    if report.skills:
        lines += ["", "| skill | tenant | activations | rolling | baseline | deviation | decision |"]
        lines.append("|---|---|---:|---:|---:|---:|---|")
        for s in report.skills:
            lines.append(
                f"| {s.name} v{s.version} `{s.skill_id[:12]}` | {s.agent_id}/{s.user_id} | {s.activations} | "
                f"{_rate(s.rolling_success_rate)} | {_rate(s.baseline_success_rate)} | {s.deviation_rate:.2f} | "
                f"{s.decision} |"
            )
    return "\n".join(lines)
