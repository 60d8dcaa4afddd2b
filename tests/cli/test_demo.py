"""``skillflow demo`` runs the whole loop on a fresh database (what ``make demo`` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillflow.cli.errors import CliError


@pytest.mark.slow
def test_demo_runs_the_whole_loop(tmp_path: Path) -> None:
    # No config file (a pip install run from any folder): the demo pins the settings of the path it shows; before,
    # it found require_shadow off, promoted straight to ACTIVE and stopped at step 3 with exit code 0.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SKILLFLOW_CONFIG", "SKILLFLOW_HOME"))},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "COLUMNS": "160",
    }
    env.pop("PREFECT_API_URL", None)
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "skillflow.cli.main", "demo", "--db", db],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:] + out[-3000:]
    assert "[12/12] status" in out and "demo finished" in out
    # The activation refits the rule at once; the multi-turn conversation gets its skill just before the
    # write (select_skills' reason "injected"), and the unrelated requests get none.
    assert "applicability rule refit right after the activation: 1 live skill(s), injects=True" in out
    assert "150 conversations" in out and "procedure runs via record_conversation" in out
    conv = out.split('sf.prepare("yes, please proceed"', 1)[1].split("sf.prepare(", 1)[0]
    assert "→ cancel-reservation v1 (score " in conv and "state current, reason 'injected'" in conv
    for other in ("baggage allowance for a pet", "weather going to be like in Paris"):
        line = out.split(other, 1)[1].split("\n")[1]
        assert "→ no skill; select_skills: state current" in line, line
    assert "business outcome evaluator: success rate" in out and "ineligible (success_rate" in out
    assert "cancel-reservation v1 — shadow, role user" in out
    assert "skills rendered: cancel-reservation" in out
    assert "demoted — drift: rolling" in out
    assert "cancel-reservation v2: shadow" in out
    assert "passed=True" in out and "HTML report:" in out
    assert (tmp_path / "demo.db").is_file()
    assert "\\n" not in out  # a line break printed as a backslash and an "n" (the rule's line after the activation)
    assert_whole_file(tmp_path / "demo.db")


def assert_whole_file(path: Path) -> None:
    """Once the demo has exited, its SQLite file holds every row: nothing is left in the write-ahead log, so a copy
    of the file alone is the whole database (a copy lost the last skill)."""
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0, f"{wal.stat().st_size} bytes still in {wal.name}"


def test_the_demo_refuses_a_database_that_is_not_a_demo_s(tmp_path: Path) -> None:
    """`skillflow demo --db X` deleted any SQLite file X (found walking the README); it recreates only a demo's."""
    from typer.testing import CliRunner

    from skillflow.cli import app
    from skillflow.cli.demo import _fresh_database
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    real = tmp_path / "real.db"
    engine = make_engine(f"sqlite:///{real}")
    migrate(engine)
    assert Skillflow(agent_id="support", engine=engine, spool_dir=tmp_path).record_run("q", "u", [{"tool": "t"}]).stored
    engine.dispose()
    result = CliRunner().invoke(app, ["demo", "--db", f"sqlite:///{real}"])
    assert result.exit_code == 2 and "not the demo's" in result.stderr and real.stat().st_size > 0
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database")
    with pytest.raises(CliError, match="not the demo's"):
        _fresh_database(f"sqlite:///{notes}")
    assert notes.read_text() == "not a database"
    demo = tmp_path / "demo.db"
    engine = make_engine(f"sqlite:///{demo}")
    migrate(engine)
    assert (
        Skillflow(agent_id="sim-airline", engine=engine, spool_dir=tmp_path)
        .record_run("q", "u", [{"tool": "t"}])
        .stored
    )
    engine.dispose()
    _fresh_database(f"sqlite:///{demo}")
    assert not demo.exists()


