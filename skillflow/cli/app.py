"""The Typer application and the options every command shares."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from typer.core import TyperGroup

from skillflow.cli.errors import CliError, checked_database_url, explain, stdout_closed
from skillflow.cli.terminal import safe
from skillflow.kernel.config import (
    CONFIG_PATH_ENV,
    DEFAULTS,
    HOME_ENV,
    PROJECT_CONFIG,
    PromotionConfig,
    Settings,
    load_promotion_config,
    pinned_environment,
)
from skillflow.storage.engine import make_engine, recordable_url
from skillflow.storage.types import dumps

# No emoji codes: an untrusted ``:skull:`` stays text (every untrusted value goes through terminal.safe).
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


class SkillflowGroup(TyperGroup):
    """Runs a command; an expected failure is one ``error:`` line on stderr (docs/RELIABILITY.md)."""

    def invoke(self, ctx: Any) -> Any:  # the Context class of the installed click or typer
        quiet = _ExpectedFailureTracebacks()
        flow_runs = logging.getLogger("prefect.flow_runs")
        if not _debug(ctx):
            flow_runs.addFilter(quiet)
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except BrokenPipeError:  # a ConnectionError, but no connection failed: the reader of stdout left
            raise typer.Exit(stdout_closed()) from None
        except Exception as exc:
            error = explain(exc)
            if error is None or _debug(ctx):
                raise
            err_console.print(f"[red]error:[/red] {safe(error.message)}", soft_wrap=True)
            raise typer.Exit(error.code) from None
        finally:
            flow_runs.removeFilter(quiet)


class _ExpectedFailureTracebacks(logging.Filter):
    """Drops the traceback Prefect's flow engine logs with a flow run's exception when the command will state that
    exception as its one ``error:`` line (:func:`explain`): a failed partition printed 17 lines of Prefect's frames
    before it. Prefect's own line stays; a bug keeps its traceback, and ``--debug`` shows every one."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and explain(exc) is not None:
            record.exc_info = None
            record.exc_text = None
        return True


def _debug(ctx: Any) -> bool:
    if ctx.params.get("debug"):
        return True
    try:
        return Settings().debug
    except ValueError:  # a bad SKILLFLOW_ variable is itself the error being reported
        return False


app = typer.Typer(
    name="skillflow",
    help="Turn an agent's successful tool-calling runs into reviewed, monitored skills.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=SkillflowGroup,
)


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of a failure (also SKILLFLOW_DEBUG=1).")
    ] = False,
) -> None:
    """Turn an agent's successful tool-calling runs into reviewed, monitored skills."""


bench_app = typer.Typer(help="Measure performance (figures go to docs/BENCHMARKS.md).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $SKILLFLOW_DATABASE_URL or sqlite:///.skillflow/skillflow.db)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
AgentOption = Annotated[str | None, typer.Option("--agent-id", help="Only this agent.")]
UserOption = Annotated[str | None, typer.Option("--user-id", help="Only this user.")]


database_url = checked_database_url  # ``--db`` or ``$SKILLFLOW_DATABASE_URL``, checked: one-line error


@contextmanager
def flow_database(url: str) -> Iterator[str | None]:
    """The ``database_url`` a flow run this command starts in process may record: ``None`` when ``url`` carries a
    password (the Prefect server stores every run's parameters and shows them in its UI, docs/guide/ops.md,
    "Secrets"); the run then reads ``$SKILLFLOW_DATABASE_URL``, pinned to ``url`` while the block runs."""
    with pinned_environment({"SKILLFLOW_DATABASE_URL": url}):
        yield recordable_url(url)


def promotion_config(overrides: dict[str, Any] | None = None) -> PromotionConfig:
    """The config of a command that writes skills; one warning line when no config file was found."""
    config = load_promotion_config(overrides=overrides)
    if config.source == DEFAULTS:
        landing = "SHADOW" if config.require_shadow else "ACTIVE, without review"
        err_console.print(
            f"[yellow]warning:[/yellow] no config file found (no {CONFIG_PATH_ENV}, no {HOME_ENV}, no "
            f"{PROJECT_CONFIG} in {safe(Path.cwd())} or above): built-in defaults apply"
            f"{' with the --set overrides' if overrides else ''} "
            f"(require_shadow={config.require_shadow}: new skills land {landing}; no schedules)",
            soft_wrap=True,
        )
    return config


def engine_for(db: str | None, migrate: bool = False) -> Engine:
    """An engine for ``--db``, after the schema check (exit 2 naming ``skillflow migrate`` when behind).

    Only ``migrate``, ``serve``, ``deploy`` and ``demo`` pass ``migrate=True``: no other command changes the schema,
    and none other creates a SQLite file (exit 2 naming the path: a mistyped one would be left behind, empty).
    """
    from skillflow.storage.migrations import SchemaOutdated, require_current
    from skillflow.storage.migrations import migrate as run_migrations

    url = database_url(db)
    if not migrate:
        _require_sqlite_file(url)
    engine = make_engine(url)
    if migrate:
        run_migrations(engine)
        return engine
    try:
        require_current(engine)
    except SchemaOutdated as exc:
        engine.dispose()
        fail(str(exc))
    return engine


def _require_sqlite_file(url: str) -> None:
    """Fail when ``url`` names a SQLite file that does not exist: opening it would create it and its folders."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or parsed.query.get("uri"):
        return  # another database, an in-memory one, or a ``file:`` URI whose mode SQLite reads
    if not Path(database).exists():
        fail(
            f"database file {Path(database).absolute()} does not exist: check the path, or create it with "
            f"`skillflow migrate --db {url}`"
        )


def print_json(value: Any) -> None:
    typer.echo(json.dumps(json.loads(dumps(value)), indent=2, sort_keys=True))


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop with one error line on stderr (the error layer's format) and ``code``."""
    raise CliError(message, code)
