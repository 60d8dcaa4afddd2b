"""``skillflow status`` and ``skillflow events`` on SQLite and PostgreSQL, asserting on their output."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from sqlalchemy import Engine, insert
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step
from skillflow.operations.status import SlotStatus, collect_status, list_events, partition_slots
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
    result = runner.invoke(app, ["status", "--db", _url(engine), "--json", "--prefect-api", ""])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert {t["agent_id"] for t in body["tenants"]} == {"a1", "a2"}
    assert body["prefect_api"] is None
    result = runner.invoke(app, ["status", "--db", _url(engine), "--agent-id", "a2", "--prefect-api", ""])
    assert result.exit_code == 0, result.output
    assert "a2" in result.output and "u9" in result.output and "shadow: developer 1" in result.output
    assert "states unknown" in result.output and "promotion-cycle" in result.output


def test_status_reads_the_prefect_api_of_the_profile_as_review_does(engine: Engine) -> None:
    """Found by an outside audit: with the API set by ``prefect config set PREFECT_API_URL=…`` (the profile, as
    Prefect's own banner advises) ``skillflow review`` used it and ``status`` said "no Prefect API configured", so
    it never showed the leaked-slot warning."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    _seed(engine)
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        result = runner.invoke(app, ["status", "--db", _url(engine)], env={"PREFECT_API_URL": None})
    assert result.exit_code == 0, result.output
    assert "the Prefect API at http://127.0.0.1:9/api did not answer" in result.output, result.output


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


class _Slots(BaseHTTPRequestHandler):
    """A Prefect API that knows one global limit (``active`` answers in turn, the last one repeated) and counts
    ``runs`` chunk runs in progress."""

    limit = "skillflow-partitions"
    active: ClassVar[list[int]] = []
    runs = 0
    counted: ClassVar[list[dict[str, Any]]] = []

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path != f"/api/v2/concurrency_limits/{self.limit}":
            self._answer(404, {"detail": "Concurrency Limit not found"})
            return
        active = type(self).active
        self._answer(
            200, {"name": self.limit, "limit": 1, "active_slots": active.pop(0) if len(active) > 1 else active[0]}
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/api/flow_runs/count":
            type(self).counted.append(body)
            self._answer(200, self.runs)
        else:
            self._answer(200, [])  # /flow_runs/filter: no finished run

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slots_api() -> Iterator[type[_Slots]]:
    server = HTTPServer(("127.0.0.1", 0), _Slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Slots.api = f"http://127.0.0.1:{server.server_port}/api"  # type: ignore[attr-defined]
    _Slots.active, _Slots.runs, _Slots.counted = [0], 0, []
    try:
        yield _Slots
    finally:
        server.shutdown()
        server.server_close()


def test_slots_taken_with_no_chunk_running_are_reported_leaked_with_the_reset(
    engine: Engine, slots_api: type[_Slots]
) -> None:
    api = slots_api.api  # type: ignore[attr-defined]
    slots_api.active = [2]
    leaked = partition_slots(api, "skillflow-partitions")
    assert leaked == SlotStatus(
        "skillflow-partitions", 2, 0, True, "prefect gcl update skillflow-partitions --active-slots 0"
    )
    [count] = slots_api.counted
    assert count["flows"]["name"]["any_"] == ["promotion-partitions"]
    assert set(count["flow_runs"]["state"]["type"]["any_"]) == {"PENDING", "RUNNING", "CANCELLING", "PAUSED"}
    _seed(engine)
    result = runner.invoke(app, ["status", "--db", _url(engine), "--prefect-api", api])
    assert result.exit_code == 0, result.output
    assert "2 slot(s) of the global concurrency limit skillflow-partitions are taken" in result.output
    assert "`prefect gcl update skillflow-partitions --active-slots 0`" in result.output  # on one line
    # A fleet audit (2026-12-06): a dead chunk's slot frees itself when its lease expires; the reset first advised
    # then would take a slot off live chunks' count once Prefect frees it too.
    assert "until its lease expires (5 minutes at most), when Prefect frees it: look again then" in result.output
    body = json.loads(runner.invoke(app, ["status", "--db", _url(engine), "--prefect-api", api, "--json"]).output)
    assert body["partition_slots"]["leaked"] is True and body["partition_slots"]["active_slots"] == 2


def test_slots_held_by_running_chunks_or_freed_meanwhile_are_not_leaked(
    engine: Engine, slots_api: type[_Slots]
) -> None:
    api = slots_api.api  # type: ignore[attr-defined]
    slots_api.active, slots_api.runs = [1], 1  # a chunk runs and holds its slot
    assert partition_slots(api, "skillflow-partitions") == SlotStatus(
        "skillflow-partitions", 1, 1, False, "prefect gcl update skillflow-partitions --active-slots 0"
    )
    slots_api.active, slots_api.runs = [1, 0], 0  # the chunk ended between the two reads of the limit
    status = partition_slots(api, "skillflow-partitions")
    assert status is not None and (status.active_slots, status.leaked) == (0, False)
    slots_api.active = [0]
    _seed(engine)
    result = runner.invoke(app, ["status", "--db", _url(engine), "--prefect-api", api])
    assert result.exit_code == 0 and "slot(s)" not in result.output, result.output
    assert partition_slots(api, "another-limit") is None  # not deployed: nothing to say
    assert partition_slots("http://127.0.0.1:9/api", "skillflow-partitions", timeout=1) is None
