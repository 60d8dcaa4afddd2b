"""A crashed chunk's partitions keep one report each once the chunk is retried (a fleet audit, 2026-12-06).

The fan-out parent stores a failure report ("child run crashed") for each partition a crashed
``promotion-partitions`` child never reached; the operator then retries that child run (docs/RELIABILITY.md),
which cycles those partitions and stores their reports. The failure reports were stored under the parent's flow
run, so each such partition kept two reports of one cycle (312 for 240 partitions on the audit's fleet). They are
now stored under the child's run, the run that owes the report, and the retried child's report replaces them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prefect import flow
from sqlalchemy import Engine, select

from skillflow.promotion.cycle import run_partition
from skillflow.storage.schema import reports
from tasks.fanout import ChildRun
from tests.support.promotion import cancel_history, config

pytestmark = [pytest.mark.prefect]

P = ("agent-a", "u1")


def _bodies(engine: Engine) -> list[tuple[str, dict[str, Any]]]:
    with engine.connect() as conn:
        rows = conn.execute(select(reports.c.flow_run_id, reports.c.body).where(reports.c.kind == "promotion"))
        return [(str(r[0]), r[1]) for r in rows]


def test_a_retried_crashed_chunk_replaces_the_parent_s_failure_report(
    prefect_harness: None, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.fanout as fanout
    from tasks.promotion import fan_out_partitions

    engine, _ = cancel_history(db_url)
    monkeypatch.setattr(fanout, "run_children", lambda *a, **k: [ChildRun(0, "CHILD", "CRASHED")])

    @flow
    def parent() -> list[Any]:
        return fan_out_partitions(db_url, [P], 1, {}, datetime.now(UTC), False, True)

    [failed] = parent()
    assert failed.partition_failed == "child run crashed"
    assert [(fr, b["partition_failed"]) for fr, b in _bodies(engine)] == [("CHILD", "child run crashed")]

    retried = run_partition(engine, *P, config(), force=True, flow_run_id="CHILD")  # the operator's retry
    assert retried.partition_failed is None and retried.promoted
    [(fr, body)] = _bodies(engine)
    assert fr == "CHILD" and body["partition_failed"] is None and body["promoted"]
    engine.dispose()
