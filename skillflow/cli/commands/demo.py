"""``skillflow demo``: run the whole loop end to end on a fresh database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from skillflow.cli.app import app


@app.command("demo")
def demo_command(
    db: Annotated[
        str, typer.Option("--db", help="Database URL; a demo's SQLite file is recreated, another file refused.")
    ] = "sqlite:///.skillflow/demo.db",
    corpus: Annotated[
        Path | None, typer.Option("--corpus", help="τ-bench gpt-4o-airline.json to ingest instead of simulating.")
    ] = None,
) -> None:
    """Run the whole loop: runs → cycle → shadow → readiness → activation → injection → drift → v2 → quality."""
    from skillflow.cli.demo import run

    if corpus is not None and not corpus.is_file():
        raise typer.BadParameter(f"{corpus} is not a file", param_hint="--corpus")
    run(db, corpus)
