"""Defect 7: legacy rows without a canonical hash are reported, with the exact backfill command."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, insert

from skillflow.kernel.models import utcnow
from skillflow.promotion.cycle import run_partition
from skillflow.storage.schema import workflow_memory
from tests.support.promotion import AGENT, agent, config, record_cancel


def _legacy(engine: Engine, n: int, steps: object) -> None:
    now = utcnow()
    rows = [
        {
            "id": f"legacy-{i}-{len(str(steps))}",
            "agent_id": AGENT,
            "user_id": "u1",
            "query": f"Refund order {i}",
            "step_count": 0,
            "outcome": "success",
            "execution_outcome": "success",
            "outcome_source": "execution",
            "created_at": now - timedelta(minutes=i + 1),
            "steps": steps,
            "skills_activated": [],
        }
        for i in range(n)
    ]
    with engine.begin() as conn:
        conn.execute(insert(workflow_memory), rows)


def test_cycle_report_names_unhashed_rows_and_the_backfill_command(engine: Engine, offline_providers: None) -> None:
    sf = agent(engine)
    record_cancel(sf, "u1", 0)
    sf.record_run("hello, no tools", "u1", [])  # no identity by design: not a legacy row
    upstream = {"Step 1: lookup_order": {"arguments": {"order_id": "A1"}, "result": {}}}
    _legacy(engine, 3, upstream)
    _legacy(engine, 2, {})  # legacy rows without tool calls have no identity either: not reported
    report = run_partition(engine, AGENT, "u1", config())
    url = engine.url.render_as_string(hide_password=True)
    expected = f"3 legacy run(s) have no canonical hash and are not aggregated: run `skillflow backfill --db {url}`"
    assert expected in report.review_flags


def test_no_flag_without_legacy_rows(engine: Engine, offline_providers: None) -> None:
    sf = agent(engine)
    record_cancel(sf, "u1", 0)
    sf.record_run("hello, no tools", "u1", [])
    report = run_partition(engine, AGENT, "u1", config())
    assert not [f for f in report.review_flags if "canonical hash" in f]
