"""Real flow runs under the session Prefect harness: shadow-evaluation, drift-demotion, activation-review."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select

from flows.activation_review import ActivationReviewParams, activation_review
from flows.drift_demotion import DriftDemotionParams, drift_demotion
from flows.shadow_evaluation import ShadowEvaluationParams, shadow_evaluation
from skillflow.kernel.models import SkillStatus
from skillflow.storage.reports import report_id
from skillflow.storage.schema import reports, skill_events, workflow_memory
from skillflow.storage.skills import get_skill
from tests.support.lifecycle import class_hash, earlier, later, make_skill, other_steps, record

pytestmark = pytest.mark.prefect
OVERRIDES: dict[str, Any] = {
    "require_shadow": True,
    "shadow_evaluation_enabled": True,
    "shadow_evaluation_min_similarity": 0.6,
}


def _skill(engine: Engine, status: SkillStatus = SkillStatus.SHADOW):  # type: ignore[no-untyped-def]
    source = record(engine, "cancel my reservation", at=earlier(2))
    return make_skill(engine, class_hash(engine, source), sources=[source], status=status)


def test_shadow_and_drift_flows(prefect_harness: None, db_url: str, engine: Engine) -> None:
    skill = _skill(engine)
    fresh = [record(engine, f"please cancel my reservation {i}") for i in range(3)]
    params = ShadowEvaluationParams(database_url=db_url, embedder="hashing", batch_size=2, config_overrides=OVERRIDES)
    report = shadow_evaluation(params)
    assert report.status == "ok" and report.records == 3 and report.claimed == 4 and report.batches == 3
    again = shadow_evaluation(params)
    assert again.records == 0 and again.claimed == 0
    with engine.connect() as conn:
        rows = conn.execute(select(workflow_memory.c.shadow_evaluations).where(workflow_memory.c.id.in_(fresh)))
        assert [len(r[0]) for r in rows] == [1, 1, 1]
        assert (get_skill(conn, skill.id).stats or {})["shadow"]["observations"] == 3
    off = shadow_evaluation(
        ShadowEvaluationParams(database_url=db_url, config_overrides={"shadow_evaluation_enabled": False})
    )
    assert off.status == "disabled"

    active = _skill_active(engine)
    for i in range(10):
        record(
            engine, f"refund run {i}", user="u9", steps=other_steps(), skills=(active.id,), ok=i < 6, at=later(1 + i)
        )
    drift = drift_demotion(DriftDemotionParams(database_url=db_url, config_overrides={"demotion_success_delta": 0.25}))
    assert [d.skill_id for d in drift.demoted] == [active.id]
    with engine.connect() as conn:
        assert get_skill(conn, active.id).status == "demoted"
        stored = conn.execute(select(reports).where(reports.c.kind == "drift")).mappings().one()
    assert stored["body"]["demoted"][0]["reason"] == "drift: rolling 0.60 vs baseline 0.90"
    assert stored["flow_run_id"] and stored["id"] == report_id("drift", stored["flow_run_id"], "agent", "u9")


def _skill_active(engine: Engine):  # type: ignore[no-untyped-def]
    source = record(engine, "refund my order", steps=other_steps(), at=earlier(3), agent="agent", user="u9")
    return make_skill(engine, class_hash(engine, source), sources=[source], status=SkillStatus.ACTIVE, user="u9")


def _paused_run_id(skill_id: str, timeout: float = 60.0) -> str:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateName

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(name=FlowRunFilterStateName(any_=["Paused"])))
            )
            for run in runs:
                if (run.parameters.get("params") or {}).get("skill_id") == skill_id:
                    return str(run.id)
            time.sleep(0.5)
    raise AssertionError("the review flow never paused")


def review_in_thread(params: ActivationReviewParams) -> Callable[[], Any]:
    """The review flow called directly in a thread (it pauses there, as in a worker's process); returns the wait for
    its outcome (180 s at most)."""
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("outcome", activation_review(params)))
    thread.start()

    def outcome() -> Any:
        thread.join(timeout=180)
        assert not thread.is_alive(), "the review flow did not end"
        return result["outcome"]

    return outcome


def _review(db_url: str, skill_id: str, run_input: dict[str, Any] | None, timeout: int = 120):  # type: ignore[no-untyped-def]
    from prefect.flow_runs import resume_flow_run

    params = ActivationReviewParams(
        database_url=db_url,
        skill_id=skill_id,
        timeout_seconds=timeout,
        poll_interval_seconds=1,
        config_overrides=OVERRIDES,
    )
    outcome = review_in_thread(params)
    if run_input is not None:
        resume_flow_run(_paused_run_id(skill_id), run_input=run_input)
    return outcome()


def test_review_flow_pauses_and_applies_the_decision(prefect_harness: None, db_url: str, engine: Engine) -> None:
    skill = _skill(engine)
    outcome = _review(
        db_url, skill.id, {"decision": "activate_developer", "reviewer": "alice", "reason": "looks right"}
    )
    assert outcome.applied and outcome.status == "active" and outcome.injection_role == "developer"
    with engine.connect() as conn:
        event = (
            conn.execute(
                select(skill_events).where(skill_events.c.skill_id == skill.id, skill_events.c.to_status == "active")
            )
            .mappings()
            .one()
        )
    assert event["actor"] == "alice" and event["details"]["review"] is True and event["flow_run_id"]


def test_review_timeout_keeps_shadow(prefect_harness: None, sqlite_engine: Engine) -> None:
    """A review nobody answered keeps the skill in shadow, and its run ends Completed with that outcome.

    Regression: the run ended Failed on the server (Prefect fails a run that completes while its expired pause is
    still its state: "The flow was completed and never resumed"), so every unanswered review fired an alert on
    failed runs."""
    from prefect import get_client

    db_url = str(sqlite_engine.url)
    skill = _skill(sqlite_engine)
    outcome = _review(db_url, skill.id, None, timeout=2)
    assert outcome.decision == "keep_shadow" and outcome.applied is False and outcome.reasons == ["review timed out"]
    with get_client(sync_client=True) as client:
        [run] = [r for r in client.read_flow_runs() if r.parameters.get("params", {}).get("skill_id") == skill.id]
    assert run.state is not None and run.state.type.value == "COMPLETED", (run.state.type, run.state.message)
    with sqlite_engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "shadow"
        events = conn.execute(select(skill_events.c.event).where(skill_events.c.skill_id == skill.id)).scalars().all()
    assert "review_timeout" in events


def test_leaving_an_expired_pause_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    """Regression: a failure to leave the pause was logged with the run logger, which itself raised outside a
    flow run (``MissingContextError``): the review's outcome is recorded, so only a warning may come of it."""
    from tasks.review import leave_expired_pause

    leave_expired_pause("not-a-flow-run-id")
    assert "could not leave the expired pause: ValueError" in caplog.text


@pytest.mark.parametrize(
    ("decision", "status", "role"),
    [("activate_user", "active", "user"), ("reject", "rejected", "user"), ("keep_shadow", "shadow", "user")],
)
def test_review_flow_applies_every_other_decision(
    prefect_harness: None, sqlite_engine: Engine, decision: str, status: str, role: str
) -> None:
    skill = _skill(sqlite_engine)
    outcome = _review(str(sqlite_engine.url), skill.id, {"decision": decision, "reviewer": "bob", "reason": "reviewed"})
    assert outcome.decision == decision and outcome.status == status and outcome.injection_role == role
    with sqlite_engine.connect() as conn:
        stored = get_skill(conn, skill.id)
        actors = conn.execute(select(skill_events.c.actor).where(skill_events.c.skill_id == skill.id)).scalars().all()
    assert stored.status == status and stored.injection_role == role
    assert "bob" in actors  # every decision, including keeping the skill in shadow, is logged with its reviewer


def test_a_review_whose_skill_was_decided_elsewhere_does_not_time_out(
    prefect_harness: None, sqlite_engine: Engine
) -> None:
    """A skill activated with `skillflow activate` while its review waited: the review's timeout recorded
    ``review_timeout`` "kept in shadow" on the ACTIVE skill (found on a real fleet by an outside audit), so the
    audit log and the run contradicted the skill's status. The review now ends without a timeout row."""
    from skillflow.lifecycle.decisions import activate_skill

    db_url = str(sqlite_engine.url)
    skill = _skill(sqlite_engine)
    params = ActivationReviewParams(
        database_url=db_url, skill_id=skill.id, timeout_seconds=6, poll_interval_seconds=1, config_overrides=OVERRIDES
    )
    waited = review_in_thread(params)
    _paused_run_id(skill.id)
    activate_skill(sqlite_engine, skill.id, actor="cli:ops")
    outcome = waited()
    assert outcome.applied is False and outcome.status == "active"
    assert outcome.reasons == ["the skill was decided elsewhere: it is active"]
    with sqlite_engine.connect() as conn:
        assert get_skill(conn, skill.id).status == "active"
        events = conn.execute(select(skill_events.c.event).where(skill_events.c.skill_id == skill.id)).scalars().all()
    assert "review_timeout" not in events
