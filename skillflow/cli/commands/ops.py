"""Operations: ``skillflow quality``, ``serve``, ``status`` and ``events``."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from rich.table import Table

from skillflow.cli.app import (
    AgentOption,
    DbOption,
    JsonOption,
    app,
    console,
    database_url,
    engine_for,
    fail,
    print_json,
    promotion_config,
)
from skillflow.cli.terminal import safe, visible

ReportDirOption = Annotated[str, typer.Option("--report-dir", help="Folder for the self-contained HTML report.")]
PrefectApiOption = Annotated[
    str | None,
    typer.Option(
        "--prefect-api",
        envvar="PREFECT_API_URL",
        help="Prefect API URL for flow-run states (default: $PREFECT_API_URL).",
    ),
]


@app.command("quality")
def quality_cmd(
    db: DbOption = None,
    json: JsonOption = False,
    report_dir: ReportDirOption = ".skillflow/reports",
    fragmentation_warn_per_100: Annotated[
        float,
        typer.Option("--fragmentation-warn", min=0.01, max=100, help="Warn above this many classes per 100 runs."),
    ] = 50.0,
    fragmentation_min_runs: Annotated[
        int, typer.Option("--fragmentation-min-runs", min=1, help="Tenants with fewer hashed runs are not judged.")
    ] = 20,
) -> None:
    """Run the data-quality suites now; print the summary and the HTML report path (exit 1 on blocking failures)."""
    from skillflow.quality import QualityOptions, run_and_store

    engine_for(db).dispose()  # fails at once, naming `skillflow migrate`, on an outdated database
    options = QualityOptions.model_validate(
        {"fragmentation_warn_per_100": fragmentation_warn_per_100, "fragmentation_min_runs": fragmentation_min_runs}
    )
    report = run_and_store(database_url(db), options, report_dir)
    if json:
        print_json(report.model_dump(mode="json"))
    else:
        verdict = (
            "[green]PASSED[/green]" if report.passed else f"[red]FAILED[/red] ({report.blocking_failures} blocking)"
        )
        console.print(f"Data quality {verdict}: {len(report.checks)} checks, {report.warnings} warning(s)")
        failed = [c for c in report.checks if c.status != "passed"]
        if failed:
            table = Table(show_lines=False)
            for col in ("severity", "check", "unexpected", "sample / error"):
                table.add_column(col, overflow="fold")
            for c in failed:
                count = "" if c.unexpected_count is None else str(c.unexpected_count)
                table.add_row(safe(c.severity), safe(c.id), count, safe(c.error or ", ".join(map(str, c.sample[:5]))))
            console.print(table)
        console.print(f"HTML report: {safe(report.html_path)}")
    if not report.passed:
        raise typer.Exit(1)


@app.command("serve")
def serve_cmd(db: DbOption = None) -> None:
    """Serve every flow as a deployment (cron from config/skillflow.toml) against $PREFECT_API_URL."""
    from flows.serve import ServeRefused, serve_all
    from skillflow.cli.commands.fleet import require_prefect_api

    require_prefect_api("skillflow serve runs the deployments against a running Prefect server")
    promotion_config()
    engine_for(db, migrate=True).dispose()  # the deploy step: the flows' tasks never migrate
    try:
        serve_all(database_url(db))
    except ServeRefused as exc:
        fail(str(exc), 1)


def _skills_cell(skills: dict[str, dict[str, int]]) -> str:
    parts = []
    for status in sorted(skills):
        roles = ", ".join(f"{role} {n}" for role, n in sorted(skills[status].items()))
        parts.append(f"{status}: {roles}")
    return "; ".join(parts) or "—"


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "—"


def _require_http_url(api: str) -> None:
    """Exit 2 when the Prefect API URL has no http(s) scheme or no host: "not a url" was reported as a server that
    did not answer (docs/RELIABILITY.md, "The CLI's errors")."""
    parts = urlsplit(api)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        fail(
            f"--prefect-api {api!r} is not a URL (the option, else PREFECT_API_URL or the Prefect profile): expected "
            "http(s)://host[:port]/api, e.g. http://127.0.0.1:4200/api"
        )


@app.command("status")
def status_cmd(
    db: DbOption = None, json: JsonOption = False, agent_id: AgentOption = None, prefect_api: PrefectApiOption = None
) -> None:
    """Per tenant: runs, classes, eligible classes, skills by status and role, outbox; the last finished and the open
    run of each flow (runs are the Prefect server's, whichever database they used); slots of the fleet's global
    concurrency limit taken with no chunk running (leaked)."""
    from prefect.settings import PREFECT_API_URL

    from skillflow.kernel.config import load_promotion_config
    from skillflow.operations.status import collect_status
    from tasks.fanout import FleetSettings

    # The option or $PREFECT_API_URL, else the Prefect profile's (`prefect config set`, as review reads it); an
    # explicit `--prefect-api ""` asks no server.
    api = PREFECT_API_URL.value() if prefect_api is None else (prefect_api or None)
    if api:
        _require_http_url(str(api))
    engine = engine_for(db)
    status = collect_status(engine, load_promotion_config(), agent_id, api, FleetSettings().concurrency_limit)
    if json:
        print_json(status)
        return
    tenants = Table(title="Tenants")
    for col in ("agent", "user", "runs", "classes", "eligible", "skills (status: role n)", "outbox"):
        tenants.add_column(col, justify="right" if col in ("runs", "classes", "eligible", "outbox") else "left")
    for t in status["tenants"]:
        tenants.add_row(safe(t["agent_id"]), safe(t["user_id"]), str(t["runs"]), str(t["classes"]),
                        str(t["eligible_classes"]), safe(_skills_cell(t["skills"])),
                        str(t["outbox_backlog"]))  # fmt: skip
    if status["tenants"]:
        console.print(tenants)
        console.print(f"eligible classes by: {safe(status['tenants'][0]['eligibility_method'])}")
        for t in status["tenants"]:
            if t["unhashed_runs"]:
                console.print(
                    visible(
                        f"{t['agent_id']}/{t['user_id']}: {t['unhashed_runs']} legacy run(s) have no canonical hash "
                        f"and are not aggregated: run `{t['backfill_command']}`"
                    ),
                    markup=False,
                    soft_wrap=True,  # one line: the command must survive a copy and paste
                )
    else:
        console.print(
            f"No runs or skills stored for agent {safe(agent_id)}." if agent_id else "No runs or skills stored yet."
        )
    from skillflow.operations.status import UNREACHABLE

    if not api:
        caption = " (no Prefect API configured: states unknown)"
    elif any(f["state"] == UNREACHABLE for f in status["flows"]):
        caption = f" (the Prefect API at {api} did not answer: states unknown)"
    else:
        caption = ""
    flows = Table(title="Flows" + safe(caption))
    for col in ("flow", "last report", "report flow run", "state", "last run", "flow run", "open run"):
        flows.add_column(col, no_wrap=col == "flow", overflow="fold" if col == "open run" else "ellipsis")
    for f in status["flows"]:
        going = f"{f['open_state']} {f['open_flow_run_id']} since {_when(f['open_since'])}" if f["open_state"] else "—"
        flows.add_row(safe(f["flow"]), _when(f["last_report_at"]), safe(f["last_report_flow_run_id"] or "—"),
                      safe(f["state"]), _when(f["last_run_at"]), safe(f["last_flow_run_id"] or "—"),
                      safe(going))  # fmt: skip
    console.print(flows)
    slots = status["partition_slots"]
    if slots and slots["leaked"]:
        console.print(
            visible(
                f"warning: {slots['active_slots']} slot(s) of the global concurrency limit {slots['limit']} are taken "
                "while no promotion-partitions run is in progress. A chunk that died holds its slot until its lease "
                "expires (5 minutes at most), when Prefect frees it: look again then. Still taken after that, their "
                "releases were lost (a Prefect server restarted with its concurrency leases in memory; "
                'docs/guide/ops.md, "What to watch"); with no chunk running, free them: '
                f"`{slots['reset_command']}`"
            ),
            markup=False,
            soft_wrap=True,  # one line: the command must survive a copy and paste
        )


@app.command("events")
def events_cmd(
    db: DbOption = None,
    skill: Annotated[str | None, typer.Option("--skill", help="Only this skill id.")] = None,
    agent_id: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Newest N events.")] = 50,
    json: JsonOption = False,
) -> None:
    """The skill lifecycle log, newest first: who, what, when, why, and the flow run that did it."""
    from skillflow.operations.status import list_events

    events = list_events(engine_for(db), skill, agent_id, limit)
    if json:
        print_json({"events": events})
        return
    if not events:
        console.print("No lifecycle events.")
        return
    table = Table(title="Lifecycle events")
    for col in ("when", "skill", "tenant", "event", "from → to", "actor", "reason", "flow run"):
        table.add_column(col, overflow="fold")
    for e in events:
        move = f"{e['from_status'] or '—'} → {e['to_status'] or '—'}"
        table.add_row(_when(e["created_at"]), safe(e["skill_id"]), safe(f"{e['agent_id']}/{e['user_id']}"),
                      safe(e["event"]), safe(move), safe(e["actor"]), safe(e["reason"] or ""),
                      safe(e["flow_run_id"] or ""))  # fmt: skip
    console.print(table)
