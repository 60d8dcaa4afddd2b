"""The Typer application and the options every command shares."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from sqlalchemy import Engine

from skillflow.kernel.config import Settings
from skillflow.storage.engine import make_engine
from skillflow.storage.types import dumps

app = typer.Typer(
    name="skillflow",
    help="Turn an agent's successful tool-calling runs into reviewed, monitored skills.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Measure performance (figures go to docs/BENCHMARKS.md).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
console = Console()

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $SKILLFLOW_DATABASE_URL or sqlite:///.skillflow/skillflow.db)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
AgentOption = Annotated[str | None, typer.Option("--agent-id", help="Only this agent.")]
UserOption = Annotated[str | None, typer.Option("--user-id", help="Only this user.")]


def database_url(db: str | None) -> str:
    return db or Settings().database_url


def engine_for(db: str | None, migrate: bool = False) -> Engine:
    """An engine for ``--db``, after the schema check (exit 2 naming ``skillflow migrate`` when behind).

    Only ``migrate``, ``serve`` and ``demo`` pass ``migrate=True``: no other command changes the schema.
    """
    from skillflow.storage.migrations import SchemaOutdated, require_current
    from skillflow.storage.migrations import migrate as run_migrations

    engine = make_engine(database_url(db))
    if migrate:
        run_migrations(engine)
        return engine
    try:
        require_current(engine)
    except SchemaOutdated as exc:
        engine.dispose()
        fail(str(exc))
    return engine


def print_json(value: Any) -> None:
    typer.echo(json.dumps(json.loads(dumps(value)), indent=2, sort_keys=True))


def fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)
