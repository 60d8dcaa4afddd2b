"""Run the suites with Great Expectations 1.x against the configured database and build the report.

One ephemeral GX context (progress bars off) can serve many runs: each run registers its own uniquely
named data source and removes it afterwards. GX connects with its own engine; on PostgreSQL every
connection it opens first installs the session-scoped ``pg_temp.skillflow_is_json`` helper
(see :mod:`skillflow.quality.dialects`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url

from skillflow.kernel.models import new_id, utcnow
from skillflow.quality.dialects import PG_IS_JSON_FUNCTION
from skillflow.quality.model import Check, CheckResult, QualityOptions, QualityReport, TenantFragmentation
from skillflow.quality.suites import FRAGMENTATION_QUERY, TABLE_SUITES, SuiteContext, tenant_fragmentation_checks
from skillflow.storage.engine import make_engine, normalize_url
from skillflow.storage.reports import report_id
from skillflow.storage.schema import workflow_memory

log = logging.getLogger(__name__)
SAMPLE = 10
GX_DOCS_LOGGER = "great_expectations.data_context.types.base"


def new_context() -> Any:
    """An ephemeral GX context with its tqdm progress bars disabled."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX pins this module's logger at INFO, and it logs a temporary docs directory for every ephemeral context:
    # noise in a flow's and the demo's output. A level the application set is kept.
    docs = logging.getLogger(GX_DOCS_LOGGER)
    if docs.level in (logging.NOTSET, logging.INFO):
        docs.setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _pg_creator(url: str) -> Any:
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def creator() -> Any:
        import psycopg

        conn = psycopg.connect(conninfo)
        conn.execute(PG_IS_JSON_FUNCTION)
        conn.commit()
        return conn

    return creator


def _add_datasource(context: Any, name: str, url: str, dialect: str) -> Any:
    if dialect == "sqlite":
        return context.data_sources.add_sqlite(name=name, connection_string=url)
    if dialect == "postgresql":
        return context.data_sources.add_postgres(name=name, connection_string=url, kwargs={"creator": _pg_creator(url)})
    return context.data_sources.add_sql(name=name, connection_string=url)


def _sample(result: dict[str, Any]) -> list[str]:
    rows = (result.get("details") or {}).get("unexpected_rows")
    if rows is not None:
        out = []
        for row in list(rows)[:SAMPLE]:
            values = list(row.values()) if isinstance(row, dict) else list(row)
            out.append(".".join(str(v) for v in values))
        return out
    return [str(v) for v in (result.get("partial_unexpected_list") or [])[:SAMPLE]]


def _raised(info: Any) -> str | None:
    """The first exception message in GX's exception_info (flat, or nested per metric), else None."""
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "error")[:500]
    for value in info.values():
        message = _raised(value)
        if message:
            return message
    return None


def _unexpected(result: dict[str, Any]) -> int | None:
    if "unexpected_count" in result and result["unexpected_count"] is not None:
        return int(result["unexpected_count"])
    observed = result.get("observed_value")
    return int(observed) if isinstance(observed, int | float) else None


def _validate(context: Any, asset: Any, suite_name: str, checks: list[Check]) -> list[CheckResult]:
    """Validate one asset; row queries run with COMPLETE (their only format carrying row ids), the rest SUMMARY."""
    import great_expectations as gx

    from skillflow.quality.suites import result_format

    by_id = {c.id: c for c in checks}
    batch = asset.add_batch_definition_whole_table("all").get_batch()
    groups: dict[str, list[Check]] = {}
    for check in checks:
        groups.setdefault(result_format(check), []).append(check)
    results: list[CheckResult] = []
    for fmt, group in sorted(groups.items()):
        suite = gx.ExpectationSuite(name=f"{suite_name}-{fmt.lower()}")
        for check in group:
            suite.add_expectation(check.expectation)
        outcome = batch.validate(suite, result_format={"result_format": fmt, "partial_unexpected_count": SAMPLE})
        for res in outcome.results:
            check = by_id[res.expectation_config.meta["check"]]
            error = _raised(res.exception_info)
            body = dict(res.result or {})
            results.append(
                CheckResult(
                    id=check.id,
                    table=check.asset,
                    severity=check.severity,
                    description=check.description,
                    status="error" if error else ("passed" if res.success else "failed"),
                    unexpected_count=None if error else _unexpected(body),
                    sample=[] if error else _sample(body),
                    error=error,
                )
            )
    order = {c.id: i for i, c in enumerate(checks)}
    return sorted(results, key=lambda r: order[r.id])


