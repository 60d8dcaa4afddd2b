"""ToolBench and API-Bank parsing and ingest, and the ``skillflow ingest`` command."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lab.ingest import ingest_api_bank, ingest_toolbench, parse_api_bank, parse_toolbench
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

END = datetime(2024, 6, 1, tzinfo=UTC)
runner = CliRunner()


def test_toolbench_chosen_paths(corpora_dir: Path) -> None:
    runs, tools, skipped = parse_toolbench(corpora_dir / "toolbench")
    assert len(runs) == 13 and skipped == {"no chosen path (train_messages absent)": 2}
    assert sum(len(r.steps) for r in runs) == 37  # API calls on the chosen paths; Finish dropped
    assert all(s.tool != "Finish" for r in runs for s in r.steps) and "Finish" not in tools
    errored = [s for r in runs for s in r.steps if s.error]
    assert len(errored) == 6  # includes errors inside observations cut at 1,024 characters
    assert all(s.error_class and s.error_class.startswith("Error:") for s in errored)
    assert len({s.tool for r in runs for s in r.steps}) == 21
    assert sum(1 for r in runs if r.metadata["win"]) == 9
    assert all(r.query and r.user_id == "shared" for r in runs)


def test_toolbench_reward_applies_win(engine: Engine, corpora_dir: Path) -> None:
    sf = Skillflow(agent_id="toolbench", engine=engine)
    report = ingest_toolbench(corpora_dir / "toolbench", sf, outcome="reward", end=END)
    assert report.stored == 13 and report.skipped["no chosen path (train_messages absent)"] == 2
    with engine.connect() as conn:
        rows = conn.execute(
            select(workflow_memory.c.outcome, workflow_memory.c.execution_outcome, workflow_memory.c.metadata)
        ).all()
    for outcome, execution, meta in rows:
        expected = "success" if meta["win"] and execution == "success" else "failure"
        assert outcome == expected
    assert {o for o, _, _ in rows} == {"success", "failure"}


def test_api_bank_turns(corpora_dir: Path) -> None:
    runs = parse_api_bank(corpora_dir / "api-bank")
    assert len(runs) == 864  # user turns
    assert sum(1 for r in runs if r.steps) == 435
    assert sum(len(r.steps) for r in runs) == 508
    assert len({s.tool for r in runs for s in r.steps}) == 50
    assert not any(s.error for r in runs for s in r.steps)
    assert len({r.run_id for r in runs}) == 864 and max(len(r.run_id or "") for r in runs) <= 64
    calc = next(r for r in runs if r.metadata["file"] == "level-1-given-desc/Calculator-level-1-1.jsonl")
    assert calc.query == "Can you calculate (5+6)*3 for me?"
    assert calc.steps[0].arguments == {"formula": "(5+6)*3"} and calc.steps[0].result == 33.0


def test_api_bank_ingest(engine: Engine, corpora_dir: Path) -> None:
    folder = corpora_dir / "api-bank" / "level-2-toolsearcher"
    sf = Skillflow(agent_id="api-bank", engine=engine)
    report = ingest_api_bank(folder, sf, end=END)
    assert report.runs == 116 and report.stored == 116 and report.with_tool_calls == 85
    assert report.outcomes == {"success": 116} and "ToolSearcher" in report.tools
    with engine.connect() as conn:
        hashed = conn.execute(
            select(func.count()).select_from(workflow_memory).where(workflow_memory.c.canonical_hash.is_not(None))
        ).scalar()
    assert hashed == 85


def test_ingest_command(engine: Engine, corpora_dir: Path) -> None:
    db_url = engine.url.render_as_string(hide_password=False)  # ingest never migrates: the fixture did
    args = ["ingest", "toolbench", str(corpora_dir / "toolbench"), "--db", db_url, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["stored"] == 13 and body["new"] == 13 and body["agent_id"] == "toolbench"
    again = json.loads(runner.invoke(app, args).output)
    assert again["new"] == 0 and again["already_present"] == 13
    refused = runner.invoke(
        app, ["ingest", "api-bank", str(corpora_dir / "api-bank"), "--outcome", "reward", "--db", db_url]
    )
    assert refused.exit_code == 2 and "no success labels" in refused.output
