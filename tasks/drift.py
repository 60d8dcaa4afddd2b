"""Tasks of the drift-demotion flow: check every ACTIVE skill (the one composition) and publish the report."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from sqlalchemy import select

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.charts import markdown_image, render_png, skill_charts
from skillflow.lifecycle.drift import DriftReport, render_markdown, run_drift
from skillflow.storage.skills import SkillNotFound, get_skill
from tasks.common import batch_name, engine_for, flow_run_id, run_name, stage, tenant_label
from tasks.events import emit_demotions

MAX_CHARTS = 25  # a report with more skills charts the first ones (the table lists them all)


class DriftChecksFailed(RuntimeError):
    """Some skill checks of a partition failed; the others were checked, stored and their demotions emitted."""

    def __init__(self, detail: str) -> None:
        self.detail = detail  # skill id prefixes and error classes only
        super().__init__(detail)


@stage(run_name=run_name("check-drift", "agent_id", "user_id"))
def check_drift(
    database_url: str | None,
    config: PromotionConfig,
    agent_id: str | None,
    user_id: str | None,
    dry_run: bool,
    drift_run_id: str | None = None,
) -> DriftReport:
    """Check the partition's ACTIVE skills, demote the drifted (one transaction each), store the report, emit.

    The demotions are emitted before a failed skill check fails the task run, so they are never hidden.
    ``drift_run_id`` is the drift run the partition belongs to (:func:`drift_run`).
    """
    engine = engine_for(database_url)
    run_id = drift_run(drift_run_id)
    report = run_drift(engine, config, agent_id=agent_id, user_id=user_id, dry_run=dry_run, flow_run_id=run_id)
    emit_demotions(report.demoted, dry_run, run_id)
    log_drift(report, agent_id, user_id)
    if report.failed:
        raise DriftChecksFailed(", ".join(f"skill {sid[:12]} {reason}" for sid, reason in report.failed))
    return report


def drift_run(drift_run_id: str | None) -> str | None:
    """The id drift work is stamped with: the fan-out parent's run when given, else the current flow run.

    Reports (keyed by it and the tenant), demotion events in ``skill_events`` and the read-back of an earlier
    attempt's demotions all use it, so a chunk checked again in another child run of the same drift run (a
    re-created or duplicated child) replaces its tenants' reports instead of adding a second row each
    (docs/guide/ops.md, "Fan-out").
    """
    return drift_run_id or flow_run_id()


def log_drift(report: DriftReport, agent_id: str | None, user_id: str | None) -> None:
    """One INFO line per partition: counts and skill-id prefixes, never content."""
    get_run_logger().info(
        "drift %s: checked %d, demoted %d (%s), flagged %d, failed %d, report %s",
        tenant_label(agent_id, user_id), report.checked, len(report.demoted),
        ", ".join(d.skill_id[:12] for d in report.demoted) or "none", len(report.flagged), len(report.failed),
        report.report_id,
    )  # fmt: skip


@stage(retries=0, run_name=batch_name("check-drift"))
def check_drift_batch(
    database_url: str | None,
    config: PromotionConfig,
    batch: list[tuple[str, str]],
    dry_run: bool,
    drift_run_id: str | None = None,
) -> tuple[list[DriftReport], list[tuple[str, str]]]:
    """Several partitions' drift checks in one task run: (the clean reports, the partitions to run again alone).

    Each partition is the same composition as :func:`check_drift`. One that raises, or whose report names a
    failed skill check, is handed back and :func:`check_partitions` runs it again as its own ``check-drift`` task
    run — with the transient retries and a Failed state of its own. That rerun is the task retry's path: it
    lists the demotions this flow run already committed for the partition and replaces its report (same id),
    so nothing is demoted, reported or emitted twice. Demotion events are emitted by the caller, once per clean
    report. A task run costs the Prefect server about 50 ms of CPU whatever it holds (docs/BENCHMARKS.md,
    "Scale"), so a fleet checks partitions in batches.
    """
    engine, run_id = engine_for(database_url), drift_run(drift_run_id)
    clean: list[DriftReport] = []
    deferred: list[tuple[str, str]] = []
    for agent_id, user_id in batch:
        try:
            report = run_drift(engine, config, agent_id=agent_id, user_id=user_id, dry_run=dry_run, flow_run_id=run_id)
        except Exception:  # noqa: BLE001 - the partition runs again alone, where its failure is retried and shown
            deferred.append((agent_id, user_id))
            continue
        if report.failed:
            deferred.append((agent_id, user_id))
            continue
        log_drift(report, agent_id, user_id)
        clean.append(report)
    return clean, deferred


def charts_markdown(report: DriftReport, database_url: str | None, config: PromotionConfig) -> str:
    """One chart per checked skill (class success, rolling success vs baseline and the demotion line)."""
    engine = engine_for(database_url)
    parts = ["", "## Charts", ""]
    with engine.connect() as conn:
        for s in report.skills[:MAX_CHARTS]:
            try:
                skill = get_skill(conn, s.skill_id)
            except SkillNotFound:
                continue
            png = render_png(skill_charts(conn, skill, config))
            parts += [f"### {s.name} v{s.version} `{s.skill_id[:12]}` — {s.decision}", "", markdown_image(png, s.name)]
            parts.append("")
    if len(report.skills) > MAX_CHARTS:
        parts.append(f"({len(report.skills) - MAX_CHARTS} more skills in the table, not charted)")
    return "\n".join(parts) if report.skills else ""


@task(cache_policy=NO_CACHE, task_run_name="publish-drift-report")
def publish_drift_report(
    report: DriftReport, database_url: str | None = None, config: PromotionConfig | None = None, run: str | None = None
) -> None:
    charts = charts_markdown(report, database_url, config) if config is not None else ""
    create_markdown_artifact(
        key="drift-report", markdown=render_markdown(report) + "\n" + charts, description="Drift demotion report"
    )
    rows = [
        {"decision": s.decision, "skill": f"{s.name} v{s.version}", "skill_id": s.skill_id[:12],
         "tenant": f"{s.agent_id}/{s.user_id}", "rolling": s.rolling_success_rate, "baseline": s.baseline_success_rate,
         "activations": s.activations, "deviation": s.deviation_rate, "reason": s.reason or ""}
        for s in report.skills
    ]  # fmt: skip
    if rows:
        create_table_artifact(key="drift-skills", table=rows, description="Drift decision per ACTIVE skill")
    stored = f" {report.report_id}" if report.report_id else " (each partition stored its own)"
    get_run_logger().info("published drift report%s: %d skills, charts %s", stored, len(rows), bool(charts))


CHILD_DEPLOYMENT = "drift-demotion/drift-partitions"


@stage()
def list_active_partitions(
    database_url: str | None, agent_id: str | None, user_id: str | None
) -> list[tuple[str, str]]:
    """The (agent, user) partitions with an ACTIVE skill."""
    from skillflow.lifecycle.drift import active_partitions

    with engine_for(database_url).connect() as conn:
        return active_partitions(conn, agent_id, user_id)


def check_partitions(
    database_url: str | None,
    config: PromotionConfig,
    partitions: list[tuple[str, str]],
    dry_run: bool,
    per_task: int = 1,
    drift_run_id: str | None = None,
) -> tuple[DriftReport, list[str]]:
    """One drift check (stored report) per partition, a task run each or ``per_task`` per task run; a failed
    partition is named, never fatal.

    A partition whose skill checks partly failed still contributes its stored report (what it did check). With
    ``per_task`` > 1 (a fleet's ``partitions_per_task``) partitions run in batches (:func:`check_drift_batch`);
    a partition that fails in its batch runs again alone, so its failure is still its own Failed task run.
    ``drift_run_id`` is the fan-out parent's run (:func:`drift_run`).
    """
    from skillflow.lifecycle.drift import merge_reports
    from tasks.fanout import run_batched

    parts: list[DriftReport] = []
    failed: list[str] = []

    def done(clean: list[DriftReport]) -> None:
        for report in clean:
            emit_demotions(report.demoted, dry_run, drift_run(drift_run_id))  # the id the batch stamped them with
        parts.extend(clean)

    def batch(group: list[tuple[str, str]]) -> Any:
        return check_drift_batch(database_url, config, group, dry_run, drift_run_id, return_state=True)

    def alone(partition: tuple[str, str]) -> None:
        agent_id, user_id = partition
        state = check_drift(database_url, config, agent_id, user_id, dry_run, drift_run_id, return_state=True)
        if state.is_completed():
            parts.append(state.result())
            return
        error = state.result(raise_on_failure=False)
        if isinstance(error, DriftChecksFailed):
            stored = stored_report(database_url, drift_run(drift_run_id), agent_id, user_id)
            parts.extend([stored] if stored is not None else [])
        detail = error.detail if isinstance(error, DriftChecksFailed) else type(error).__name__
        failed.append(f"{agent_id}/{user_id} ({detail})")

    run_batched(partitions, per_task, batch, alone, done)
    return merge_reports(parts, dry_run), failed


def stored_report(database_url: str | None, run_id: str | None, agent_id: str, user_id: str) -> DriftReport | None:
    """The report the drift run ``run_id`` stored for the partition (a failed task run returns none of its own)."""
    from skillflow.storage.reports import report_id
    from skillflow.storage.schema import reports

    rid = report_id("drift", run_id, agent_id, user_id)
    with engine_for(database_url).connect() as conn:
        body = conn.execute(select(reports.c.body).where(reports.c.id == rid)).scalar()
    return DriftReport.model_validate(body) if body is not None else None


def fan_out_drift(
    database_url: str | None,
    partitions: list[tuple[str, str]],
    chunks: int | None,
    overrides: dict[str, object],
    dry_run: bool,
) -> tuple[DriftReport, list[str]]:
    """Pool mode: one ``drift-partitions`` child run per chunk; their stored per-partition reports, merged."""
    from skillflow.lifecycle.drift import merge_reports
    from skillflow.storage.reports import bodies_of_runs
    from tasks.fanout import FleetSettings, chunk, run_children, worker_slots

    settings, parent = FleetSettings(), flow_run_id()
    groups = chunk(partitions, chunks or settings.chunks or worker_slots(CHILD_DEPLOYMENT))
    base = {"database_url": database_url, "dry_run": dry_run, "config_overrides": overrides, "fan_out": "local"}
    params = [{"params": {**base, "partitions": g, "drift_run_id": parent}} for g in groups]
    children = run_children(CHILD_DEPLOYMENT, params, parent, settings)
    with engine_for(database_url).connect() as conn:  # the children stamp this run's id (drift_run)
        bodies = bodies_of_runs(conn, "drift", [parent] if parent else [])
    failed = [c.failure() for c in children if not c.completed]
    return merge_reports([DriftReport.model_validate(b) for b in bodies], dry_run), failed
