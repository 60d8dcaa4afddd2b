"""Operator UI: promotion-cycle, promotion-partitions and shadow-evaluation runs are named from their scope, log
each stage at INFO (counts and ids, never payloads), and an empty agent/user id means every tenant."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from tests.flows.conftest import Names
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]


def run_record(flow_run_id: str) -> tuple[str, list[str]]:
    """The flow run's name and its INFO log messages, as the UI shows them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)  # type: ignore[arg-type]
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
    return run.name, [log.message for log in logs if log.level == logging.INFO]


def seeded(tmp_path: Path) -> tuple[str, list[str]]:
    url = f"sqlite:///{tmp_path / 'names.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    queries: list[str] = []
    for user in ("u1", "u2"):
        for i in range(6):
            record_cancel(sf, user, i)
    from skillflow.storage.schema import workflow_memory

    with engine.connect() as conn:
        queries = [str(q) for (q,) in conn.execute(workflow_memory.select().with_only_columns(workflow_memory.c.query))]
    engine.dispose()
    return url, queries


def test_promotion_cycle_names_logs_and_empty_ids_mean_all(
    prefect_harness: None, task_names: Names, tmp_path: Path
) -> None:
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    url, queries = seeded(tmp_path)
    assert PromotionCycleParams(agent_id=None, user_id=None).agent_id == ""  # the CLI's unset option
    reports = promotion_cycle(PromotionCycleParams(database_url=url, force=True, dry_run=True))
    assert sorted((r.agent_id, r.user_id) for r in reports) == [(AGENT, "u1"), (AGENT, "u2")]
    [only_u2] = promotion_cycle(PromotionCycleParams(database_url=url, user_id="u2", force=True))
    assert (only_u2.agent_id, only_u2.user_id) == (AGENT, "u2") and len(only_u2.promoted) == 1

    name, infos = run_record(str(reports[0].flow_run_id))
    assert name == "cycle-all-all"
    expected = {"list-partitions-all-all", f"cycle-{AGENT}-u1", f"cycle-{AGENT}-u2", "publish-promotion-report"}
    assert expected <= task_names.task_runs, task_names.task_runs
    assert "2 partition(s) with stored runs" in infos
    assert any(m.startswith(f"partition {AGENT}/u1 cycle ") and "1 would land" in m for m in infos), infos
    name, infos = run_record(str(only_u2.flow_run_id))
    assert name == "cycle-all-u2"
    [landed] = [m for m in infos if m.startswith(f"partition {AGENT}/u2")]
    assert f"1 landed ({only_u2.promoted[0][:12]})" in landed
    assert not any(q in m or q[:20] in m for q in queries for m in infos)  # ids and counts, never a query


def test_partitions_and_shadow_runs_are_named_and_log_counts(
    prefect_harness: None, task_names: Names, tmp_path: Path
) -> None:
    from flows.promotion_partitions import PromotionPartitionsParams, promotion_partitions
    from flows.shadow_evaluation import ShadowEvaluationParams, shadow_evaluation

    url, queries = seeded(tmp_path)
    params: Any = PromotionPartitionsParams(database_url=url, partitions=[(AGENT, "u1"), (AGENT, "u2")], force=True)
    reports = promotion_partitions(params)
    name, infos = run_record(str(reports[0].flow_run_id))
    assert name == f"partitions-2-from-{AGENT}-u1"
    assert {f"cycle-{AGENT}-u1", f"cycle-{AGENT}-u2"} <= task_names.task_runs
    assert sum(m.startswith(f"partition {AGENT}/") for m in infos) == 2

    state = shadow_evaluation(
        ShadowEvaluationParams(database_url=url, embedder="hashing", dry_run=True), return_state=True
    )
    assert state.result().status == "dry_run"
    name, infos = run_record(str(state.state_details.flow_run_id))
    assert name == "shadow-drain-dry-run"
    assert {"drain-outbox", "publish-shadow-summary"} <= task_names.task_runs
    assert any(m.startswith("drain dry_run: ") and "run(s) claimed" in m for m in infos), infos
    assert not any(q[:20] in m for q in queries for m in infos)
