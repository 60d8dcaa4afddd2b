"""``skillflow bench drift``: false demotions of healthy skills and detection delay of broken ones, per setting."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from skillflow.cli.app import JsonOption, bench_app, console, fail, print_json
from skillflow.cli.terminal import safe
from skillflow.lab.bench.applicability_bench import TAU_BENCH
from skillflow.lab.bench.drift_quality import DEFAULT_BROKEN, DEFAULT_HEALTHY, DEFAULT_SETTINGS


@bench_app.command("drift")
def bench_drift(
    settings: Annotated[
        str,
        typer.Option(
            "--settings",
            help="Comma-separated window:delta[:grace] (drift_window_activations, demotion_success_delta, "
            "min_activations_before_drift_check; grace defaults to 5).",
        ),
    ] = DEFAULT_SETTINGS,
    healthy: Annotated[
        str, typer.Option("--healthy", help="Comma-separated baseline:true-rate of healthy skills ('' skips).")
    ] = DEFAULT_HEALTHY,
    broken: Annotated[
        str,
        typer.Option("--broken", help="Comma-separated baseline:rate-after-the-change of broken skills ('' skips)."),
    ] = DEFAULT_BROKEN,
    change_at: Annotated[
        int, typer.Option("--change-at", min=1, help="Activations at the baseline rate before a broken skill breaks.")
    ] = 100,
    after: Annotated[
        int, typer.Option("--after", min=1, help="Activations after the change within which detection counts.")
    ] = 300,
    horizons: Annotated[
        str, typer.Option("--horizons", help="Comma-separated activation counts for healthy skills.")
    ] = "100,500,1000",
    skills: Annotated[int, typer.Option("--skills", min=1, help="Simulated skills per setting and scenario.")] = 30,
    check_every: Annotated[
        int, typer.Option("--check-every", min=1, help="Activations stored between two drift checks.")
    ] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the outcome streams.")] = 0,
    tau_bench: Annotated[
        str, typer.Option("--tau-bench", help="τ-bench airline JSON for the winner's-curse section ('' skips it).")
    ] = str(TAU_BENCH),
    tau_skills: Annotated[
        int, typer.Option("--tau-skills", min=1, help="Simulated skills per setting and τ-bench scenario.")
    ] = 10,
    cv_seeds: Annotated[str, typer.Option("--cv-seeds", help="Seeds of τ-bench's grouped 5-fold splits.")] = "0",
    json: JsonOption = False,
) -> None:
    """Through the shipped drift check on file SQLite: healthy skills demoted within each horizon, broken ones'
    detection delay, and τ-bench's baselines at promotion against the same classes' held-out rates."""
    from skillflow.lab.bench.drift_bench import run
    from skillflow.lab.bench.drift_quality import parse_scenarios, parse_settings

    try:
        grid = parse_settings(settings)
        well = parse_scenarios(healthy)
        ill = parse_scenarios(broken, at=change_at)
        marks = sorted({int(x) for x in horizons.split(",") if x.strip()})
        seeds = [int(x) for x in cv_seeds.split(",") if x.strip()]
    except ValueError as exc:
        fail(f"bad option: {exc}")
    if not grid or not marks or min(marks) < 1:
        fail("--settings and --horizons need at least one item (horizons >= 1)")

    def say(msg: str) -> None:
        if not json:
            console.print(f"[dim]{safe(msg)}…[/dim]")

    result = run(
        grid, well, ill, skills=skills, horizons=marks, after=after, check_every=check_every, seed=seed,
        tau_path=Path(tau_bench) if tau_bench else None, tau_skills=tau_skills, cv_seeds=seeds or [0], progress=say,
    )  # fmt: skip
    if json:
        print_json(result.as_dict())
        return
    _healthy_table(result.healthy, marks, f"healthy skills demoted within N activations (check every {check_every})")
    _broken_table(result.broken, after)
    if result.tau is None:
        console.print(f"[yellow]{safe(result.tau_skipped or '')}[/yellow]")
    else:
        _tau_tables(result.tau, marks)
    console.print(f"{result.seconds:.1f} s; load average {result.load_before} before, {result.load_after} after")


def _share(count: int, n: int) -> str:
    return f"{count / n:.2f} ({count}/{n})" if n else "—"


def _healthy_table(rows: list[dict[str, Any]], marks: list[int], title: str) -> None:
    table = Table(title=title)
    for col in ("scenario", "setting", *(f"≤ {m}" for m in marks)):
        table.add_column(col, justify="left" if col in ("scenario", "setting") else "right")
    for r in rows:
        table.add_row(r["scenario"], r["setting"], *(_share(r["demoted_by"][str(m)], r["skills"]) for m in marks))
    console.print(table)


def _broken_table(rows: list[dict[str, Any]], after: int) -> None:
    table = Table(title=f"broken skills: detection delay in activations after the change (within {after})")
    for col in ("scenario", "setting", "demoted before", "detected", "p50", "p90", "max"):
        table.add_column(col, justify="left" if col in ("scenario", "setting") else "right")
    for r in rows:
        table.add_row(
            r["scenario"],
            r["setting"],
            str(r["demoted_before_change"]),
            _share(r["detected"], r["alive_at_change"]),
            *("—" if r[k] is None else str(r[k]) for k in ("delay_p50", "delay_p90", "delay_max")),
        )
    console.print(table)


def _tau_tables(tau: dict[str, Any], marks: list[int]) -> None:
    table = Table(title=f"τ-bench: baseline at promotion vs held-out rate ({tau['segments']} segments)")
    for col in ("outcome", "gated", "w/ runs", "runs", "baseline", "held-out", "gap", "low 95%"):
        table.add_column(col, justify="left" if col == "outcome" else "right")
    for outcome in ("execution", "reward"):
        s = tau[outcome]["summary"]
        table.add_row(
            outcome,
            str(s["gated"]),
            str(s["gated_with_held_out_runs"]),
            str(s["held_out_executions"]),
            *("—" if s[k] is None else f"{s[k]:.3f}" for k in ("baseline_weighted", "held_out_rate", "gap")),
            "—" if s["held_out_rate_lower95"] is None else f"{s['held_out_rate_lower95']:.3f}",
        )
    console.print(table)
    for outcome in ("execution", "reward"):
        rows = tau[outcome]["demotion"]
        if rows:
            _healthy_table(
                [{**r, "scenario": f"{r['kind']}: {r['scenario']}"} for r in rows],
                marks,
                f"τ-bench ({outcome}): demoted within N activations at the held-out rate",
            )
