"""``skillflow ingest``, ``skillflow simulate`` and ``skillflow hash``."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skillflow.cli.app import DbOption, JsonOption, app, console, engine_for, fail, print_json
from skillflow.cli.terminal import safe
from skillflow.kernel import canonical
from skillflow.kernel.config import load_promotion_config
from skillflow.lab import simulator
from skillflow.lab.ingest import api_bank, tau_bench, toolbench
from skillflow.lab.ingest.common import DEFAULT_USER_ID, IngestReport
from skillflow.runtime import Skillflow

progress_console = Console(stderr=True, emoji=False)


class Source(enum.StrEnum):
    TAU_BENCH = "tau-bench"
    TOOLBENCH = "toolbench"
    API_BANK = "api-bank"


class UnitOption(enum.StrEnum):
    CONVERSATION = "conversation"
    TURN = "turn"


class Outcome(enum.StrEnum):
    EXECUTION = "execution"
    REWARD = "reward"


DEFAULT_AGENTS = {
    Source.TAU_BENCH: tau_bench.DEFAULT_AGENT_ID,
    Source.TOOLBENCH: toolbench.DEFAULT_AGENT_ID,
    Source.API_BANK: api_bank.DEFAULT_AGENT_ID,
}


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar on stderr; yields a ``(done, total)`` callback."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=progress_console, disable=not enabled, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _print_report(values: dict[str, Any], title: str) -> None:
    table = Table(title=title, show_header=False)
    for key, value in values.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) or "-"
        elif isinstance(value, list):
            value = f"{len(value)} ({', '.join(map(str, value[:8]))}{', …' if len(value) > 8 else ''})"
        table.add_row(safe(key), safe(value))
    console.print(table)


@app.command("ingest")
def ingest(
    source: Annotated[Source, typer.Argument(help="Corpus format.")],
    path: Annotated[Path, typer.Argument(help="Corpus file or folder.", exists=True)],
    agent_id: Annotated[
        str | None,
        typer.Option("--agent-id", help="Agent of the runs (default: tau-bench-airline, toolbench or api-bank)."),
    ] = None,
    user_id: Annotated[
        str, typer.Option("--user-id", help="Tenant partition all runs go to (one shared user: classes aggregate).")
    ] = DEFAULT_USER_ID,
    outcome: Annotated[
        Outcome,
        typer.Option("--outcome", help="execution: the tool-loop outcome; reward: the corpus label via an evaluator."),
    ] = Outcome.EXECUTION,
    unit: Annotated[
        UnitOption | None,
        typer.Option(
            "--unit",
            help="tau-bench only: conversation (default; one run per procedure anchored on state-changing calls) "
            "or turn (one run per user turn).",
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a public trajectory corpus through the capture API (idempotent: run ids are deterministic per tenant).

    Exits 1 when the file held runs but none was stored (the reasons are printed).
    """
    if source is Source.API_BANK and outcome is Outcome.REWARD:
        fail("api-bank has no success labels; use --outcome execution")
    if unit is not None and source is not Source.TAU_BENCH:
        fail(f"--unit applies to tau-bench only; {source.value} runs are one per sample")
    sf = Skillflow(agent_id=agent_id or DEFAULT_AGENTS[source], engine=engine_for(db))
    report: IngestReport
    try:
        with progress_bar(f"ingest {source.value}", enabled=not as_json) as update:
            if source is Source.TAU_BENCH:
                report = tau_bench.ingest_tau_bench(
                    path, sf, outcome.value, user_id, progress=update, unit=(unit or UnitOption.CONVERSATION).value
                )
            elif source is Source.TOOLBENCH:
                report = toolbench.ingest_toolbench(path, sf, outcome.value, user_id, progress=update)
            else:
                report = api_bank.ingest_api_bank(path, sf, user_id, progress=update)
    except (ValueError, OSError) as exc:
        fail(f"cannot read {source.value} corpus: {exc}")
    if as_json:
        print_json(report.as_dict())
    else:
        _print_report(report.as_dict(), f"ingest {source.value}")
    if report.runs and not report.stored:
        reasons = ", ".join(f"{reason} ({n})" for reason, n in report.rejected.most_common(3)) or "none given"
        fail(f"stored none of the {report.runs} runs in {path.name}: {reasons}")


