"""Fan-out of partitions: chunking, the local (embedded) path under the Prefect harness, failure isolation, events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.promotion import cycle
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import reports, skillbox
from tasks import events
from tasks.fanout import FleetSettings, chunk, resolve_mode
from tests.flows.conftest import Names
from tests.support.promotion import AGENT, agent, record_cancel


def seeded(tmp_path: Path, users: list[str]) -> tuple[str, Engine]:
    """A migrated SQLite database whose tenants each have six runs of one cancel procedure (one class to land)."""
    url = f"sqlite:///{tmp_path / 'fan.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    for user in users:
        for i in range(6):
            record_cancel(sf, user, i)
    return url, engine


def test_chunks_keep_order_and_differ_by_at_most_one() -> None:
    items = list(range(23))
    for n in (1, 2, 3, 5, 23, 40):
        groups = chunk(items, n)
        assert [x for g in groups for x in g] == items
        assert len(groups) == min(n, len(items))
        assert max(map(len, groups)) - min(map(len, groups)) <= 1
    assert chunk([], 4) == []
    with pytest.raises(ValueError):
        chunk(items, 0)


def test_mode_outside_a_pool_run_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_mode(None) == "local"  # no flow run, no work pool
    assert resolve_mode("pool") == "pool"
    monkeypatch.setenv("SKILLFLOW_FLEET_FAN_OUT", "pool")
    assert resolve_mode(None) == "pool" and resolve_mode("local") == "local"
    monkeypatch.setenv("SKILLFLOW_FLEET_CHUNKS", "-1")
    with pytest.raises(ValueError):
        FleetSettings()


def test_an_event_that_cannot_be_sent_never_breaks_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.events

    def boom(**_: Any) -> None:
        raise ConnectionError("events API down")

    monkeypatch.setattr(prefect.events, "emit_event", boom)
    report = cycle.PromotionReport(agent_id="a", user_id="u", cycle=1, promoted=["s1"], rejected=[("h", ["x"])])
    assert events.emit_promotion([report]) == 0
    assert events.emit_backlog(5, 10, "db") is False  # below the threshold: nothing to send


@pytest.mark.prefect
@pytest.mark.usefixtures("offline_providers")
def test_local_fan_out_isolates_a_failing_partition(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.promotion_cycle import PartitionsFailed, PromotionCycleParams, promotion_cycle
    from flows.promotion_partitions import PromotionPartitionsParams, promotion_partitions

    users = ["u1", "u2", "u3"]
    url, engine = seeded(tmp_path, users)
    real = cycle.review_flags

    def flags(engine: Any, agent_id: str, user_id: str) -> list[str]:
        if user_id == "u2":
            raise KeyError("broken partition")
        return real(engine, agent_id, user_id)

    monkeypatch.setattr(cycle, "review_flags", flags)
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(events, "emit", lambda event, rid, *a, **k: sent.append((event, rid)) or True)
    state = promotion_cycle(
        PromotionCycleParams(database_url=url, force=True, fan_out="local", config_overrides={"require_shadow": False}),
        return_state=True,
    )
    assert state.is_failed()
    with pytest.raises(PartitionsFailed, match=r"1 of 3 partition\(s\) failed: agent-a/u2 \(report failed: KeyError\)"):
        state.result()
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.user_id, reports.c.body)).all()
        skills = conn.execute(select(skillbox.c.user_id, skillbox.c.id)).all()
    assert sorted(u for u, _ in stored) == users  # one report per partition, exactly once
    assert {u: b["partition_failed"] for u, b in stored} == {"u1": None, "u2": "report failed: KeyError", "u3": None}
    assert sorted(u for u, _ in skills) == ["u1", "u2", "u3"]  # u2's skill landed before its report stage broke
    assert sorted(e for e, _ in sent) == ["skillflow.skill.promoted"] * 2  # failed partition: no promotion event
    assert {rid for _, rid in sent} == {f"skillflow.skill.{sid}" for u, sid in skills if u != "u2"}

    # The automation's path: one tenant through the child flow, forced; the lease and gates still apply.
    monkeypatch.setattr(cycle, "review_flags", real)
    [again] = promotion_partitions(
        PromotionPartitionsParams(database_url=url, partitions=[("agent-a", "u2")], force=True)
    )
    assert again.partition_failed is None and again.promoted == []  # covered by the live skill: no double
    with engine.connect() as conn:
        assert len(conn.execute(select(skillbox)).all()) == 3
    engine.dispose()


@pytest.mark.prefect
@pytest.mark.usefixtures("offline_providers")
def test_batched_partitions_run_a_failing_partition_again_in_its_own_task_run(
    prefect_harness: None, task_names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's chunk runs partitions in batches (one task run per batch); the partition that raises in its
    batch runs again alone, so its failure is its own Failed task run, and every partition is reported once."""
    from flows.promotion_partitions import PromotionPartitionsParams, promotion_partitions

    users = ["u1", "u2", "u3"]
    url, engine = seeded(tmp_path, users)
    real_flags, real_run = cycle.review_flags, cycle.run_partition
    runs: list[str] = []

    def flags(engine: Any, agent_id: str, user_id: str) -> list[str]:
        if user_id == "u2":
            raise KeyError("broken partition")
        return real_flags(engine, agent_id, user_id)

    def counted(engine: Any, agent_id: str, user_id: str, *args: Any, **kwargs: Any) -> Any:
        runs.append(user_id)
        return real_run(engine, agent_id, user_id, *args, **kwargs)

    monkeypatch.setattr(cycle, "review_flags", flags)
    monkeypatch.setattr(cycle, "run_partition", counted)
    params = PromotionPartitionsParams(
        database_url=url,
        partitions=[(AGENT, u) for u in users],
        force=True,
        partitions_per_task=2,
        config_overrides={"require_shadow": False},
    )
    got = promotion_partitions(params)
    assert [r.user_id for r in got] == users  # the chunk's order, whatever ran again
    assert {r.user_id: r.partition_failed for r in got} == {"u1": None, "u2": "report failed: KeyError", "u3": None}
    assert sorted(runs) == ["u1", "u2", "u2", "u3"]  # u2 in its batch, then alone (a non-transient error: no retry)
    with engine.connect() as conn:
        stored = conn.execute(select(reports.c.user_id, reports.c.body)).all()
        skills = conn.execute(select(skillbox.c.user_id)).all()
    assert sorted(u for u, _ in stored) == users  # one report per partition, exactly once
    assert {u: b["partition_failed"] for u, b in stored} == {"u1": None, "u2": "report failed: KeyError", "u3": None}
    assert sorted(u for (u,) in skills) == users  # u2's skill landed once: its rerun found it live
    batches = {f"cycle-2-from-{AGENT}-u1", f"cycle-1-from-{AGENT}-u3"}
    expected = batches | {f"cycle-{AGENT}-u2", f"partition-failed-{AGENT}-u2"}
    assert expected <= task_names.task_runs, task_names.task_runs
    engine.dispose()