def fragmentation(engine: Engine, options: QualityOptions) -> list[TenantFragmentation]:
    """Per tenant: runs, hashed runs, distinct classes, classes per 100 hashed runs (one GROUP BY)."""
    wm = workflow_memory
    q = (
        select(
            wm.c.agent_id,
            wm.c.user_id,
            func.count().label("runs"),
            func.count(wm.c.canonical_hash).label("hashed"),
            func.count(wm.c.canonical_hash.distinct()).label("classes"),
        )
        .group_by(wm.c.agent_id, wm.c.user_id)
        .order_by(wm.c.agent_id, wm.c.user_id)
    )
    out = []
    with engine.connect() as conn:
        for row in conn.execute(q):
            ratio = round(100.0 * row.classes / row.hashed, 2) if row.hashed else 0.0
            judged = row.hashed >= options.fragmentation_min_runs
            out.append(
                TenantFragmentation(
                    agent_id=row.agent_id,
                    user_id=row.user_id,
                    runs=row.runs,
                    hashed_runs=row.hashed,
                    classes=row.classes,
                    classes_per_100_runs=ratio,
                    judged=judged,
                    over_threshold=judged and ratio > options.fragmentation_warn_per_100,
                )
            )
    return out


def run_quality(
    database_url: str, options: QualityOptions | None = None, *, context: Any = None, flow_run_id: str | None = None
) -> QualityReport:
    """Validate every suite against ``database_url`` (already migrated) and return the report (nothing stored)."""
    started = time.perf_counter()
    options = options or QualityOptions.model_validate({})
    url = normalize_url(database_url)
    dialect = make_url(url).get_backend_name()
    if dialect == "sqlite" and make_url(url).database in (None, "", ":memory:"):
        raise ValueError("data quality needs a file or server database (an in-memory SQLite is private to its engine)")
    context = context if context is not None else new_context()
    ctx = SuiteContext(dialect=dialect, options=options)
    name = f"skillflow-{new_id()[:12]}"
    datasource = _add_datasource(context, name, url, dialect)
    results: list[CheckResult] = []
    try:
        for table, suite_fn in TABLE_SUITES.items():
            asset = datasource.add_table_asset(table, table_name=table)
            results.extend(_validate(context, asset, f"{name}-{table}", suite_fn(ctx)))
        asset = datasource.add_query_asset("tenant_fragmentation", query=FRAGMENTATION_QUERY)
        results.extend(_validate(context, asset, f"{name}-fragmentation", tenant_fragmentation_checks(ctx)))
    finally:
        try:
            datasource.get_execution_engine().engine.dispose()
        finally:
            context.data_sources.delete(name)
    engine = make_engine(database_url)
    try:
        tenants = fragmentation(engine, options)
    finally:
        engine.dispose()
    blocking = sum(1 for r in results if r.status != "passed" and r.severity == "blocking")
    warnings = sum(1 for r in results if r.status != "passed" and r.severity == "warning")
    report = QualityReport(
        id=report_id("data-quality", flow_run_id),
        created_at=utcnow(),
        dialect=dialect,
        passed=blocking == 0,
        blocking_failures=blocking,
        warnings=warnings,
        checks=results,
        fragmentation=tenants,
        options=options,
        flow_run_id=flow_run_id,
        duration_seconds=round(time.perf_counter() - started, 3),
    )
    log.info("data quality: %d checks, %d blocking failures, %d warnings", len(results), blocking, warnings)
    return report
