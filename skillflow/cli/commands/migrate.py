"""``skillflow migrate``: apply the numbered migrations, or print the Oracle files for a DBA."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.engine import make_url

from skillflow.cli.app import DbOption, JsonOption, app, console, database_url, fail, print_json
from skillflow.storage.migrations import migrate_database
from skillflow.storage.oracle_files import migration_files

PrintOracleOption = Annotated[
    bool,
    typer.Option(
        "--print-oracle",
        help="Print sql/oracle/001…003 in order (for a DBA to run with SQL*Plus or SQLcl) and touch no database.",
    ),
]


@app.command("migrate")
def migrate_command(db: DbOption = None, json_out: JsonOption = False, print_oracle: PrintOracleOption = False) -> None:
    """Apply pending schema migrations (recorded in schema_migrations; safe to re-run)."""
    if print_oracle:
        try:
            files = migration_files()
        except FileNotFoundError as err:
            fail(str(err))
            return
        for path in files:
            typer.echo(f"-- ===== {path.name} =====")
            typer.echo(path.read_text(encoding="utf-8").rstrip())
            typer.echo("")
        return
    url = database_url(db)
    applied, current = migrate_database(url)
    if json_out:
        print_json(
            {"database": make_url(url).render_as_string(hide_password=True), "applied": applied, "current": current}
        )
        return
    for name in applied:
        console.print(f"applied  {name}")
    for name in current:
        console.print(f"current  {name}")
    console.print(f"{len(applied)} applied, {len(current)} already current")
