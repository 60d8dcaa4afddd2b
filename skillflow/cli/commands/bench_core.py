"""``skillflow bench capture`` and ``skillflow bench cycle``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from skillflow.cli.app import DbOption, JsonOption, bench_app, console, fail, print_json
from skillflow.cli.terminal import safe


@bench_app.command("capture")
def bench_capture(
    runs: Annotated[int, typer.Option("--runs", min=10, help="Captured runs to time (after 20 warm-up runs).")] = 1000,
    canonical_runs: Annotated[
        int, typer.Option("--canonical-runs", min=100, help="Runs canonicalized for the throughput figure.")
    ] = 20_000,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Capture latency (p50/p95 of record_run, 5-step runs, file SQLite by default) and canonicalization runs/s."""
    from skillflow.lab.bench.capture_bench import run

    result = run(runs=runs, database_url=db, canonical_runs=canonical_runs)
    if json:
        print_json(result.as_dict())
        return
    table = Table(title=f"capture benchmark ({result.backend}, {result.runs} runs)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row("record_run p50", f"{result.p50_ms:.3f} ms", "")
    table.add_row("record_run p95", f"{result.p95_ms:.3f} ms", f"≤ {result.target_p95_ms:g} ms")
    table.add_row("record_run p99", f"{result.p99_ms:.3f} ms", "")
    table.add_row(
        "canonicalization", f"{result.canonical_runs_per_s:,.0f} runs/s", f"≥ {result.target_runs_per_s:,.0f}"
    )
    console.print(table)
    console.print("targets met" if result.meets_targets else "[yellow]targets NOT met[/yellow]")


def _sizes(raw: str) -> list[int]:
    try:
        sizes = [int(x.replace("_", "")) for x in raw.split(",") if x.strip()]
    except ValueError:
        fail(f"--rows must be comma-separated integers, got {raw!r}")
    if not sizes or any(s < 1 for s in sizes):
        fail("--rows needs at least one positive size")
    return sizes


@bench_app.command("cycle")
def bench_cycle(
    rows: Annotated[str, typer.Option("--rows", help="Comma-separated history sizes.")] = "10000,100000,1000000",
    tenants: Annotated[int, typer.Option("--tenants", min=1, help="(agent, user) partitions.")] = 20,
    classes: Annotated[int, typer.Option("--classes", min=1, help="Trajectory classes per tenant.")] = 50,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed repeats per size (medians).")] = 3,
    naive_repeats: Annotated[
        int | None, typer.Option("--naive-repeats", min=1, help="Repeats of the naive baseline (default: --repeats).")
    ] = None,
    covering: Annotated[
        bool, typer.Option("--covering/--no-covering", help="Also time the shipped schema (004 covering index).")
    ] = True,
    json: JsonOption = False,
) -> None:
    """Aggregation over synthetic history (fresh SQLite file per size) vs a naive read-every-row baseline."""
    from skillflow.lab.bench.cycle_bench import run

    def say(msg: str) -> None:
        if not json:
            console.print(f"[dim]{safe(msg)}…[/dim]")

    result = run(_sizes(rows), tenants, classes, repeats, naive_repeats, covering, progress=say)
    if json:
        print_json(result.as_dict())
        return
    table = Table(title=f"cycle benchmark ({result.backend}, {tenants} tenants × {classes} classes, medians)")
    for col in ("rows", "generate", "agg (pre-004)", "naive", "ratio", "agg (shipped)", "ratio", "cycle", "match"):
        table.add_column(col, justify="right")
    for s in result.sizes:
        table.add_row(
            f"{s.rows:,}",
            f"{s.generate_s:.2f} s",
            f"{s.aggregate_s:.3f} s",
            f"{s.naive_s:.3f} s",
            f"{s.ratio:.1f}×",
            "-" if s.aggregate_covering_s is None else f"{s.aggregate_covering_s:.3f} s",
            "-" if s.ratio_covering is None else f"{s.ratio_covering:.1f}×",
            "-" if s.cycle_s is None else f"{s.cycle_s:.2f} s",
            "yes" if s.results_match else "[red]NO[/red]",
        )
    console.print(table)
    for note in result.notes:
        console.print(f"[dim]- {note}[/dim]")
