"""Ctrl-C during ``skillflow migrate`` says what was applied and that a re-run finishes (an outside audit: it said
nothing, so an operator could not tell whether the schema was half-migrated)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import Connection
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.storage import migrations


def _interrupt_at_the_third(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Ctrl-C while the third migration runs; the names of the first two."""

    def stop(conn: Connection) -> None:
        raise KeyboardInterrupt

    known = list(migrations.MIGRATIONS)
    monkeypatch.setattr(migrations, "MIGRATIONS", [*known[:2], replace(known[2], apply=stop), *known[3:]])
    return [m.name for m in known[:2]]


def test_an_interrupted_migrate_names_what_it_applied_and_a_rerun_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    first = _interrupt_at_the_third(monkeypatch)
    result = CliRunner().invoke(app, ["migrate", "--db", db])
    assert result.exit_code == 130, (result.output, result.exception)
    assert [line for line in result.stdout.splitlines() if line.startswith("applied")] == [
        f"applied  {name}" for name in first
    ]
    err = result.stderr
    assert "interrupted after 2 migrations were applied" in err and "skillflow migrate" in err, err
    assert migrations.applied_versions(migrations_engine(db)) == {m.version for m in migrations.MIGRATIONS[:2]}

    monkeypatch.undo()
    again = CliRunner().invoke(app, ["migrate", "--db", db])
    assert again.exit_code == 0, again.output
    assert f"{len(migrations.MIGRATIONS) - 2} applied, 2 already current" in again.stdout


def test_an_interrupted_migrate_in_json_says_so_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    _interrupt_at_the_third(monkeypatch)
    result = CliRunner().invoke(app, ["migrate", "--db", db, "--json"])
    assert result.exit_code == 130 and result.stdout == "", result.output
    assert "interrupted after 2 migrations were applied" in result.stderr


def migrations_engine(url: str) -> object:
    from skillflow.storage.engine import make_engine

    return make_engine(url)


def test_a_reader_that_leaves_after_the_first_line_stops_no_migration(tmp_path: Path) -> None:
    """Each ``applied`` line is printed as its migration commits: ``skillflow migrate | head -1`` must still apply
    them all (a closed pipe stops the output, never the migrations)."""
    import sys

    from skillflow.storage.engine import make_engine
    from tests.support import first_line_then_leave

    db = f"sqlite:///{tmp_path / 'x.db'}"
    line, code, stderr = first_line_then_leave(
        [sys.executable, "-m", "skillflow.cli.main", "migrate", "--db", db], cwd=tmp_path
    )
    assert line.startswith(b"applied  001_"), line
    assert code in (0, 141) and stderr == b"", stderr.decode()
    assert migrations.applied_versions(make_engine(db)) == {m.version for m in migrations.MIGRATIONS}
