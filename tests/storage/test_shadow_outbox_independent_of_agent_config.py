"""Defect 4: whether a run enters the shadow outbox no longer depends on the agent process's config.

An agent whose own config says ``shadow_evaluation_enabled = false`` (started outside the project
directory, say) still queues its tool-calling runs; the drain (the flow's config) decides. Runs recorded
by older versions with the flag off form a backlog that can be re-queued and evaluated on request.
"""

from __future__ import annotations

from sqlalchemy import Engine, select, update

from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.storage import outbox
from skillflow.storage.schema import workflow_memory
from tests.support.lifecycle import EMBEDDER, class_hash, config, earlier, make_skill, record


def _row(engine: Engine, run_id: str):  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(select(workflow_memory).where(workflow_memory.c.id == run_id)).mappings().one()


def test_agent_with_shadow_off_still_queues_and_the_flow_decides(engine: Engine) -> None:
    agent_cfg = config(shadow_evaluation_enabled=False)  # what the agent process read
    source = record(engine, "cancel my reservation", at=earlier(2), cfg=agent_cfg)
    skill = make_skill(engine, class_hash(engine, source), sources=[source])
    run_id = record(engine, "please cancel my reservation", cfg=agent_cfg)
    assert _row(engine, run_id)["shadow_pending"] == 1
    # The flow with evaluation off leaves the outbox alone; with it on, the run is evaluated.
    assert drain_shadow_evaluations(engine, config(shadow_evaluation_enabled=False), EMBEDDER).status == "disabled"
    assert _row(engine, run_id)["shadow_pending"] == 1
    report = drain_shadow_evaluations(engine, config(), EMBEDDER)
    assert report.records == 1
    [rec] = _row(engine, run_id)["shadow_evaluations"]
    assert rec["skill_id"] == skill.id


def test_backlog_recorded_while_off_is_evaluated_on_request(engine: Engine) -> None:
    source = record(engine, "cancel my reservation", at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source])
    run_id = record(engine, "please cancel my reservation")
    with engine.begin() as conn:  # what older capture wrote while the agent had evaluation off
        conn.execute(update(workflow_memory).values(shadow_pending=0))
    assert drain_shadow_evaluations(engine, config(), EMBEDDER).records == 0
    with engine.begin() as conn:
        assert outbox.requeue_unevaluated(conn) == 2  # the source run and the new run: never evaluated
    report = drain_shadow_evaluations(engine, config(), EMBEDDER)
    assert report.records == 1 and report.pending_left == 0
    assert [r["skill_id"] for r in _row(engine, run_id)["shadow_evaluations"]] == [skill.id]
    with engine.begin() as conn:  # evaluated runs are never re-queued
        assert outbox.requeue_unevaluated(conn) == 1  # only the source run, which had no candidate
