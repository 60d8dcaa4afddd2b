"""Task: drain one batch of the shadow outbox (claim → evaluate → persist → reconcile)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from skillflow.config import PromotionConfig, Settings
from skillflow.embeddings import get_embedder
from skillflow.shadow import DrainReport, ShadowBatchError, drain_batch
from tasks.common import engine_for, is_transient


def retry_shadow(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a batch only when its failure was transient (lock timeout, lost connection, embedder timeout)."""
    try:
        state.result()
    except ShadowBatchError as exc:
        return exc.transient
    except Exception as exc:  # noqa: BLE001 - inspecting the failure is the point
        return is_transient(exc)
    return False


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_shadow)
def drain_shadow_batch(
    database_url: str | None,
    config: PromotionConfig,
    batch_size: int,
    embedder: str | None,
    dry_run: bool,
    exclude: list[str],
) -> DrainReport:
    """One batch; rows that failed earlier in this flow run (``exclude``) are left for a later run."""
    model = get_embedder(embedder or Settings().embedder)
    return drain_batch(engine_for(database_url), config, model, batch_size, dry_run=dry_run, exclude=set(exclude))


@task(cache_policy=NO_CACHE)
def publish_shadow_summary(report: DrainReport) -> None:
    lines = [
        "# Shadow evaluation",
        "",
        f"- status: {report.status}",
        f"- batches: {report.batches}; runs claimed: {report.claimed}; runs with evidence: {report.evaluated_runs}",
        f"- records appended: {report.records}; runs without a fresh candidate: {report.no_candidate}",
        f"- failed (left in the outbox): {report.failed}; skills reconciled: {report.skills_reconciled}",
        f"- still pending: {report.pending_left if report.pending_left is not None else 'n/a'}",
    ]
    create_markdown_artifact(
        key="shadow-evaluation", markdown="\n".join(lines), description="Shadow evaluation summary"
    )
