"""Tasks of the data-quality flow: validate, write the HTML report, store the summary, publish artifacts."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import Field

from skillflow.kernel.config import Settings
from skillflow.quality import QualityOptions, QualityReport
from skillflow.quality.report import render_markdown, store, table_rows, write_html
from tasks.common import FlowParams, engine_for, flow_run_id, stage

REPORT_KEY = "data-quality-report"
HTML_KEY = "data-quality-html"
CHECKS_KEY = "data-quality-checks"


class DataQualityParams(FlowParams):
    """Parameters of the data-quality flow (a form in the Prefect UI)."""

    database_url: str | None = Field(None, description="Database URL (default: $SKILLFLOW_DATABASE_URL)")
    fragmentation_warn_per_100: float = Field(
        50.0, gt=0, le=100, description="Warn when a tenant has more distinct classes per 100 hashed runs"
    )
    fragmentation_min_runs: int = Field(
        20, ge=1, le=1_000_000, description="Tenants with fewer hashed runs are not judged"
    )
    report_dir: str = Field(".skillflow/reports", description="Folder of the self-contained HTML reports")

    def url(self) -> str:
        return self.database_url or Settings().database_url

    def options(self) -> QualityOptions:
        return QualityOptions(
            fragmentation_warn_per_100=self.fragmentation_warn_per_100,
            fragmentation_min_runs=self.fragmentation_min_runs,
        )


class DataQualityFailed(RuntimeError):
    """Raised by the flow after the report is stored, when a blocking check failed."""


@stage()
def validate_tables(params: DataQualityParams) -> QualityReport:
    """Run every suite with Great Expectations (the schema is migrated first, once per process)."""
    from skillflow.quality.runner import run_quality

    engine_for(params.url())
    return run_quality(params.url(), params.options(), flow_run_id=flow_run_id())


@task(cache_policy=NO_CACHE)
def write_quality_html(report: QualityReport, report_dir: str) -> QualityReport:
    path = write_html(report, report_dir).resolve()
    return report.model_copy(update={"html_path": str(path)})


@stage()
def store_quality_report(params: DataQualityParams, report: QualityReport) -> str:
    store(engine_for(params.url()), report)
    return report.id


@task(cache_policy=NO_CACHE)
def publish_quality_artifacts(report: QualityReport) -> None:
    verdict = "passed" if report.passed else f"{report.blocking_failures} blocking failure(s)"
    create_markdown_artifact(key=REPORT_KEY, markdown=render_markdown(report), description=f"data quality: {verdict}")
    create_table_artifact(key=CHECKS_KEY, table=table_rows(report), description=f"{len(report.checks)} checks")
    if report.html_path:
        path = Path(report.html_path).resolve()
        create_link_artifact(
            key=HTML_KEY, link=path.as_uri(), link_text=str(path), description="Self-contained HTML report (this host)"
        )
    get_run_logger().info("published data-quality report %s (%d checks)", report.id, len(report.checks))
