"""drift-demotion in local mode: each partition is its own unit of work; a failing skill check hides nothing.

Three tenants; tenant u2 has a drifting skill and a skill whose stored drift state is corrupted. The flow
checks every partition, stores one report each, demotes and emits the drifted skills (u2's included), refits
u2's rule, and ends Failed naming u2 and the failed skill.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from flows.drift_demotion import DriftDemotionParams, drift_demotion
from skillflow.promotion.calibrate import calibrate
from skillflow.storage.reports import report_id
from skillflow.storage.schema import reports, skillbox
from tasks import events
from tests.flows.conftest import Names
from tests.support.drift import corrupted, drifting, rule_fingerprint
from tests.support.lifecycle import AGENT, EMBEDDER, config

pytestmark = pytest.mark.prefect
USERS = ["u1", "u2", "u3"]


@pytest.mark.usefixtures("offline_providers")
def test_one_tenants_failed_check_stops_nothing(
    prefect_harness: None, db_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    drifted = {u: drifting(engine, user=u).id for u in USERS}
    broken = corrupted(engine, user="u2").id
    calibrate(engine, AGENT, "u2", config(), 1, embedder=EMBEDDER)
    sent: list[tuple[str, str, dict[str, str] | None, Any]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)

    params = DriftDemotionParams(database_url=db_url, config_overrides={"demotion_success_delta": 0.25})
    state = drift_demotion(params, return_state=True)
    assert state.is_failed()
    assert state.message and f"1 failed: {AGENT}/u2 (skill {broken[:12]} check failed: ValueError)" in state.message

    with engine.connect() as conn:
        status = dict(conn.execute(select(skillbox.c.id, skillbox.c.status)).all())
        stored = conn.execute(select(reports.c.id, reports.c.user_id, reports.c.body, reports.c.flow_run_id)).all()
    assert all(status[s] == "demoted" for s in drifted.values()) and status[broken] == "active"
    assert sorted(u for _, u, _, _ in stored) == USERS  # one report per partition, the failed one's included
    by_user = {u: body for _, u, body, _ in stored}
    assert [d["skill_id"] for d in by_user["u2"]["demoted"]] == [drifted["u2"]]
    assert by_user["u2"]["failed"] == [[broken, "check failed: ValueError"]]
    assert all([d["skill_id"] for d in by_user[u]["demoted"]] == [drifted[u]] for u in ("u1", "u3"))
    assert all(rid == report_id("drift", run, AGENT, u) for rid, u, _, run in stored)
    demoted_events = {
        (res, (labels or {}).get("skillflow.user_id")) for e, res, labels, *_ in sent if e == events.DEMOTED
    }
    assert demoted_events == {(f"skillflow.skill.{drifted[u]}", u) for u in USERS}  # u2's demotion is not hidden
    stored_fp, live_fp = rule_fingerprint(engine, "u2")
    assert stored_fp == live_fp  # u2's rule was refit without its demoted skill


def test_a_scoped_run_checks_only_its_partitions(prefect_harness: None, db_url: str, engine: Engine) -> None:
    drifted = {u: drifting(engine, user=u).id for u in ("u1", "u2")}
    params = DriftDemotionParams(database_url=db_url, user_id="u2", config_overrides={"demotion_success_delta": 0.25})
    report = drift_demotion(params)
    assert [d.skill_id for d in report.demoted] == [drifted["u2"]] and report.failed == []
    with engine.connect() as conn:
        status = dict(conn.execute(select(skillbox.c.user_id, skillbox.c.status)).all())
        stored = conn.execute(select(reports.c.user_id)).scalars().all()
    assert status == {"u1": "active", "u2": "demoted"} and stored == ["u2"]


def batched(db_url: str, per_task: int) -> DriftDemotionParams:
    """Every tenant of USERS as a fleet child's chunk, ``per_task`` partitions per task run."""
    overrides = {"demotion_success_delta": 0.25}
    return DriftDemotionParams(
        database_url=db_url, partitions=[(AGENT, u) for u in USERS], partitions_per_task=per_task,
        config_overrides=overrides,
    )  # fmt: skip


def demotion_events(sent: list[tuple[str, str, dict[str, str] | None, Any]]) -> list[tuple[str, str | None]]:
    """(resource, user id) of every demotion event sent, sorted; a doubled event shows twice."""
    return sorted((res, (labels or {}).get("skillflow.user_id")) for e, res, labels, *_ in sent if e == events.DEMOTED)


