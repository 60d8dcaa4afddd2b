"""Tasks of the drift-demotion flow: check every ACTIVE skill (the one composition) and publish the report."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.charts import markdown_image, render_png, skill_charts
from skillflow.lifecycle.drift import DriftReport, render_markdown, run_drift
from skillflow.storage.skills import SkillNotFound, get_skill
from tasks.common import engine_for, flow_run_id, stage, tenant_label

MAX_CHARTS = 25  # a report with more skills charts the first ones (the table lists them all)


@stage(run_name="check-drift")
def check_drift(
    database_url: str | None, config: PromotionConfig, agent_id: str | None, user_id: str | None, dry_run: bool
) -> DriftReport:
    """Recompute each ACTIVE skill's figures, demote the drifted ones (one transaction each), store the report."""
    engine = engine_for(database_url)
    report = run_drift(engine, config, agent_id=agent_id, user_id=user_id, dry_run=dry_run, flow_run_id=flow_run_id())
    get_run_logger().info(
        "drift %s: checked %d, demoted %d (%s), flagged %d, report %s",
        tenant_label(agent_id, user_id), report.checked, len(report.demoted),
        ", ".join(d.skill_id[:12] for d in report.demoted) or "none", len(report.flagged), report.report_id,
    )  # fmt: skip
    return report


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
    get_run_logger().info("published drift report %s: %d skills, charts %s", report.report_id, len(rows), bool(charts))


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
    database_url: str | None, config: PromotionConfig, partitions: list[tuple[str, str]], dry_run: bool
) -> tuple[DriftReport, list[str]]:
    """One drift check (task run, stored report) per partition; a failed partition is named, never fatal."""
    from skillflow.lifecycle.drift import merge_reports

    parts, failed = [], []
    for agent_id, user_id in partitions:
        state = check_drift(database_url, config, agent_id, user_id, dry_run, return_state=True)
        if state.is_completed():
            parts.append(state.result())
        else:
            failed.append(f"{agent_id}/{user_id} ({type(state.result(raise_on_failure=False)).__name__})")
    return merge_reports(parts, dry_run), failed


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

    settings = FleetSettings()
    groups = chunk(partitions, chunks or settings.chunks or worker_slots(CHILD_DEPLOYMENT))
    base = {"database_url": database_url, "dry_run": dry_run, "config_overrides": overrides, "fan_out": "local"}
    children = run_children(
        CHILD_DEPLOYMENT, [{"params": {**base, "partitions": g}} for g in groups], flow_run_id(), settings
    )
    with engine_for(database_url).connect() as conn:
        bodies = bodies_of_runs(conn, "drift", [c.flow_run_id for c in children])
    failed = [f"child run {c.flow_run_id} {c.state.lower()}" for c in children if not c.completed]
    return merge_reports([DriftReport.model_validate(b) for b in bodies], dry_run), failed
