"""``skillflow eval``: the evaluation (baseline raw workflows vs the reviewed skill at user and developer
authority vs no memory, skills selected by the production rule) from the terminal."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skillflow.cli.app import JsonOption, app, console, fail, print_json
from skillflow.cli.terminal import safe

SHOWN = (
    ("workflow_accuracy", "workflow"),
    ("answer_accuracy", "answer"),
    ("task_accuracy", "task"),
    ("prompt_tokens", "prompt tok"),
    ("completion_tokens", "compl tok"),
    ("total_tokens", "total tok"),
    ("llm_calls", "calls"),
    ("inference_latency_ms", "infer ms"),
    ("end_to_end_latency_ms", "e2e ms"),
    ("raw_workflow_prompt_rate", "raw wf"),
    ("developer_message_rate", "dev msg"),
    ("skill_prompt_rate", "skill"),
    ("target_skill_rate", "right skill"),
)


def _fmt(metric: str, value: float) -> str:
    if math.isnan(value):
        return "-"
    if metric.endswith(("accuracy", "rate")):
        return f"{value:.2f}"
    return f"{value:,.1f}" if metric.endswith("_ms") or metric == "llm_calls" else f"{value:,.0f}"


def _tables(summary: dict[str, Any], cases: list[dict[str, Any]], show_cases: bool) -> None:
    arms = list(summary["aggregate"])
    agg = Table(title="Aggregate per arm (means over cases x repeats)")
    agg.add_column("metric")
    for arm in arms:
        agg.add_column(arm, justify="right", style="cyan" if arm == "baseline" else None)
    for metric, _ in SHOWN:
        agg.add_row(metric, *(_fmt(metric, summary["aggregate"][a][metric]) for a in arms))
    console.print(agg)
    treated = list(summary["deltas"])
    delta = Table(title="Delta from baseline: estimate [95 % CI] (paired bootstrap over cases and repeats)")
    delta.add_column("metric")
    for arm in treated:
        delta.add_column(arm, justify="right")
    for metric, _ in SHOWN:
        cells = []
        for arm in treated:
            iv = summary["deltas"][arm][metric]
            cells.append(f"{_fmt(metric, iv['estimate'])} [{_fmt(metric, iv['low'])}, {_fmt(metric, iv['high'])}]")
        delta.add_row(metric, *cells)
    console.print(delta)
    for ref, per_arm in summary.get("outcomes", {}).items():
        out = Table(title=f"Per case vs {ref}: better / equal / worse (regression rate = worse / pairs)")
        out.add_column("arm")
        for metric in summary["compared"]:
            out.add_column(metric, justify="right")
        for arm, per in per_arm.items():
            out.add_row(
                arm,
                *(
                    f"{o['better']} / {o['equal']} / {o['worse']}  ({o['regression_rate']:.2f})"
                    for o in (per[m] for m in summary["compared"])
                ),
            )
        console.print(out)
    checks = Table(title="Harness invariants")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail")
    for c in summary["checks"]:
        checks.add_row(safe(c["name"]), "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]", safe(c["detail"]))
    console.print(checks)
    if show_cases:
        per_case = Table(title="Per case")
        cols = ["arm", "case", "repeat", "procedure from", "skill", "workflow", "answer", "tokens", "raw wf", "dev msg"]
        for col in [*cols, "vs baseline", "vs no_memory"]:
            per_case.add_column(col)
        for r in cases:
            per_case.add_row(
                safe(r["arm"]),
                safe(r["case_id"]),
                str(r["repeat"]),
                safe(r["procedure_source"]),
                "right"
                if r["target_skill_in_prompt"]
                else "wrong"
                if r["skills_in_prompt"]
                else f"none: {safe(r['selection'])}"
                if r.get("selection")
                else "none",
                "ok" if r["workflow_accuracy"] else "miss",
                "ok" if r["answer_accuracy"] else "miss",
                f"{r['total_tokens']:.0f}",
                str(r["raw_workflows_in_prompt"]),
                "yes" if r["developer_message"] else "",
                safe(r["vs_baseline"] or ""),
                safe(r["vs_no_memory"] or ""),
            )
        console.print(per_case)


@app.command("eval")
def eval_cmd(
    provider: Annotated[
        Literal["offline", "openai", "anthropic"] | None,
        typer.Option("--provider", help="Model provider (default $SKILLFLOW_EVAL_PROVIDER or offline)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name (default $SKILLFLOW_EVAL_MODEL).")] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", min=1, max=20, help="Runs per (case, arm).")] = None,
    cases: Annotated[int | None, typer.Option("--cases", min=1, max=50, help="Held-out requests per intent.")] = None,
    min_similarity: Annotated[
        float | None,
        typer.Option(
            "--min-similarity", help="Lower bound of the arms' fitted rule (default: production's 0.70; not a bypass)."
        ),
    ] = None,
    phrasing: Annotated[
        Literal["held_out", "seen"] | None,
        typer.Option("--phrasing", help="held_out (default): templates training never used; seen: its own."),
    ] = None,
    embedder: Annotated[
        Literal["minilm", "hashing", "openai"] | None,
        typer.Option("--embedder", help="Applicability embedder (default $SKILLFLOW_EMBEDDER)."),
    ] = None,
    show_cases: Annotated[bool, typer.Option("--show-cases", help="Also print the per-case table.")] = False,
    json: JsonOption = False,
) -> None:
    """Run the evaluation arms on the simulator and print per-arm metrics, deltas and invariants."""
    from skillflow.lab.evaluation.eval_env import EvaluationConfigError, load_eval_settings
    from skillflow.lab.evaluation.harness import run_evaluation

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "provider": provider,
            "model": model,
            "repeats": repeats,
            "cases": cases,
            "min_similarity": min_similarity,
            "embedder": embedder,
            "phrasing": phrasing,
        }.items()
        if v is not None
    }
    try:
        settings = load_eval_settings(**overrides)
        if json:
            result = run_evaluation(settings, strict=False)
        else:
            columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console, transient=True) as bar:
                task = bar.add_task("eval", total=None)
                result = run_evaluation(
                    settings, strict=False, progress=lambda done, total: bar.update(task, completed=done, total=total)
                )
    except EvaluationConfigError as exc:
        fail(str(exc))
        return
    summary = result.summary()
    if json:
        print_json({**summary, "results": result.case_rows()})
    else:
        console.print(f"[bold yellow]{safe(result.label)}[/bold yellow]")
        _tables(summary, result.case_rows(), show_cases)
        for note in summary["notes"]:
            console.print(f"- {safe(note)}")
        console.print(f"[bold yellow]{safe(result.label)}[/bold yellow]  ({summary['seconds']} s)")
    if not summary["all_checks_passed"]:
        raise typer.Exit(1)
