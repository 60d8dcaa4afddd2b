"""A handle that started while its database did not answer checks the schema when the database comes back
(an upgrade audit, 2026-12-06).

Its start-up check (``require_current``) was put off by the outage and never made: when the database came back
still at an older release's level (``skillflow migrate`` not run yet), each run failed on a missing column and,
on PostgreSQL, was neither stored nor spooled (``capture failed: ProgrammingError``), so the replay after the
migration had nothing to bring back. Now the first contact makes the check: a database behind spools the run
(named in the log with the command), and the replay after the migration stores it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import skillflow.runtime as runtime
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory

STEPS = [{"tool": "get_user_details", "arguments": {"user_id": "u1"}, "result": {"ok": True}}]


def test_a_run_met_by_an_unmigrated_database_after_an_outage_spools_and_replays(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db_url)  # an empty database: no migration applied
    real = runtime.require_current

    def unreachable(_: object) -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(runtime, "require_current", unreachable)
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "0")
    sf = Skillflow(agent_id="agent", engine=engine, spool_dir=tmp_path / "spool")
    monkeypatch.setattr(runtime, "require_current", real)  # the database is back, at no schema yet

    result = sf.record_run("cancel my reservation", "alice", STEPS, run_id="late-1")
    assert not result.stored and result.spooled, result
    assert "skillflow migrate" in caplog.text
    again = sf.record_run("cancel it please", "alice", STEPS, run_id="late-2")
    assert again.spooled  # until the migration: every run spools

    migrate(engine)
    assert sf.replay_spool() == 2
    with engine.connect() as conn:
        assert sorted(conn.execute(select(workflow_memory.c.id)).scalars()) == ["late-1", "late-2"]
    after = sf.record_run("one more", "alice", STEPS, run_id="late-3")
    assert after.stored
    engine.dispose()
