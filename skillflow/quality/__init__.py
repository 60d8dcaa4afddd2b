"""Data quality of the skillflow tables with Great Expectations 1.x (suites in code, severity per check).

``run_and_store`` is what both ``skillflow quality`` and the ``data-quality`` flow's tasks call.
Great Expectations is imported lazily: importing this package stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillflow.quality.model import CheckResult, QualityOptions, QualityReport
from skillflow.quality.report import latest, render_markdown, store, write_html

__all__ = ["CheckResult", "QualityOptions", "QualityReport", "latest", "render_markdown", "run_and_store"]


def run_and_store(
    database_url: str,
    options: QualityOptions | None = None,
    report_dir: str | Path = ".skillflow/reports",
    *,
    context: Any = None,
    flow_run_id: str | None = None,
) -> QualityReport:
    """Run every suite, write the HTML report, store the summary; return the report (with its HTML path)."""
    from skillflow.quality.runner import run_quality
    from skillflow.storage.engine import make_engine

    report = run_quality(database_url, options, context=context, flow_run_id=flow_run_id)
    path = write_html(report, report_dir)
    report = report.model_copy(update={"html_path": str(path)})
    engine = make_engine(database_url)
    try:
        store(engine, report)
    finally:
        engine.dispose()
    return report
