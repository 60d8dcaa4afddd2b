"""A rolling upgrade: a database a newer skillflow migrated is refused by an older one's pipeline (CLI, tasks,
``migrate``, ``serve``), while an older agent process goes on capturing and injecting (docs/guide/ops.md,
"Upgrading a fleet")."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, func, insert, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.models import utcnow
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import SchemaNewer, migrate, require_current
from skillflow.storage.schema import schema_migrations, workflow_memory
from tasks import common

FUTURE = "099_from_a_newer_skillflow"


@pytest.fixture
def newer(db_url: str) -> Iterator[tuple[Engine, str]]:
    """A database migrated by this code, then by a newer one (one migration this code does not know)."""
    engine = make_engine(db_url)
    migrate(engine)
    with engine.begin() as conn:
        conn.execute(insert(schema_migrations).values(version=99, name=FUTURE, applied_at=utcnow()))
    yield engine, db_url
    engine.dispose()


def test_the_pipeline_refuses_a_database_a_newer_skillflow_migrated(newer: tuple[Engine, str]) -> None:
    engine, url = newer
    with pytest.raises(SchemaNewer, match=FUTURE):
        require_current(engine)
    with pytest.raises(SchemaNewer, match="upgrade skillflow here"):
        migrate(engine)  # never half-migrates it either
    common._CHECKED.discard(url)
    with pytest.raises(SchemaNewer):
        common.engine_for(url)  # every task of every flow on this worker


@pytest.mark.parametrize("argv", [["migrate"], ["status"], ["classes"]])
def test_the_cli_says_so_in_one_line(newer: tuple[Engine, str], argv: list[str]) -> None:
    _, url = newer
    result = CliRunner().invoke(app, [*argv, "--db", url])
    assert result.exit_code != 0
    assert FUTURE in result.output and "Traceback" not in result.output


def test_an_older_agent_process_goes_on(newer: tuple[Engine, str], caplog: pytest.LogCaptureFixture) -> None:
    engine, _ = newer
    with caplog.at_level(logging.WARNING, logger="skillflow"):
        sf = Skillflow(agent_id="a1", engine=engine)
    assert any(FUTURE in r.getMessage() for r in caplog.records)
    assert sf.record_run("cancel my booking", "u1", [{"tool": "cancel_reservation", "args": {}}]).stored
    prepared = sf.prepare("cancel my booking", "u1")
    assert not prepared.skill_ids and prepared.request["messages"]  # served: no live skill, the request built
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(workflow_memory)).scalar_one() == 1
