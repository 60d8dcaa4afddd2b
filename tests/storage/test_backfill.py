"""Backfill of canonical identity onto legacy rows: batches, idempotence, dry run, force, the real flow, the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select
from typer.testing import CliRunner

from skillflow.kernel.canonical import query_fingerprint
from skillflow.kernel.models import SkillStatus, Step
from skillflow.operations.backfill import BatchResult, add_listener, remove_listener, run_backfill
from skillflow.runtime import Skillflow
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.schema import reports, workflow_memory
from skillflow.storage.skills import insert_skill

GOLDEN = "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"
T0 = datetime(2025, 3, 1, tzinfo=UTC)


def _upstream_steps(think: bool = False) -> dict[str, Any]:
    """Steps as upstream deployments store them: an ordered ``"Step N: tool"`` mapping."""
    steps: dict[str, Any] = {}
    if think:
        steps["Step 0: think"] = {"arguments": {"thought": "plan"}, "result": None, "error": None}
    steps["Step 1: lookup_order"] = {"arguments": {"order_id": "A1"}, "result": {"id": "A1"}, "error": None}
    steps["Step 2: issue_refund"] = {"arguments": {"order_id": "A1", "amount": 5}, "result": {"ok": 1}, "error": ""}
    return steps


def _legacy(engine: Engine, n: int, agent: str = "legacy", user: str = "u1", steps: Any = None, start: int = 0) -> None:
    rows = [
        {
            "id": f"{agent}-{start + i:04d}",
            "agent_id": agent,
            "user_id": user,
            "query": f"Refund order {i % 3}",
            "step_count": 0,
            "outcome": "success",
            "execution_outcome": "success",
            "outcome_source": "execution",
            "created_at": T0 + timedelta(minutes=start + i),
            "steps": _upstream_steps() if steps is None else steps,
            "skills_activated": [],
        }
        for i in range(n)
    ]
    with engine.begin() as conn:
        conn.execute(insert(workflow_memory), rows)


def _rows(engine: Engine, agent: str = "legacy") -> list[Any]:
    with engine.connect() as conn:
        q = select(workflow_memory).where(workflow_memory.c.agent_id == agent).order_by(workflow_memory.c.id)
        return list(conn.execute(q).mappings())


def _seed(engine: Engine) -> None:
    _legacy(engine, 5)
    _legacy(engine, 2, steps={}, start=100)  # a run with no tool calls: no identity
    _legacy(engine, 1, steps="not steps", start=200)  # unreadable legacy document
    sf = Skillflow(agent_id="legacy", engine=engine)
    sf.record_run("Refund order 9", "u1", [Step("lookup_order", {"order_id": 1})], strict=True)


def test_dry_run_counts_and_writes_nothing(engine: Engine) -> None:
    _seed(engine)
    report = run_backfill(engine, batch_size=2, dry_run=True)
    assert (report.scanned, report.updated, report.already_hashed, report.no_steps, report.invalid) == (9, 5, 1, 2, 1)
    assert report.summary() == "scanned=9 would update=5 already_hashed=1 no_steps=2 invalid=1"
    assert sum(r["canonical_hash"] is None for r in _rows(engine)) == 8


def test_backfill_hashes_legacy_rows_idempotently(engine: Engine) -> None:
    _seed(engine)
    seen: list[BatchResult] = []
    add_listener(seen.append)
    try:
        report = run_backfill(engine, batch_size=2)
    finally:
        remove_listener(seen.append)
    assert report.summary() == "scanned=9 updated=5 already_hashed=1 no_steps=2 invalid=1"
    assert report.batches == 4 and sum(b.scanned for b in seen) == 8  # keyset batches of 2 over 8 NULL rows
    legacy = [r for r in _rows(engine) if r["id"].startswith("legacy-00")]
    assert {r["canonical_hash"] for r in legacy} == {GOLDEN}
    assert legacy[0]["tool_sequence"] == "lookup_order > issue_refund" and legacy[0]["step_count"] == 2
    assert legacy[0]["signature"][1] == {"tool": "issue_refund", "arg_keys": ["amount", "order_id"], "errored": False}
    assert legacy[0]["query_fingerprint"] == query_fingerprint("Refund order 0")
    with engine.connect() as conn:
        (cls,) = [s for s in aggregate_classes(conn, "legacy", "u1") if s.canonical_hash == GOLDEN]
    assert (cls.executions, cls.distinct_queries) == (5, 3)
    again = run_backfill(engine, batch_size=2)
    assert again.summary() == "scanned=9 updated=0 already_hashed=6 no_steps=2 invalid=1"


def test_agent_scope_force_and_stamping(engine: Engine) -> None:
    _legacy(engine, 3, steps=_upstream_steps(think=True))
    _legacy(engine, 2, agent="other")
    with engine.begin() as conn:  # an ACTIVE skill of the class: newly hashed runs get stamped like captured ones
        skill = insert_skill(conn, agent_id="legacy", user_id="u1", canonical_hash=GOLDEN, name="refund-order",
                             description="Refund an order.", content="x", status=SkillStatus.ACTIVE)  # fmt: skip
    report = run_backfill(engine, agent_id="legacy")
    assert (report.scanned, report.updated) == (3, 3)
    assert {r["canonical_hash"] for r in _rows(engine)} == {GOLDEN}  # the no-op "think" step is dropped
    assert {r["promoted_skill_id"] for r in _rows(engine)} == {skill.id}
    assert {r["canonical_hash"] for r in _rows(engine, "other")} == {None}
    forced = run_backfill(engine, agent_id="legacy", force=True)
    assert forced.summary() == "scanned=3 updated=0 already_hashed=3 no_steps=0"
    recomputed = run_backfill(engine, agent_id="legacy", force=True, noop_tools=())  # "think" now counts
    assert recomputed.updated == 3
    assert {r["tool_sequence"] for r in _rows(engine)} == {"think > lookup_order > issue_refund"}
    assert GOLDEN not in {r["canonical_hash"] for r in _rows(engine)}


@pytest.mark.prefect
def test_flow_run_stores_report_and_artifact(db_url: str, engine: Engine, prefect_harness: None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.backfill_canonical_hashes import backfill_canonical_hashes
    from tasks.backfill import BackfillParams

    _seed(engine)
    report = backfill_canonical_hashes(BackfillParams(database_url=db_url, batch_size=3))
    assert report.summary() == "scanned=9 updated=5 already_hashed=1 no_steps=2 invalid=1"
    with engine.connect() as conn:
        stored = conn.execute(select(reports).where(reports.c.kind == "backfill")).mappings().one()
    assert stored["body"]["updated"] == 5 and stored["dry_run"] == 0 and stored["flow_run_id"]
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["backfill-report"])))
    assert any("updated=5" in str(a.data) for a in arts)


@pytest.mark.prefect
def test_cli_backfill_then_classes(tmp_path: Any, prefect_harness: None) -> None:
    from skillflow.cli import app
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    engine = make_engine(url)
    migrate(engine)
    _seed(engine)
    runner = CliRunner()
    dry = runner.invoke(app, ["backfill", "--db", url, "--dry-run", "--batch-size", "2", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["summary"] == "scanned=9 would update=5 already_hashed=1 no_steps=2 invalid=1"
    real = runner.invoke(app, ["backfill", "--db", url, "--agent-id", "legacy"])
    assert real.exit_code == 0, real.output
    assert "scanned=9 updated=5 already_hashed=1 no_steps=2 invalid=1" in real.output
    listed = runner.invoke(app, ["classes", "--db", url, "--json"])
    classes = json.loads(listed.stdout)["classes"]
    assert classes[0]["canonical_hash"] == GOLDEN and classes[0]["executions"] == 5
    assert classes[0]["distinct_queries"] == 3 and classes[0]["tool_sequence"] == "lookup_order > issue_refund"
    table = runner.invoke(app, ["classes", "--db", url, "--user-id", "u1"])
    assert table.exit_code == 0 and GOLDEN[:12] in table.output
    engine.dispose()


def test_a_forced_backfill_brings_fingerprints_to_the_current_reading(engine: Engine) -> None:
    """A request's fingerprint reads a non-ASCII request through ``fold`` since 2026-12-06 (one request spelled with
    a zero-width space is one distinct query): ``--force`` rewrites the fingerprints stored before, identity
    unchanged or not; ASCII requests' fingerprints do not change."""
    import hashlib

    _legacy(engine, 2)
    run_backfill(engine, agent_id="legacy")
    wm = workflow_memory
    old = hashlib.sha256("refund order 0\u200b".encode()).hexdigest()  # as the old normalization stored it
    with engine.begin() as conn:
        conn.execute(wm.update().where(wm.c.id == "legacy-0000").values(query="Refund order 0\u200b",
                                                                         query_fingerprint=old))  # fmt: skip
    forced = run_backfill(engine, agent_id="legacy", force=True)
    assert forced.updated == 1
    rows = {r["id"]: r["query_fingerprint"] for r in _rows(engine)}
    assert rows["legacy-0000"] == query_fingerprint("Refund order 0") != old
    assert run_backfill(engine, agent_id="legacy", force=True).updated == 0
