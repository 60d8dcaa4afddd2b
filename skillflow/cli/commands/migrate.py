"""``skillflow migrate``: apply the numbered migrations, or print the Oracle files for a DBA."""

from __future__ import annotations

from typing import Annotated

import typer

from skillflow.cli.app import DbOption, JsonOption, app
from skillflow.cli.entry import run_migrate

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
    code = run_migrate(db, json_out, print_oracle)  # the same command an agent-only install runs (cli/entry.py)
    if code:
        raise typer.Exit(code)