@pytest.mark.prefect
@pytest.mark.usefixtures("offline_providers")
def test_a_batch_that_fails_outside_its_partitions_runs_each_of_them_alone(
    prefect_harness: None, task_names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.promotion
    from flows.promotion_partitions import PromotionPartitionsParams, promotion_partitions

    url, engine = seeded(tmp_path, ["u1", "u2"])

    def broken() -> Any:
        raise RuntimeError("settings unreadable in this task run")

    monkeypatch.setattr(tasks.promotion, "get_settings", broken)  # the batch fails before its first partition
    params = PromotionPartitionsParams(
        database_url=url, partitions=[(AGENT, "u1"), (AGENT, "u2")], force=True, partitions_per_task=5,
        config_overrides={"require_shadow": False},
    )  # fmt: skip
    got = promotion_partitions(params)
    assert [(r.user_id, r.partition_failed, len(r.promoted)) for r in got] == [("u1", None, 1), ("u2", None, 1)]
    assert {f"cycle-{AGENT}-u1", f"cycle-{AGENT}-u2"} <= task_names.task_runs
    with engine.connect() as conn:
        assert len(conn.execute(select(skillbox)).all()) == 2
    engine.dispose()


def test_a_pool_run_without_a_database_url_is_refused_before_it_makes_a_local_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment whose URL carries a password records none, so its runs read the worker's
    ``SKILLFLOW_DATABASE_URL``. A worker without it used the built-in ``sqlite:///.skillflow/skillflow.db``: the run
    made that file in the worker's checkout and failed telling the operator to migrate it, and once migrated, every
    cycle "completed" on that empty database (found on a real fleet by an outside audit)."""
    import tasks.common as common
    import tasks.fanout as fanout

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKILLFLOW_DATABASE_URL", raising=False)
    monkeypatch.setattr(fanout, "current_work_pool", lambda: "compute")
    with pytest.raises(common.MissingDatabaseUrl, match="SKILLFLOW_DATABASE_URL") as refused:
        common.engine_for(None)
    assert "worker" in str(refused.value) and not (tmp_path / ".skillflow").exists()
    monkeypatch.setattr(fanout, "current_work_pool", lambda: None)  # served or embedded: the default is the default
    url = f"sqlite:///{tmp_path / 'given.db'}"
    migrate(make_engine(url))
    monkeypatch.setattr(fanout, "current_work_pool", lambda: "compute")
    assert common.engine_for(url) is not None  # a URL given with the run is used on a pool too