@pytest.mark.usefixtures("offline_providers")
def test_batched_partitions_check_a_failing_partition_again_alone_and_emit_once(
    prefect_harness: None, db_url: str, engine: Engine, task_names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's child checks partitions in batches (one task run per batch). The partition whose skill check
    fails runs again alone, as its own Failed ``check-drift`` task run; its earlier demotion is neither lost nor
    doubled, and every partition's report is stored once."""
    import tasks.drift

    drifted = {u: drifting(engine, user=u).id for u in USERS}
    broken = corrupted(engine, user="u2").id
    sent: list[tuple[str, str, dict[str, str] | None, Any]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    real, runs = tasks.drift.run_drift, []

    def counted(engine: Any, config: Any, **kwargs: Any) -> Any:
        runs.append(kwargs["user_id"])
        return real(engine, config, **kwargs)

    monkeypatch.setattr(tasks.drift, "run_drift", counted)
    params = batched(db_url, 2)
    state = drift_demotion(params, return_state=True)
    assert state.is_failed()
    assert state.message and f"1 failed: {AGENT}/u2 (skill {broken[:12]} check failed: ValueError)" in state.message
    assert sorted(runs) == ["u1", "u2", "u2", "u3"]  # u2 in its batch, then alone

    with engine.connect() as conn:
        status = dict(conn.execute(select(skillbox.c.id, skillbox.c.status)).all())
        stored = conn.execute(select(reports.c.user_id, reports.c.body)).all()
    assert all(status[s] == "demoted" for s in drifted.values()) and status[broken] == "active"
    assert sorted(u for u, _ in stored) == USERS  # one report per partition, exactly once
    by_user = {u: body for u, body in stored}
    assert [d["skill_id"] for d in by_user["u2"]["demoted"]] == [drifted["u2"]]  # the batch's demotion, kept
    assert by_user["u2"]["failed"] == [[broken, "check failed: ValueError"]]
    assert demotion_events(sent) == sorted((f"skillflow.skill.{drifted[u]}", u) for u in USERS)  # each exactly once
    expected = {f"check-drift-2-from-{AGENT}-u1", f"check-drift-1-from-{AGENT}-u3", f"check-drift-{AGENT}-u2"}
    assert expected <= task_names.task_runs, task_names.task_runs


@pytest.mark.usefixtures("offline_providers")
def test_a_batch_that_fails_after_a_committed_demotion_loses_and_doubles_nothing(
    prefect_harness: None, db_url: str, engine: Engine, task_names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch task run fails after u1's demotion committed and before its event went out: every partition
    then runs alone; u1's rerun reads its demotion back, so it is reported and emitted exactly once."""
    import tasks.drift

    drifted = {u: drifting(engine, user=u).id for u in USERS}
    sent: list[tuple[str, str, dict[str, str] | None, Any]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    real_log, calls = tasks.drift.log_drift, []

    def log_once_then_fail(report: Any, agent_id: Any, user_id: Any) -> None:
        calls.append(user_id)
        if len(calls) == 1:
            raise RuntimeError("the batch dies after its first partition committed")
        real_log(report, agent_id, user_id)

    monkeypatch.setattr(tasks.drift, "log_drift", log_once_then_fail)
    params = batched(db_url, 5)
    report = drift_demotion(params)
    assert sorted(d.skill_id for d in report.demoted) == sorted(drifted.values()) and report.failed == []
    with engine.connect() as conn:
        status = dict(conn.execute(select(skillbox.c.id, skillbox.c.status)).all())
        stored = conn.execute(select(reports.c.user_id, reports.c.body)).all()
    assert all(status[s] == "demoted" for s in drifted.values())
    assert sorted(u for u, _ in stored) == USERS  # one report per partition, exactly once
    assert all([d["skill_id"] for d in body["demoted"]] == [drifted[u]] for u, body in stored)  # u1's kept
    assert demotion_events(sent) == sorted((f"skillflow.skill.{drifted[u]}", u) for u in USERS)  # each exactly once
    assert {f"check-drift-{AGENT}-{u}" for u in USERS} <= task_names.task_runs, task_names.task_runs


@pytest.mark.usefixtures("offline_providers")
def test_a_chunk_run_twice_for_one_drift_run_stores_each_tenants_report_once(
    prefect_harness: None, db_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fan-out child re-created for the same drift run (a retried parent that re-chunked, a duplicated child)
    checks its partitions again in a new flow run: each tenant's report is keyed by the drift run and tenant, so
    the second child replaces the first one's rows and keeps the demotions the first one committed; it sends
    their events again under the ids the first child used, so the Prefect server keeps each demotion once."""
    drifted = {u: drifting(engine, user=u).id for u in USERS}
    drift_run = "0b9e5bb4-6f0e-4c43-9d2e-drift0000001"
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    first = drift_demotion(batched(db_url, 2).model_copy(update={"drift_run_id": drift_run}))
    first_keys = sorted((res, key) for e, res, _, _, key in sent if e == events.DEMOTED)
    sent.clear()
    again = drift_demotion(batched(db_url, 2).model_copy(update={"drift_run_id": drift_run}))
    assert sorted(d.skill_id for d in first.demoted) == sorted(drifted.values())
    assert sorted(d.skill_id for d in again.demoted) == sorted(drifted.values())  # read back, not lost
    want = sorted((f"skillflow.skill.{s}", events.stable_id(events.DEMOTED, s, drift_run)) for s in drifted.values())
    assert first_keys == want
    assert sorted((res, key) for e, res, _, _, key in sent if e == events.DEMOTED) == want  # the same events
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.id, reports.c.user_id, reports.c.flow_run_id, reports.c.body)).all()
    assert sorted(u for _, u, _, _ in stored) == USERS  # once per tenant, not once per child run
    assert {rid for rid, _, _, _ in stored} == {report_id("drift", drift_run, AGENT, u) for u in USERS}
    assert {run for _, _, run, _ in stored} == {drift_run}
    assert all([d["skill_id"] for d in body["demoted"]] == [drifted[u]] for _, u, _, body in stored)
