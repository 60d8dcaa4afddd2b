"""SQL aggregation per partition: figures, post-demotion filtering, samples, cadence, query plans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text, update

from skillflow.capture.outcome import Workflow
from skillflow.kernel.models import SkillStatus, Step
from skillflow.runtime import Skillflow
from skillflow.storage.aggregate import (
    aggregate_classes,
    aggregate_query,
    class_samples,
    class_signature,
    cycle_count,
    mark_cycle,
    partitions,
    runs_since_last_cycle,
)
from skillflow.storage.schema import skillbox
from skillflow.storage.skills import insert_skill, transition

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
REFUND = [Step("lookup_order", {"order_id": "A1"}, {"id": "A1"}), Step("issue_refund", {"order_id": "A1", "amount": 5})]
SEARCH = [Step("search", {"q": "x"}, [])]
GOLDEN = "5e6b70e86ec21732b51dd93e2ddd9627b12c43186d3d048e7a8d356b41c37e12"


def _evaluator(wf: Workflow) -> Any:
    verdict = wf.metadata.get("verdict")
    if verdict == "boom":
        raise RuntimeError("business check failed")
    return verdict


def _sf(engine: Engine, agent: str = "agent") -> Skillflow:
    return Skillflow(agent_id=agent, engine=engine, workflow_outcome_evaluator=_evaluator)


def _record(sf: Skillflow, query: str, verdict: str, minutes: int, user: str = "u1", steps: list[Step] = REFUND) -> str:
    when = T0 + timedelta(minutes=minutes)
    res = sf.record_run(query, user, steps, created_at=when, metadata={"verdict": verdict}, strict=True)
    return res.run_id


def _by_hash(stats: list[Any]) -> dict[str, Any]:
    return {s.canonical_hash: s for s in stats}


def test_figures_per_class(engine: Engine) -> None:
    sf = _sf(engine)
    _record(sf, "Refund order A1", "success", 0)
    _record(sf, "  refund ORDER a1 ", "success", 1)  # same normalized query
    _record(sf, "Refund order B2", "failure", 2)
    _record(sf, "Refund order C3", "boom", 3)  # evaluator error → unknown, excluded from executions
    _record(sf, "find things", "success", 4, steps=SEARCH)
    _record(sf, "hello", "success", 5, steps=[])  # no tool calls: no identity, not aggregated
    _record(sf, "Refund order A1", "success", 6, user="u2")  # another tenant
    with engine.connect() as conn:
        stats = aggregate_classes(conn, "agent", "u1")
    assert stats[0].canonical_hash == GOLDEN  # sorted by executions
    refund = _by_hash(stats)[GOLDEN]
    assert (refund.executions, refund.successes, refund.failures, refund.unknown) == (3, 2, 1, 1)
    assert refund.success_rate == pytest.approx(2 / 3)
    assert refund.distinct_queries == 1  # A1 (twice, normalized); B2 failed and C3 is unknown: not served
    assert refund.first_seen == T0 and refund.last_seen == T0 + timedelta(minutes=3)
    assert refund.tool_sequence == "lookup_order > issue_refund"
    assert refund.since is None and refund.stamped == 0
    assert len(stats) == 2
    with engine.connect() as conn:
        only = aggregate_classes(conn, "agent", "u1", canonical_hash=GOLDEN)
        other = aggregate_classes(conn, "agent", "u2")
        assert partitions(conn) == [("agent", "u1"), ("agent", "u2")]
        assert partitions(conn, user_id="u2") == [("agent", "u2")]
        assert partitions(conn, agent_id="nobody") == []
    assert [s.canonical_hash for s in only] == [GOLDEN]
    assert other[0].executions == 1 and other[0].user_id == "u2"


def test_class_with_only_unknown_runs_has_zero_rate(engine: Engine) -> None:
    sf = _sf(engine)
    _record(sf, "q", "boom", 0)
    with engine.connect() as conn:
        (s,) = aggregate_classes(conn, "agent", "u1")
    assert (s.executions, s.unknown, s.success_rate) == (0, 1, 0.0)


def _skill(conn: Any, status: SkillStatus, user: str = "u1") -> str:
    rec = insert_skill(
        conn,
        agent_id="agent",
        user_id=user,
        canonical_hash=GOLDEN,
        name="refund-order",
        description="Refund an order.",
        content="---\nname: refund-order\n---\n",
        status=status,
    )
    return rec.id


def test_only_post_demotion_runs_count_for_every_figure(engine: Engine) -> None:
    sf = _sf(engine)
    for i, q in enumerate(["a", "b", "c", "d"]):
        _record(sf, f"refund {q}", "success", i)
    _record(sf, "refund e", "failure", 4)
    demoted_at = T0 + timedelta(minutes=10)
    with engine.begin() as conn:
        sid = _skill(conn, SkillStatus.ACTIVE)
        transition(conn, sid, SkillStatus.DEMOTED, actor="test", reason="drift")
        conn.execute(update(skillbox).where(skillbox.c.id == sid).values(demoted_at=demoted_at))
        _skill(conn, SkillStatus.ACTIVE, user="u2")  # another tenant's skill never filters u1
    with engine.connect() as conn:
        assert aggregate_classes(conn, "agent", "u1") == []  # every run predates the demotion
    _record(sf, "refund a", "success", 11)  # a query seen before the demotion counts once again
    _record(sf, "refund z", "failure", 12)
    _record(sf, "refund y", "success", 13)
    with engine.connect() as conn:
        (s,) = aggregate_classes(conn, "agent", "u1")
        ok, bad = class_samples(conn, "agent", "u1", GOLDEN, s.since, 5, 5)
    assert (s.executions, s.successes, s.failures, s.distinct_queries) == (3, 2, 1, 2)  # a, y; z failed
    assert s.since == demoted_at
    assert s.first_seen == T0 + timedelta(minutes=11) and s.last_seen == T0 + timedelta(minutes=13)
    assert sorted(r.query for r in ok) == ["refund a", "refund y"] and [r.query for r in bad] == ["refund z"]


def test_newest_demotion_wins_and_live_skills_do_not_filter(engine: Engine) -> None:
    sf = _sf(engine)
    for i in range(6):
        _record(sf, f"refund {i}", "success", i * 10)
    with engine.begin() as conn:
        old = _skill(conn, SkillStatus.SHADOW)
        transition(conn, old, SkillStatus.DEPRECATED, actor="test", reason="tool removed: x")
        conn.execute(update(skillbox).where(skillbox.c.id == old).values(demoted_at=T0 + timedelta(minutes=5)))
        new = _skill(conn, SkillStatus.SHADOW)
        transition(conn, new, SkillStatus.DEPRECATED, actor="test", reason="tool removed: y")
        conn.execute(update(skillbox).where(skillbox.c.id == new).values(demoted_at=T0 + timedelta(minutes=25)))
        _skill(conn, SkillStatus.SHADOW)  # a live version of the class does not reset evidence
    with engine.connect() as conn:
        (s,) = aggregate_classes(conn, "agent", "u1")
    assert s.executions == 3 and s.since == T0 + timedelta(minutes=25)


def test_active_skill_stamps_are_counted(engine: Engine) -> None:
    sf = _sf(engine)
    _record(sf, "refund a", "success", 0)
    with engine.begin() as conn:
        _skill(conn, SkillStatus.ACTIVE)
    _record(sf, "refund b", "success", 1)  # stamped at write time
    with engine.connect() as conn:
        (s,) = aggregate_classes(conn, "agent", "u1")
    assert s.stamped == 2 and s.executions == 2


def test_samples_newest_first_limited_and_signature(engine: Engine) -> None:
    sf = _sf(engine)
    ids = [_record(sf, f"refund {i}", "success" if i % 3 else "failure", i) for i in range(9)]
    with engine.connect() as conn:
        ok, bad = class_samples(conn, "agent", "u1", GOLDEN, None, 3, 2)
        none_ok, _ = class_samples(conn, "agent", "u1", GOLDEN, None, 0, 0)
        cut_ok, _ = class_samples(conn, "agent", "u1", GOLDEN, T0 + timedelta(minutes=7), 5, 0)
        sig = class_signature(conn, "agent", "u1", GOLDEN)
        assert class_signature(conn, "agent", "u1", "f" * 64) == []
    assert [r.id for r in ok] == [ids[8], ids[7], ids[5]]
    assert [r.id for r in bad] == [ids[6], ids[3]]
    assert all(r.outcome == "success" for r in ok) and bad[0].outcome == "failure"
    assert ok[0].steps[1]["tool"] == "issue_refund" and ok[0].steps[1]["arguments"] == {"order_id": "A1", "amount": 5}
    assert ok[0].created_at == T0 + timedelta(minutes=8)
    assert none_ok == [] and [r.id for r in cut_ok] == [ids[8]]
    assert sig == [
        {"tool": "lookup_order", "arg_keys": ["order_id"], "errored": False},
        {"tool": "issue_refund", "arg_keys": ["amount", "order_id"], "errored": False},
    ]


def test_cadence_counts_and_mark_cycle(engine: Engine) -> None:
    sf = _sf(engine)
    with engine.connect() as conn:
        assert runs_since_last_cycle(conn, "agent", "u1") == 0 and cycle_count(conn, "agent", "u1") == 0
    for i in range(4):
        _record(sf, f"q{i}", "success", i)
    _record(sf, "hello", "success", 5, steps=[])  # every stored run counts for cadence
    _record(sf, "q", "success", 6, user="u2")
    with engine.begin() as conn:
        assert runs_since_last_cycle(conn, "agent", "u1") == 5
        assert mark_cycle(conn, "agent", "u1", T0) == 1
        assert runs_since_last_cycle(conn, "agent", "u1") == 0
        assert runs_since_last_cycle(conn, "agent", "u2") == 1
    _record(sf, "q9", "success", 9)
    with engine.begin() as conn:
        assert runs_since_last_cycle(conn, "agent", "u1") == 1
        assert mark_cycle(conn, "agent", "u1", T0, cycle=2) == 2
        assert mark_cycle(conn, "agent", "u1", T0, cycle=2) == 2  # a retried mark converges
        assert mark_cycle(conn, "agent", "u1", T0) == 3
        assert mark_cycle(conn, "agent", "u2", T0, cycle=1) == 1  # first mark with an explicit cycle
        assert runs_since_last_cycle(conn, "agent", "u1") == 0


def test_sqlite_plan_is_an_index_only_range_scan(sqlite_engine: Engine) -> None:
    stmt = aggregate_query("agent", "u1").compile(sqlite_engine, compile_kwargs={"literal_binds": True})
    with sqlite_engine.connect() as conn:
        plan = " | ".join(str(r[3]) for r in conn.execute(text(f"EXPLAIN QUERY PLAN {stmt}")))
    # Migration 004's covering index answers the grouped part without reading table rows.
    assert (
        "SEARCH workflow_memory USING COVERING INDEX ix_workflow_memory_class_cover (agent_id=? AND user_id=?" in plan
    )
    assert "SCAN workflow_memory" not in plan  # never a full-table scan
    assert "TEMP B-TREE FOR GROUP BY" not in plan  # the index order serves the GROUP BY
    # The latest tool sequence per class is one seek on the same index (the old class index is gone).
    assert (
        "SEARCH seq USING INDEX ix_workflow_memory_class_cover (agent_id=? AND user_id=? AND canonical_hash=?)" in plan
    )


def test_bench_index_swap_measures_the_pre_004_plan(tmp_path: Any) -> None:
    """``bench cycle`` times the pre-004 index set on its throwaway db, then restores the shipped schema."""
    from skillflow.lab.bench.cycle_bench import use_index_set
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    engine = make_engine(f"sqlite:///{tmp_path / 'bench.db'}")
    migrate(engine)
    stmt = aggregate_query("agent", "u1").compile(engine, compile_kwargs={"literal_binds": True})

    def plan() -> str:
        with engine.connect() as conn:
            return " | ".join(str(r[3]) for r in conn.execute(text(f"EXPLAIN QUERY PLAN {stmt}")))

    assert "COVERING INDEX ix_workflow_memory_class_cover" in plan()
    use_index_set(engine, covering=False)
    old = plan()
    assert "USING INDEX ix_workflow_memory_class (agent_id=? AND user_id=?" in old and "_cover" not in old
    assert use_index_set(engine, covering=False) == 0  # already there: nothing built
    use_index_set(engine, covering=True)
    assert "COVERING INDEX ix_workflow_memory_class_cover" in plan() and "ix_workflow_memory_class " not in plan()
    engine.dispose()
