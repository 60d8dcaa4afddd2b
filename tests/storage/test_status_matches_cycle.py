"""``skillflow status`` counts exactly the classes a cycle would find eligible, and names unhashed legacy rows."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import Engine, insert
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import Step, utcnow
from skillflow.operations.status import collect_status
from skillflow.promotion.landing import record_rejection
from skillflow.promotion.stages import assess_classes
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

runner = CliRunner()
CONFIG = PromotionConfig(min_executions=3)


def _cycle_eligible(engine: Engine, agent_id: str, user_id: str, config: PromotionConfig) -> set[str]:
    return {
        a.stats.canonical_hash for a in assess_classes(engine, agent_id, user_id, config, utcnow(), 1) if a.eligible
    }


def _tenant(engine: Engine, config: PromotionConfig = CONFIG) -> dict[str, object]:
    [tenant] = collect_status(engine, config)["tenants"]
    return tenant  # type: ignore[no-any-return]  # one seeded tenant


def _record(sf: Skillflow, steps: list[Step], n: int, prefix: str) -> None:
    for i in range(n):
        assert sf.record_run(f"{prefix} {i}", "u1", steps, strict=True).stored


def test_declared_state_changing_single_call_is_eligible_as_in_the_cycle(engine: Engine) -> None:
    """A one-call class of a tool declared state-changing is not trivial: the cycle and status agree."""
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    sf.register_tools(["lookup_order"], state_changing={"lookup_order": True})
    _record(sf, [Step(tool="lookup_order", arguments={"order_id": "A1"})], 3, "track order")
    assert len(_cycle_eligible(engine, "a1", "u1", CONFIG)) == 1
    assert _tenant(engine)["eligible_classes"] == 1
    sf.register_tools(["lookup_order"], state_changing={"lookup_order": False})  # declared read-only: trivial
    assert _cycle_eligible(engine, "a1", "u1", CONFIG) == set()
    assert _tenant(engine)["eligible_classes"] == 0


def test_class_in_rejection_backoff_is_not_counted(engine: Engine) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    steps = [Step(tool="lookup_order", arguments={"order_id": "A1"}), Step(tool="issue_refund", arguments={"n": 1})]
    _record(sf, steps, 3, "refund order")
    [assessment] = assess_classes(engine, "a1", "u1", CONFIG, utcnow(), 1)
    assert assessment.eligible and _tenant(engine)["eligible_classes"] == 1
    record_rejection(engine, assessment.stats, 1, ["judge: rejects"], CONFIG)  # backoff: retry after a later cycle
    assert _cycle_eligible(engine, "a1", "u1", CONFIG) == set()
    assert _tenant(engine)["eligible_classes"] == 0


def test_status_reports_unhashed_legacy_rows_with_the_backfill_command(engine: Engine) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    assert sf.record_run("hello, no tools", "u1", [], strict=True).stored  # no identity by design: not legacy
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(
            insert(workflow_memory),
            [
                {
                    "id": f"legacy-{i}", "agent_id": "a1", "user_id": "u1", "query": f"Refund order {i}",
                    "step_count": 0, "outcome": "success", "execution_outcome": "success",
                    "outcome_source": "execution", "created_at": now - timedelta(minutes=i + 1),
                    "steps": {"Step 1: lookup_order": {"arguments": {"order_id": "A1"}, "result": {}}},
                    "skills_activated": [],
                }
                for i in range(2)
            ],
        )  # fmt: skip
    url = engine.url.render_as_string(hide_password=True)
    command = f"skillflow backfill --db {url}"
    tenant = _tenant(engine)
    assert (tenant["unhashed_runs"], tenant["backfill_command"]) == (2, command)
    shown = runner.invoke(
        app, ["status", "--db", engine.url.render_as_string(hide_password=False)], env={"PREFECT_API_URL": ""}
    )
    assert shown.exit_code == 0, shown.output
    line = f"a1/u1: 2 legacy run(s) have no canonical hash and are not aggregated: run `{command}`"
    assert line in shown.output.splitlines()  # on one line, whatever the terminal width: copy and paste works
    body = json.loads(
        runner.invoke(
            app,
            ["status", "--db", engine.url.render_as_string(hide_password=False), "--json"],
            env={"PREFECT_API_URL": ""},
        ).output
    )
    assert body["tenants"][0]["unhashed_runs"] == 2 and body["tenants"][0]["backfill_command"] == command


def test_no_backfill_command_without_legacy_rows(engine: Engine) -> None:
    sf = Skillflow(agent_id="a1", engine=engine, config=CONFIG)
    assert sf.record_run("hello, no tools", "u1", [], strict=True).stored
    tenant = _tenant(engine)
    assert (tenant["unhashed_runs"], tenant["backfill_command"]) == (0, None)
