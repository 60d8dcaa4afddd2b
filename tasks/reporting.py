"""Task: publish promotion reports as Prefect artifacts (Markdown and the per-class gate table)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.promotion.report import PromotionReport

REPORT_KEY = "promotion-report"
GATES_KEY = "promotion-gates"


def _cell(items: list[str]) -> str:
    return ", ".join(items) if items else "—"


def render_markdown(reports: list[PromotionReport]) -> str:
    """The report as Markdown: counts and ids per partition, reasons, the gate table (no queries, no bodies)."""
    lines = ["# Promotion report", ""]
    if not reports:
        lines.append("No partition with stored runs matched.")
    for r in reports:
        head = f"## {r.agent_id} / {r.user_id} — {r.mode} {r.cycle}" + (" (dry run)" if r.dry_run else "")
        lines += [head, ""]
        if r.partition_failed:
            lines += [f"Partition FAILED: {r.partition_failed}", ""]
            continue
        if r.partition_skipped:
            lines += [f"Partition skipped: {r.partition_skipped}", ""]
            continue
        lines += [
            f"- candidates considered: {r.candidates_considered}",
            f"- promoted: {_cell(r.promoted)}",
        ]
        if r.dry_run:
            lines.append(f"- would promote: {_cell([h[:12] for h in r.would_promote])}")
        lines += [f"- rejected: {h[:12]}: {'; '.join(reasons)}" for h, reasons in r.rejected]
        lines += [f"- skipped: {h[:12]}: {reason}" for h, reason in r.skipped]
        lines += [f"- deprecated: {sid}: {reason}" for sid, reason in r.deprecated]
        lines += [f"- review: {flag}" for flag in r.review_flags]
        if r.gates:
            lines += ["", "| class | decision | runs | success | queries | last seen (d) | score | gates |"]
            lines.append("|---|---|---:|---:|---:|---:|---:|---|")
            for g in r.gates:
                gates = " ".join(f"{k}:{'✓' if v else '✗'}" for k, v in g.checks.items())
                score = "" if g.score is None else f"{g.score:.3f}"
                lines.append(
                    f"| {g.hash} | {g.decision} | {g.executions} | {g.success_rate:.2f} | {g.distinct_queries} "
                    f"| {g.last_seen_days} | {score} | {gates} |"
                )
        lines.append("")
    return "\n".join(lines)


def gate_table(reports: list[PromotionReport]) -> list[dict[str, object]]:
    return [  # decision and reason first: wide tables scroll, the verdict must stay in view
        {
            "class": g.hash,
            "decision": g.decision,
            "reason": g.reason or "",
            "agent_id": r.agent_id,
            "user_id": r.user_id,
            "executions": g.executions,
            "success_rate": g.success_rate,
            "distinct_queries": g.distinct_queries,
            "last_seen_days": g.last_seen_days,
            **{f"gate_{k}": v for k, v in g.checks.items()},
            "score": g.score,
        }
        for r in reports
        for g in r.gates
    ]


@task(cache_policy=NO_CACHE, task_run_name="publish-promotion-report")
def publish_report(reports: list[PromotionReport]) -> None:
    """Markdown + table artifacts under stable keys (a new version per run)."""
    create_markdown_artifact(render_markdown(reports), key=REPORT_KEY, description="Promotion report")
    rows = gate_table(reports)
    create_table_artifact(rows, key=GATES_KEY, description="Per-class promotion gates")
    get_run_logger().info(
        "published %s (%d partition(s), %d landed) and %s (%d class row(s))",
        REPORT_KEY, len(reports), sum(len(r.promoted) for r in reports), GATES_KEY, len(rows),
    )  # fmt: skip
