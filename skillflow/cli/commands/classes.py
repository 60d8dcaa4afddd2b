"""``skillflow classes`` (trajectory classes per tenant) and ``skillflow backfill`` (the backfill flow)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skillflow.cli.app import (
    AgentOption,
    DbOption,
    JsonOption,
    UserOption,
    app,
    console,
    database_url,
    engine_for,
    flow_database,
)
from skillflow.cli.terminal import safe
from skillflow.kernel.models import ClassStats
from skillflow.storage.aggregate import aggregate_classes, partitions


def _class_json(s: ClassStats) -> dict[str, Any]:
    return {
        "agent_id": s.agent_id,
        "user_id": s.user_id,
        "canonical_hash": s.canonical_hash,
        "executions": s.executions,
        "successes": s.successes,
        "failures": s.failures,
        "unknown": s.unknown,
        "success_rate": round(s.success_rate, 4),
        "distinct_queries": s.distinct_queries,
        "first_seen": s.first_seen,
        "last_seen": s.last_seen,
        "tool_sequence": s.tool_sequence,
        "stamped": s.stamped,
        "since": s.since,
    }


@app.command("classes")
def classes_cmd(
    db: DbOption = None, agent_id: AgentOption = None, user_id: UserOption = None, json: JsonOption = False
) -> None:
    """List trajectory classes per tenant: executions, success rate, distinct queries, first/last seen."""
    engine = engine_for(db)
    with engine.connect() as conn:
        stats = [s for a, u in partitions(conn, agent_id, user_id) for s in aggregate_classes(conn, a, u)]
    stats.sort(key=lambda s: (-s.executions, s.agent_id, s.user_id, s.canonical_hash))
    if json:
        from skillflow.cli.app import print_json

        print_json({"classes": [_class_json(s) for s in stats]})
        return
    if not stats:
        console.print("No trajectory classes yet (record runs with tool calls, or run `skillflow backfill`).")
        return
    table = Table(title="Trajectory classes", show_lines=False)
    for col in ("agent", "user", "class"):
        table.add_column(col, style="cyan" if col == "class" else None, no_wrap=col == "class")
    for col in ("exec", "ok", "rate", "queries"):
        table.add_column(col, justify="right")
    table.add_column("first seen")
    table.add_column("last seen")
    table.add_column("tool sequence", overflow="fold")
    for s in stats:
        rate = f"{s.success_rate:.0%}"
        table.add_row(
            safe(s.agent_id),
            safe(s.user_id),
            safe(s.canonical_hash[:12]) + ("*" if s.since else ""),
            str(s.executions),
            str(s.successes),
            f"[green]{rate}[/green]" if s.success_rate >= 0.8 else f"[yellow]{rate}[/yellow]",
            str(s.distinct_queries),
            f"{s.first_seen:%Y-%m-%d %H:%M}",
            f"{s.last_seen:%Y-%m-%d %H:%M}",
            safe(s.tool_sequence or ""),
        )
    console.print(table)
    if any(s.since for s in stats):
        console.print("* demoted before: only runs after the last demotion are counted")


@app.command("backfill")
def backfill_cmd(
    db: DbOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would change; write only the report.")] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=100_000, help="Rows per batch.")] = 500,
    agent_id: AgentOption = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute every row, not only NULL hashes.")] = False,
    json: JsonOption = False,
) -> None:
    """Run the backfill-canonical-hashes flow: hash legacy runs in batches, with a progress bar."""
    from skillflow.operations import backfill

    url = database_url(db)
    engine = engine_for(url)  # migrate before the flow starts
    with engine.connect() as conn:
        todo, _ = backfill.count_scope(conn, agent_id, force)
    engine.dispose()
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.backfill_canonical_hashes import backfill_canonical_hashes
    from tasks.backfill import BackfillParams

    columns = (TextColumn("[bold]backfill"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=json, transient=True) as progress:
        bar = progress.add_task("rows", total=todo)

        def on_batch(batch: backfill.BatchResult) -> None:
            progress.advance(bar, batch.scanned)

        backfill.add_listener(on_batch)
        try:
            with flow_database(url) as recorded:
                params = BackfillParams(
                    database_url=recorded, dry_run=dry_run, batch_size=batch_size, agent_id=agent_id, force=force
                )
                report = backfill_canonical_hashes(params)
        finally:
            backfill.remove_listener(on_batch)
    if json:
        from skillflow.cli.app import print_json

        print_json(report.as_dict())
        return
    console.print(safe(report.summary()))