@pytest.mark.postgres
def test_the_demo_refuses_a_server_database_that_holds_any_data(tmp_path: Path, pg_schema_url: str) -> None:
    """A server database cannot be recreated as the demo's SQLite file is: `skillflow demo --db postgresql://…`
    wrote its simulated tenants into a database holding real ones, ran its flows over every tenant there, and on a
    second run printed a walkthrough of things that did not happen (an outside audit). It runs only on an empty
    database or schema now, and refuses one holding any skillflow row, the demo's own included."""
    from typer.testing import CliRunner

    from skillflow.cli import app
    from skillflow.cli.demo import _fresh_database
    from skillflow.runtime import Skillflow
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    _fresh_database(pg_schema_url)  # empty: nothing to refuse
    engine = make_engine(pg_schema_url)
    migrate(engine)
    _fresh_database(pg_schema_url)  # migrated, no rows: still empty
    for agent in ("sim-airline", "support"):  # a demo's earlier run, then a real tenant
        assert Skillflow(agent_id=agent, engine=engine, spool_dir=tmp_path).record_run("q", "u", [{"tool": "t"}]).stored
        with pytest.raises(CliError, match="already holds skillflow data"):
            _fresh_database(pg_schema_url)
    result = CliRunner().invoke(app, ["demo", "--db", pg_schema_url])
    assert result.exit_code == 2 and "already holds skillflow data" in result.stderr
    with engine.connect() as conn:
        from sqlalchemy import func, select

        from skillflow.storage.schema import workflow_memory

        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar() == 2
    engine.dispose()


def test_the_demo_restores_the_environment_it_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo pins require_shadow while it runs; a process that ran it (a test worker, a notebook) keeps its own
    settings after, even when the demo stops early. Before, the setting leaked into the rest of the process."""
    from typer.testing import CliRunner

    from skillflow.cli import app
    from skillflow.cli.demo import DEMO_SETTINGS
    from skillflow.kernel.config import load_promotion_config

    monkeypatch.chdir(tmp_path)
    for key in DEMO_SETTINGS:
        monkeypatch.delenv(key, raising=False)
    real = tmp_path / "real.db"
    real.write_text("not a database")
    result = CliRunner().invoke(app, ["demo", "--db", f"sqlite:///{real}"])
    assert result.exit_code == 2 and "not the demo's" in result.stderr
    assert not any(key in os.environ for key in DEMO_SETTINGS)
    assert load_promotion_config().require_shadow is False


def _corpus_demo(db: str, corpus: Path, tmp_path: Path) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SKILLFLOW_CONFIG", "SKILLFLOW_HOME"))},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "COLUMNS": "160",
    }
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "skillflow.cli.main", "demo", "--db", db, "--corpus", str(corpus)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc.stdout


def _outcome_runs(db: str) -> dict[str, int]:
    from sqlalchemy import func, select

    from skillflow.storage.engine import make_engine
    from skillflow.storage.schema import workflow_memory as wm

    engine = make_engine(db)
    with engine.connect() as conn:
        rows = conn.execute(select(wm.c.outcome_source, func.count()).group_by(wm.c.outcome_source)).all()
    engine.dispose()
    return {str(source): int(n) for source, n in rows}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_corpus_demo_compares_both_outcomes_in_the_database_it_is_given(
    backend: str, tau_bench_path: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """`make demo CORPUS=…` (README): both outcomes' runs land in the database given. On PostgreSQL the second pass
    refused its own first pass's rows ("already holds skillflow data"), and the execution pass's URL was the given
    one with ".db" replaced anywhere in it (a host such as db.example.com)."""
    db = f"sqlite:///{tmp_path / 'demo.db'}" if backend == "sqlite" else request.getfixturevalue("pg_schema_url")
    out = _corpus_demo(db, tau_bench_path, tmp_path)
    if backend == "sqlite":  # before anything here opens it (the last connection to close folds the log in)
        assert_whole_file(tmp_path / "demo.db")
    panel = out.split("per-turn procedures on τ-bench", 1)[1]
    assert "cancel_reservation: execution outcome" in panel and "episode reward as evaluator" in panel
    assert "demo finished" in out
    sources = _outcome_runs(db)
    assert sources.get("execution", 0) > 0 and sources.get("given", 0) > 0, sources
    assert sorted(p.name for p in tmp_path.glob("*.db")) == (["demo.db"] if backend == "sqlite" else [])
