"""``skillflow bench agent``: a fresh agent process's first ``prepare`` — wall time, peak RSS, modules loaded."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from skillflow.cli.app import JsonOption, bench_app, console, fail, print_json


@bench_app.command("agent")
def bench_agent(
    embedder: Annotated[str, typer.Option("--embedder", help="minilm (default model), hashing or openai.")] = "minilm",
    calls: Annotated[int, typer.Option("--calls", min=1, help="Timed prepare() calls after the first.")] = 50,
    json: JsonOption = False,
) -> None:
    """First prepare() of a fresh process (imports included) for a tenant with a live skill and one without."""
    from skillflow.lab.bench.agent_bench import TARGET_FIRST_S, TARGET_RSS_MB, run

    if embedder not in ("minilm", "hashing", "openai"):
        fail("--embedder must be minilm, hashing or openai")
    rows = run(embedder, calls)
    if json:
        print_json({"processes": [r.as_dict() for r in rows]})
        return
    table = Table(title=f"a fresh agent process ({embedder}): targets ≤ {TARGET_FIRST_S:g} s, ≤ {TARGET_RSS_MB:g} MB")
    for col in ("tenant", "launch→prepared s", "import s", "first prepare s", "peak RSS MB", "modules"):
        table.add_column(col, justify="right")
    table.add_column("later p50 / p95 ms", justify="right")
    table.add_column("heavy modules loaded")
    for r in rows:
        table.add_row(
            "live skill" if r.live else "no skill", f"{r.since_launch_s:.2f}", f"{r.import_s:.2f}",
            f"{r.first_prepare_s:.2f}", f"{r.rss_after_prepare_mb:.0f}", str(r.modules_after_prepare),
            f"{r.later_p50_ms:.2f} / {r.later_p95_ms:.2f}", ", ".join(r.heavy_loaded) or "none",
        )  # fmt: skip
    console.print(table)
    met = all(r.meets_targets for r in rows)
    console.print("targets met" if met else "[yellow]targets NOT met[/yellow]")
