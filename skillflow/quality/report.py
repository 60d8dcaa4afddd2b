"""Render and store a data-quality report: self-contained HTML, Markdown, table rows, the reports row."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from skillflow.quality.model import QualityReport
from skillflow.storage.reports import latest_body, write_report

KIND = "data-quality"
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1f2328;background:#fff}
h1{font-size:1.5rem;margin-bottom:.25rem}h2{font-size:1.15rem;margin-top:2rem}
.meta{color:#59636e;font-size:.9rem}
.verdict{display:inline-block;padding:.35rem .8rem;border-radius:6px;font-weight:600;margin:.75rem 0}
.ok{background:#dafbe1;color:#116329}.bad{background:#ffebe9;color:#a40e26}.warn{background:#fff8c5;color:#7d4e00}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{border:1px solid #d1d9e0;padding:.4rem .55rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85em}
.pill{padding:.1rem .45rem;border-radius:999px;font-size:.8rem;font-weight:600}
"""


def _status_pill(status: str, severity: str) -> str:
    cls = "ok" if status == "passed" else ("bad" if severity == "blocking" else "warn")
    return f'<span class="pill {cls}">{html.escape(status)}</span>'


def render_html(report: QualityReport) -> str:
    """A single HTML file with inline CSS and no scripts or external resources."""
    e = html.escape
    verdict = (
        '<div class="verdict ok">PASSED</div>'
        if report.passed
        else f'<div class="verdict bad">FAILED: {report.blocking_failures} blocking</div>'
    )
    if report.warnings:
        verdict += f' <div class="verdict warn">{report.warnings} warning(s)</div>'
    rows = []
    for c in sorted(report.checks, key=lambda c: (c.status == "passed", c.severity != "blocking", c.id)):
        detail = e(c.error) if c.error else e(", ".join(c.sample))
        count = "" if c.unexpected_count is None else str(c.unexpected_count)
        rows.append(
            f"<tr><td>{_status_pill(c.status, c.severity)}</td><td>{e(c.severity)}</td><td>{e(c.table)}</td>"
            f"<td><code>{e(c.id)}</code><br>{e(c.description)}</td><td>{count}</td><td><code>{detail}</code></td></tr>"
        )
    frag = [
        f"<tr><td>{e(t.agent_id)}</td><td>{e(t.user_id)}</td><td>{t.runs}</td><td>{t.hashed_runs}</td>"
        f"<td>{t.classes}</td><td>{t.classes_per_100_runs:.2f}</td>"
        f"<td>{'over threshold' if t.over_threshold else ('ok' if t.judged else 'too few runs to judge')}</td></tr>"
        for t in report.fragmentation
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>skillflow data quality {e(report.created_at.isoformat())}</title>
<style>{_CSS}</style></head><body>
<h1>skillflow data quality</h1>
<div class="meta">{e(report.created_at.isoformat())} · {e(report.dialect)} · {len(report.checks)} checks ·
{report.duration_seconds:.2f} s · report <code>{e(report.id)}</code>{
        f" · flow run <code>{e(report.flow_run_id)}</code>" if report.flow_run_id else ""
    }</div>
{verdict}
<h2>Checks</h2>
<table><tr><th>status</th><th>severity</th><th>table</th><th>check</th><th>unexpected</th><th>sample / error</th></tr>
{"".join(rows)}
</table>
<h2>Class fragmentation per tenant</h2>
<p class="meta">Distinct trajectory classes per 100 hashed runs; warning above
{report.options.fragmentation_warn_per_100:g} for tenants with at least {report.options.fragmentation_min_runs} hashed
runs. Heavy fragmentation means the canonicalization rules need tuning before promotion is trusted.</p>
<table><tr><th>agent</th><th>user</th><th>runs</th><th>hashed runs</th><th>classes</th><th>classes / 100 runs</th>
<th>verdict</th></tr>
{"".join(frag) or '<tr><td colspan="7">no runs</td></tr>'}
</table>
</body></html>
"""


def write_html(report: QualityReport, report_dir: str | Path) -> Path:
    """Write ``data-quality-<timestamp>-<id8>.html`` and ``data-quality-latest.html``; return the first."""
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = report.created_at.strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"data-quality-{stamp}-{report.id[:8]}.html"
    body = render_html(report.model_copy(update={"html_path": str(path)}))
    path.write_text(body, encoding="utf-8")
    (folder / "data-quality-latest.html").write_text(body, encoding="utf-8")
    return path


def render_markdown(report: QualityReport) -> str:
    verdict = "PASSED" if report.passed else f"FAILED ({report.blocking_failures} blocking)"
    lines = [
        f"# Data quality: {verdict}",
        "",
        f"{len(report.checks)} checks on {report.dialect}, {report.warnings} warning(s), "
        f"{report.duration_seconds:.2f} s. Report id `{report.id}`.",
    ]
    if report.html_path:
        lines.append(f"HTML report: `{report.html_path}`")
    failed = [c for c in report.checks if c.status != "passed"]
    if failed:
        lines += ["", "| severity | check | unexpected | sample |", "|---|---|---|---|"]
        for c in failed:
            sample = (c.error or ", ".join(c.sample)).replace("|", "\\|").replace("\n", " ")[:200]
            count = "" if c.unexpected_count is None else str(c.unexpected_count)
            lines.append(f"| {c.severity} | `{c.id}` | {count} | {sample} |")
    else:
        lines += ["", "Every check passed."]
    return "\n".join(lines)


def table_rows(report: QualityReport) -> list[dict[str, Any]]:
    return [
        {
            "check": c.id,
            "table": c.table,
            "severity": c.severity,
            "status": c.status,
            "unexpected": c.unexpected_count,
            "description": c.description,
        }
        for c in report.checks
    ]


def store(engine: Engine, report: QualityReport) -> None:
    """Store the summary as ``reports`` kind ``data-quality`` through the one report writer."""
    with engine.begin() as conn:
        write_report(
            conn,
            report_id=report.id,
            kind=KIND,
            body=report.model_dump(mode="json"),
            created_at=report.created_at,
            flow_run_id=report.flow_run_id,
        )


def latest(engine: Engine) -> QualityReport | None:
    with engine.connect() as conn:
        body = latest_body(conn, KIND)
    return QualityReport.model_validate(body) if body else None
