"""``skillflow bench scale`` and ``skillflow class-stats`` (fold or recount the maintained class statistics)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from skillflow.cli.app import (
    AgentOption,
    DbOption,
    JsonOption,
    UserOption,
    app,
    bench_app,
    console,
    engine_for,
    fail,
    print_json,
)
from skillflow.cli.terminal import safe

DEFAULT_SCENARIOS = "1000x1000x5,10000x100x5"


@bench_app.command("scale")
def bench_scale(
    scenarios: Annotated[
        str, typer.Option("--scenarios", help="Comma-separated TENANTSxRUNS_PER_TENANTxCLASSES_PER_TENANT.")
    ] = DEFAULT_SCENARIOS,
    backends: Annotated[str, typer.Option("--backends", help="Comma-separated: postgresql, sqlite.")] = "postgresql",
    db: DbOption = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed reads of the statistics (median).")] = 5,
    aggregate_repeats: Annotated[
        int, typer.Option("--aggregate-repeats", min=1, help="Timed full aggregations (median).")
    ] = 3,
    fold_rows: Annotated[int, typer.Option("--fold-rows", min=2, help="New runs folded after the recount.")] = 10_000,
    fleet: Annotated[
        bool, typer.Option("--fleet/--no-fleet", help="Also time the whole cycle on one and on two local workers.")
    ] = False,
    fleet_rounds: Annotated[
        int, typer.Option("--fleet-rounds", min=1, help="Alternating two-worker / one-worker cycles (median).")
    ] = 3,
    json: JsonOption = False,
) -> None:
    """Maintained class statistics vs the full aggregation on synthetic history (throwaway schema or file)."""
    from skillflow.lab.bench.scale_bench import Scenario, run

    try:
        parsed = [Scenario.parse(x) for x in scenarios.split(",") if x.strip()]
    except ValueError as exc:
        fail(str(exc))
    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    if not chosen or any(b not in ("postgresql", "sqlite") for b in chosen):
        fail(f"--backends takes postgresql and/or sqlite, got {backends!r}")
    dsn = db or os.environ.get("SKILLFLOW_TEST_POSTGRES_DSN")
    if "postgresql" in chosen and not dsn:
        fail("PostgreSQL needs --db postgresql://… or SKILLFLOW_TEST_POSTGRES_DSN (a throwaway schema is created)")

    def say(msg: str) -> None:
        if not json:
            console.print(f"[dim]{safe(msg)}…[/dim]")

    results = run(parsed, chosen, dsn=dsn, repeats=repeats, aggregate_repeats=aggregate_repeats,
                  fold_rows=fold_rows, fleet=fleet, fleet_rounds=fleet_rounds, progress=say)  # fmt: skip
    if json:
        print_json([asdict(r) for r in results])
        return
    table = Table(title="scale benchmark (medians, same run)")
    cols = ("backend", "tenants×runs×classes", "rows", "classes", "full agg", "recount", "fold", "read", "ratio")
    for col in (*cols, "match", "1 worker", "2 workers"):
        table.add_column(col, justify="right")
    for r in results:
        f = r.fleet or {}
        table.add_row(
            r.backend,
            f"{r.tenants}×{r.runs_per_tenant}×{r.classes_per_tenant}",
            f"{r.rows:,}",
            f"{r.classes:,}",
            f"{r.aggregate_s:.3f} s",
            f"{r.recount_s:.3f} s",
            f"{r.fold_s:.3f} s ({r.fold_rows:,})",
            f"{r.read_s * 1000:.1f} ms",
            f"{r.speedup:,.0f}×",
            "yes" if r.match else "[red]NO[/red]",
            f"{f['one_worker_s']:.1f} s" if "one_worker_s" in f else "not measured",
            f"{f['two_workers_s']:.1f} s" if "two_workers_s" in f else "not measured",
        )
    console.print(table)


@app.command("class-stats")
def class_stats_cmd(
    db: DbOption = None,
    recount: Annotated[
        bool, typer.Option("--recount", help="Rebuild every class's statistics from all its runs (the reference).")
    ] = False,
    agent_id: AgentOption = None,
    user_id: UserOption = None,
    json: JsonOption = False,
) -> None:
    """Fold the runs stored since the last fold into the class statistics, or ``--recount`` them from scratch."""
    from skillflow.storage import class_stats

    engine = engine_for(db)
    if recount:
        body = {"recounted": class_stats.recount(engine, agent_id, user_id)}
    else:
        body = class_stats.fold(engine, agent_id, user_id)
    if json:
        print_json(body)
        return
    console.print(safe(", ".join(f"{k}: {v}" for k, v in body.items())))
