"""The ``skillflow`` console script: the whole CLI with the ``pipeline`` extra, ``skillflow migrate`` without it.

An agent-only install (README, "Installing") has no typer, and its runtime refuses a database without the
schema, naming ``skillflow migrate``: so that one command runs there too (the same migrations, ``--db``,
``--json``, ``--print-oracle``). Any other command says in one line which extra it needs (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence

EXTRA = "pip install '.[pipeline]' in the skillflow checkout (README, \"Installing\")"


def main(argv: Sequence[str] | None = None) -> int | None:
    """Run the CLI; without the pipeline's modules, :func:`agent_only`."""
    from skillflow import cli

    if cli.missing:
        return agent_only(list(sys.argv[1:] if argv is None else argv), cli.missing)
    cli.app(args=None if argv is None else list(argv), prog_name="skillflow")
    return None


def agent_only(argv: list[str], missing: str) -> int:
    """``skillflow migrate`` with the base install; any other command: one ``error:`` line naming the extra."""
    parser = argparse.ArgumentParser(
        prog="skillflow",
        description=f"This install has no pipeline (no module {missing!r}): only `skillflow migrate` runs here. "
        f"The whole CLI: {EXTRA}.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="Show the traceback of a failure (also SKILLFLOW_DEBUG=1)."
    )
    sub = parser.add_subparsers(dest="command", metavar="migrate")
    mig = sub.add_parser(
        "migrate", help="Apply pending schema migrations (recorded in schema_migrations; safe to re-run)."
    )
    mig.add_argument("--db", default=None, help="Database URL (default: $SKILLFLOW_DATABASE_URL).")
    mig.add_argument("--json", dest="json_out", action="store_true", help="Print JSON.")
    mig.add_argument("--print-oracle", action="store_true", help="Print the Oracle scripts and touch no database.")
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command != "migrate":
        return _error(f"`skillflow {command}` needs the pipeline extra (no module {missing!r}): {EXTRA}; "
                      "this install runs `skillflow migrate` only")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command != "migrate":
        parser.print_help()
        return 0
    try:
        return run_migrate(args.db, args.json_out, args.print_oracle)
    except BrokenPipeError:  # the reader of stdout left (`| head`): not an error (skillflow/cli/errors.py)
        from skillflow.cli.errors import stdout_closed

        return stdout_closed()
    except Exception as exc:  # an expected failure is one line, a bug keeps its traceback
        from skillflow.cli.errors import explain
        from skillflow.kernel.config import Settings

        error = explain(exc)
        if error is None or args.debug or Settings().debug:
            raise
        return _error(error.message, error.code)


def run_migrate(db: str | None, json_out: bool, print_oracle: bool) -> int:
    """``skillflow migrate``, for both front-ends (skillflow/cli/commands/migrate.py and :func:`agent_only`):
    apply the pending migrations and list them, or print the Oracle scripts for a DBA and touch no database."""
    from sqlalchemy.engine import make_url

    from skillflow.cli.errors import CliError, checked_database_url
    from skillflow.storage.migrations import migrate_database
    from skillflow.storage.oracle_files import migration_files

    if print_oracle:
        try:
            files = migration_files()
        except FileNotFoundError as err:
            raise CliError(str(err)) from err
        for path in files:
            print(f"-- ===== {path.name} =====\n{path.read_text(encoding='utf-8').rstrip()}\n")
        return 0
    url = checked_database_url(db)
    done: list[str] = []

    def applied_one(name: str) -> None:  # committed: said at once, so an interrupted run has said what it applied
        done.append(name)
        if not json_out:
            with contextlib.suppress(OSError):  # a reader gone (`| head -1`) stops the output, never the migrations
                print(f"applied  {name}", flush=True)

    try:
        applied, current = migrate_database(url, applied_one)
    except KeyboardInterrupt:
        print(
            f"error: interrupted after {len(done)} migration{'' if len(done) == 1 else 's'} "
            f"{'was' if len(done) == 1 else 'were'} applied{': ' + ', '.join(done) if done else ''}; each applied "
            "one is committed and the one in progress was not recorded; run `skillflow migrate` again to apply the "
            "rest (every migration is re-runnable)",
            file=sys.stderr,
        )
        return 130
    if json_out:
        database = make_url(url).render_as_string(hide_password=True)
        print(json.dumps({"applied": applied, "current": current, "database": database}, indent=2, sort_keys=True))
        return 0
    for name in current:
        print(f"current  {name}")
    print(f"{len(applied)} applied, {len(current)} already current")
    return 0


def _error(message: str, code: int = 2) -> int:
    from skillflow.cli.terminal import visible

    print(f"error: {visible(' '.join(message.split()))}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
