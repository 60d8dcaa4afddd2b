"""data-quality: Great Expectations suites over the skillflow tables → HTML report, artifacts, stored summary."""

from __future__ import annotations

from prefect import flow, get_run_logger

from skillflow.quality import QualityReport
from tasks.common import run_name
from tasks.events import emit_quality_blocking
from tasks.quality import (
    DataQualityFailed,
    DataQualityParams,
    publish_quality_artifacts,
    store_quality_report,
    validate_tables,
    write_quality_html,
)

__all__ = ["DataQualityParams", "data_quality"]


@flow(
    name="data-quality",
    flow_run_name=run_name("data-quality", flow=True),
    description="Great Expectations suites over the skillflow tables: a self-contained HTML report (linked as an "
    "artifact), stored summary and check table; fails only on blocking checks.",
)
def data_quality(params: DataQualityParams | None = None) -> QualityReport:
    """Validate, write the HTML report, store the summary, publish artifacts; fail only on blocking checks."""
    params = params or DataQualityParams()
    report = validate_tables(params)
    report = write_quality_html(report, params.report_dir)
    store_quality_report(params, report)
    publish_quality_artifacts(report)
    get_run_logger().info(
        "data quality: %d checks, %d blocking, %d warnings, report %s",
        len(report.checks), report.blocking_failures, report.warnings, report.id,
    )  # fmt: skip
    if not report.passed:
        emit_quality_blocking(report.id, [c.id for c in report.failed("blocking")])
        failed = ", ".join(c.id for c in report.failed("blocking"))
        raise DataQualityFailed(f"{report.blocking_failures} blocking data-quality check(s) failed: {failed}")
    return report