def _load_document(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    except (ValueError, UnicodeDecodeError) as exc:
        fail(f"{path} is not valid JSON: {exc}")
    if isinstance(doc, list):  # a bare list of steps
        doc = {"steps": doc}
    if not isinstance(doc, dict) or "steps" not in doc:
        fail(f"{path}: expected a run document with 'steps' (a 'Step N: tool' mapping or a list of steps)")
    return dict(doc)


@app.command("hash")
def hash_run(
    run_file: Annotated[Path, typer.Argument(metavar="RUN.json", help="A run document (upstream or project shape).")],
    as_json: JsonOption = False,
) -> None:
    """Print a run's canonical signature (units) and hash."""
    doc = _load_document(run_file)
    try:
        steps = canonical.steps_from_document(doc)
    except (ValueError, TypeError, AttributeError) as exc:
        fail(f"{run_file}: {exc}")
    units = canonical.signature(steps, load_promotion_config().noop_tools)
    chash = canonical.canonical_hash(units)
    if as_json:
        print_json(
            {
                "units": [
                    {**u.as_hashable(), "error_class": u.error_class, "retry_count": u.retry_count} for u in units
                ],
                "signature": json.loads(canonical.signature_json(units)),
                "canonical_hash": chash,
                "tool_sequence": canonical.tool_sequence(units),
                "steps": len(steps),
            }
        )
        return
    table = Table(title=f"signature ({len(steps)} steps → {len(units)} units)")
    for column in ("#", "tool", "arg_keys", "errored", "error_class", "retries"):
        table.add_column(column)
    for i, u in enumerate(units, start=1):
        cells = (safe(u.tool), safe(", ".join(u.arg_keys)), str(u.errored), safe(u.error_class or ""))
        table.add_row(str(i), *cells, str(u.retry_count))
    console.print(table)
    console.print(f"canonical_hash: {chash}" if chash else "canonical_hash: none (empty signature: no identity)")


class BreakModeOption(enum.StrEnum):
    ERROR = "error"
    WRONG = "wrong"


@app.command("simulate")
def simulate(
    runs: Annotated[int, typer.Option("--runs", min=1, max=1_000_000, help="How many runs to generate.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same runs).")] = 0,
    agent_id: Annotated[str, typer.Option("--agent-id", help="Agent the runs belong to.")] = simulator.DEFAULT_AGENT_ID,
    user_id: Annotated[str, typer.Option("--user-id", help="Tenant partition of the runs.")] = DEFAULT_USER_ID,
    break_tool: Annotated[
        str | None,
        typer.Option("--break-tool", help="Tool that starts failing (drift), e.g. cancel_reservation."),
    ] = None,
    break_after: Annotated[
        int, typer.Option("--break-after", min=0, help="Run index from which --break-tool fails.")
    ] = 0,
    break_mode: Annotated[
        BreakModeOption,
        typer.Option("--break-mode", help="error: the tool raises; wrong: it answers but does nothing."),
    ] = BreakModeOption.ERROR,
    business: Annotated[
        bool,
        typer.Option(
            "--business-outcome/--execution-outcome",
            help="Judge runs with the simulator's business outcome (default) or the plain tool-loop outcome.",
        ),
    ] = True,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Generate runs of the simulated airline/orders agent and store them through the capture API."""
    if break_tool is not None and break_tool not in simulator.Tools.NAMES:
        fail(f"unknown tool {break_tool!r}; choose one of: {', '.join(simulator.Tools.NAMES)}")
    sf = Skillflow(
        agent_id=agent_id,
        engine=engine_for(db),
        workflow_outcome_evaluator=simulator.business_outcome if business else None,
    )
    with progress_bar("simulate", enabled=not as_json) as update:
        report = simulator.simulate_runs(
            sf,
            runs,
            seed,
            user_id=user_id,
            break_tool=(break_tool, break_after) if break_tool else None,
            break_mode=break_mode.value,  # type: ignore[arg-type]  # the enum values are the literals
            progress=update,
        )
    values = {"agent_id": agent_id, "user_id": user_id, "seed": seed, **report.as_dict()}
    if as_json:
        print_json(values)
    else:
        _print_report(values, "simulate")
