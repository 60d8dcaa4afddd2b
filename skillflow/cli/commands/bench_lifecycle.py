"""``skillflow bench lifecycle``: shadow-evaluation throughput and drift cost vs history."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from skillflow.cli.app import JsonOption, bench_app, console, fail, print_json


@bench_app.command("lifecycle")
def bench_lifecycle(
    runs: Annotated[
        int, typer.Option("--runs", min=100, help="Stored pending runs drained by shadow evaluation.")
    ] = 100_000,
    tenants: Annotated[int, typer.Option("--tenants", min=1, help="Tenants (3 SHADOW skills each).")] = 20,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Outbox rows per batch.")] = 1000,
    histories: Annotated[
        str, typer.Option("--histories", help="Comma-separated old-activation counts for the drift check.")
    ] = "10000,100000",
    skills: Annotated[int, typer.Option("--skills", min=1, help="ACTIVE skills in the drift benchmark.")] = 20,
    new: Annotated[int, typer.Option("--new", min=1, help="Fresh activations per skill before the timed check.")] = 50,
    json: JsonOption = False,
) -> None:
    """Shadow evaluation runs/s (hashing embedder, file SQLite) and the drift check's cost at growing history."""
    from skillflow.lab.bench.lifecycle_bench import run

    try:
        sizes = tuple(int(x.replace("_", "")) for x in histories.split(",") if x.strip())
    except ValueError:
        fail(f"--histories must be comma-separated integers, got {histories!r}")
        return
    result = run(runs=runs, tenants=tenants, batch_size=batch_size, histories=sizes, skills=skills, new=new)
    if json:
        print_json(result.as_dict())
        return
    table = Table(
        title=f"shadow evaluation ({result.runs:,} runs, {result.tenants} tenants, batch {result.batch_size})"
    )
    for col in ("runs/s", "seconds", "records", "target"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{result.shadow_runs_per_s:,.0f}", f"{result.shadow_seconds:.2f}", f"{result.shadow_records:,}", "≥ 2,000"
    )
    console.print(table)
    drift = Table(title=f"drift check ({skills} ACTIVE skills, {new} new activations each)")
    for col in ("history", "first check s", "incremental check s", "new activations/s"):
        drift.add_column(col, justify="right")
    for d in result.drift:
        drift.add_row(
            f"{d['history_activations']:,}",
            f"{d['first_check_s']:.3f}",
            f"{d['incremental_check_s']:.3f}",
            f"{d['new_activations_per_s']:,.0f}",
        )
    console.print(drift)
    console.print("shadow target met" if result.meets_target else "[yellow]shadow target NOT met[/yellow]")
