"""``skillflow status`` and ``skillflow events`` on SQLite and PostgreSQL, asserting on their output."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step
from skillflow.operations.status import collect_status, list_events
from skillflow.runtime import Skillflow
from skillflow.storage.schema import reports
from skillflow.storage.skills import insert_skill, transition

runner = CliRunner()


def _seed(engine: Engine) -> dict[str, str]:
    config = PromotionConfig(min_executions=3, shadow_evaluation_enabled=True, require_shadow=True)
    sf = Skillflow(agent_id="a1", engine=engine, config=config)
    steps = [
        Step(tool="lookup_order", arguments={"order_id": "A1"}),
        Step(tool="issue_refund", arguments={"amount": 1}),
    ]
    runs = [sf.record_run(f"refund order {i}", "u1", steps, strict=True) for i in range(4)]
    sf.record_run("where is my order", "u1", [Step(tool="lookup_order", arguments={"order_id": "B"})], strict=True)
    sf.record_run("hello", "u2", [], strict=True)
    with engine.begin() as conn:
        from sqlalchemy import select

        from skillflow.storage.schema import workflow_memory

        chash = conn.execute(
            select(workflow_memory.c.canonical_hash).where(workflow_memory.c.id == runs[0].run_id)
        ).scalar()
        skill = insert_skill(
            conn, agent_id="a1", user_id="u1", canonical_hash=chash, name="refund", description="Refund an order",
            content="c", status=SkillStatus.SHADOW, actor="flow:promotion-cycle", flow_run_id="run-123",
        )  # fmt: skip
        transition(
            conn, skill.id, SkillStatus.ACTIVE, actor="alice", reason="looks right", injection_role=InjectionRole.USER
        )
        other = insert_skill(
            conn, agent_id="a2", user_id="u9", canonical_hash="f" * 64, name="other", description="Other",
            content="c", status=SkillStatus.SHADOW, injection_role=InjectionRole.DEVELOPER,
            actor="flow:promotion-cycle",
        )  # fmt: skip
        conn.execute(
            insert(reports).values(
                id="rep-1", kind="promotion", flow_run_id="fr-promo", dry_run=0,
                created_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), body={"ok": True},
            )
        )  # fmt: skip
    return {"skill": skill.id, "other": other.id, "hash": chash}


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_status_per_tenant(engine: Engine) -> None:
    _seed(engine)
    status = collect_status(engine, PromotionConfig(min_executions=3), prefect_api_url=None)
    tenants = {(t["agent_id"], t["user_id"]): t for t in status["tenants"]}
    assert set(tenants) == {("a1", "u1"), ("a1", "u2"), ("a2", "u9")}
    a1 = tenants[("a1", "u1")]
    assert (a1["runs"], a1["classes"], a1["outbox_backlog"]) == (5, 2, 5)
    # The 4-run class is covered by a live skill, the 1-run class is below min_executions.
    assert a1["eligible_classes"] == 0
    assert a1["skills"] == {"active": {"user": 1}}
    assert tenants[("a1", "u2")]["runs"] == 1 and tenants[("a1", "u2")]["classes"] == 0
    assert tenants[("a2", "u9")]["skills"] == {"shadow": {"developer": 1}} and tenants[("a2", "u9")]["runs"] == 0
    flows = {f["flow"]: f for f in status["flows"]}
    assert flows["promotion-cycle"]["last_report_flow_run_id"] == "fr-promo"
    assert flows["promotion-cycle"]["last_report_at"] == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert {f["state"] for f in status["flows"]} == {"unknown"}


def test_status_counts_eligible_classes(engine: Engine) -> None:
    config = PromotionConfig(min_executions=3)
    sf = Skillflow(agent_id="a1", engine=engine, config=config)
    # A single read-only call is trivial (the cycle's not_trivial gate): status must not count it either.
    track = [Step(tool="lookup_order", arguments={"order_id": "A1"})]
    refund = [*track, Step(tool="issue_refund", arguments={"amount": 1})]
    for i in range(3):
        sf.record_run(f"track order {i}", "u1", track, strict=True)
        sf.record_run(f"refund order {i}", "u1", refund, strict=True)
    status = collect_status(engine, config)
    assert status["tenants"][0]["classes"] == 2 and status["tenants"][0]["eligible_classes"] == 1
    assert collect_status(engine, PromotionConfig(min_executions=4))["tenants"][0]["eligible_classes"] == 0


def test_status_cli_json_and_table(engine: Engine) -> None:
    _seed(engine)
    result = runner.invoke(app, ["status", "--db", _url(engine), "--json"], env={"PREFECT_API_URL": ""})
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert {t["agent_id"] for t in body["tenants"]} == {"a1", "a2"}
    assert body["prefect_api"] is None
    result = runner.invoke(app, ["status", "--db", _url(engine), "--agent-id", "a2"], env={"PREFECT_API_URL": ""})
    assert result.exit_code == 0, result.output
    assert "a2" in result.output and "u9" in result.output and "shadow: developer 1" in result.output
    assert "states unknown" in result.output and "promotion-cycle" in result.output


def test_status_marks_unreachable_prefect_unknown(engine: Engine) -> None:
    _seed(engine)
    status = collect_status(engine, PromotionConfig(), prefect_api_url="http://127.0.0.1:9/api")
    assert {f["state"] for f in status["flows"]} == {"unknown: the Prefect API did not answer"}
    result = runner.invoke(app, ["status", "--db", _url(engine), "--prefect-api", "http://127.0.0.1:9/api"])
    assert result.exit_code == 0 and "the Prefect API at http://127.0.0.1:9/api did not answer" in result.output


def test_events_log(engine: Engine) -> None:
    ids = _seed(engine)
    events = list_events(engine, skill_id=ids["skill"])
    assert [e["event"] for e in events] == ["activated", "created"]
    activated = events[0]
    assert (activated["actor"], activated["reason"], activated["from_status"], activated["to_status"]) == (
        "alice", "looks right", "shadow", "active",
    )  # fmt: skip
    assert events[1]["flow_run_id"] == "run-123" and events[1]["actor"] == "flow:promotion-cycle"
    assert [e["skill_id"] for e in list_events(engine, agent_id="a2")] == [ids["other"]]
    assert len(list_events(engine, limit=1)) == 1

    result = runner.invoke(app, ["events", "--db", _url(engine), "--skill", ids["skill"], "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert [e["actor"] for e in body["events"]] == ["alice", "flow:promotion-cycle"]
    result = runner.invoke(app, ["events", "--db", _url(engine), "--agent-id", "a1", "--limit", "5"])
    assert result.exit_code == 0, result.output
    assert "alice" in result.output and "looks" in result.output and "activat" in result.output


def test_skills_prints_whole_ids_on_a_narrow_terminal(engine: Engine, monkeypatch: Any) -> None:
    """At 80 columns the id column was cut to `d174…`; README says `--skill` takes the id `skills` prints."""
    from skillflow.cli.app import console
    from skillflow.storage.skills import list_skills

    _seed(engine)
    monkeypatch.setattr(console, "width", 80)
    result = runner.invoke(app, ["skills", "--db", _url(engine)])
    assert result.exit_code == 0, result.output
    with engine.connect() as conn:
        ids = [s.id[:12] for s in list_skills(conn)]
    assert ids and all(i in result.output for i in ids), result.output
