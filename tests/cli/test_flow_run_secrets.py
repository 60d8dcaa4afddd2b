"""A flow run a CLI command starts in process never records the database password (an outside audit, 2026-12-05).

Prefect stores every flow run's parameters on its server and shows them in the UI (docs/guide/ops.md,
"Secrets"). ``skillflow review``, ``serve`` and ``deploy`` already recorded no URL with a password;
``skillflow cycle``, ``distill`` and ``backfill`` passed ``--db`` (or ``$SKILLFLOW_DATABASE_URL``) whole into
their run's ``params.database_url``: the password sat in the ephemeral server's database file, or on a shared
server's Parameters tab. The runs now record none and read the URL from the command's environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate

pytestmark = [pytest.mark.prefect, pytest.mark.postgres]

PASSWORD = "Zq81DbPassw0rd"
STEPS = [
    {"tool": "get_reservation_details", "arguments": {"reservation_id": "R1"}, "result": {"ok": True}},
    {"tool": "cancel_reservation", "arguments": {"reservation_id": "R1"}, "result": {"ok": True}},
]


def _with_password(url: str) -> str:
    """The same database, its URL carrying a password (the local server trusts the user, so any is accepted)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


def _recorded_parameters() -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    return json.dumps([r.parameters for r in runs], default=str)


@pytest.mark.parametrize("how", ["--db", "environment"])
def test_cycle_distill_and_backfill_record_no_password(
    prefect_harness: None, pg_schema_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    monkeypatch.setenv("SKILLFLOW_DISTILLER", "offline")
    monkeypatch.setenv("SKILLFLOW_JUDGE", "offline")
    monkeypatch.chdir(tmp_path)
    url = _with_password(pg_schema_url)
    assert PASSWORD in url
    engine = make_engine(pg_schema_url)
    migrate(engine)
    sf = Skillflow(agent_id="secret-agent", engine=engine, spool_dir=tmp_path / "spool")
    hashes = {sf.record_run(f"cancel reservation R{i} please", "u1", STEPS).canonical_hash for i in range(4)}
    engine.dispose()
    (class_hash,) = hashes
    assert class_hash
    db = ["--db", url] if how == "--db" else []
    env = {"SKILLFLOW_DATABASE_URL": url} if how == "environment" else {}
    for args in (
        ["cycle", *db, "--json"],
        ["distill", class_hash[:12], "--agent-id", "secret-agent", "--user-id", "u1", "--dry-run", *db, "--json"],
        ["backfill", "--dry-run", *db, "--json"],
    ):
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert PASSWORD not in result.stdout
    recorded = _recorded_parameters()
    assert "secret-agent" in recorded  # the runs are there (the distill run names the tenant)
    assert PASSWORD not in recorded
