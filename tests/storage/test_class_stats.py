"""Maintained class statistics equal the full aggregation on random histories (SQLite and PostgreSQL).

Histories mix runs in and out of order (backdated imports older than everything folded), folds at random
points, demotions and deprecations, a retired skill re-activated or deleted (``since`` moves back), stamping
and unstamping by activation, deletes through :func:`delete_runs`, and recounts. After every history the
statistics the cycle reads (:func:`partition_stats`, and the one-statement :func:`read_stats` for all
partitions) must equal :func:`aggregate_classes`, class by class, field by field.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, func, insert, select, update

from skillflow.kernel.models import ClassStats
from skillflow.storage.aggregate import aggregate_classes, partitions, partitions_reference
from skillflow.storage.class_stats import delete_runs, fold, mark_stale, partition_stats, read_stats, recount
from skillflow.storage.counters import read_counters, recounted
from skillflow.storage.schema import (
    class_fingerprints,
    class_stats,
    class_stats_state,
    partition_state,
    skillbox,
    workflow_memory,
)
from skillflow.storage.skills import get_skill, live_key, stamp_class, unstamp

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TENANTS = [("a1", "u1"), ("a1", "u2")]
HASHES = [f"{i:064x}" for i in range(1, 3)]
OUTCOMES = ["success", "failure", "unknown"]
_ids = itertools.count()

run_op = st.tuples(
    st.just("run"),
    st.sampled_from(TENANTS),
    st.sampled_from([*HASHES, None]),  # None: a run without tool calls (no class, still a stored run)
    st.sampled_from(OUTCOMES),
    st.one_of(st.none(), st.sampled_from(["q1", "q2", "q3"])),
    st.integers(0, 30),  # minutes after T0: any order, so many runs are backdated
)
retire_op = st.tuples(
    st.just("retire"),
    st.sampled_from(TENANTS),
    st.sampled_from(HASHES),
    st.integers(0, 30),
    st.sampled_from(["demoted", "deprecated"]),
)
op = st.one_of(
    run_op,
    run_op,
    run_op,
    st.tuples(st.just("fold"), st.sampled_from([None, *TENANTS])),
    st.tuples(st.just("fold"), st.just(None)),
    retire_op,
    retire_op,
    st.tuples(st.just("unretire"), st.sampled_from(["reactivate", "delete"])),
    st.tuples(st.just("stamp"), st.sampled_from(TENANTS), st.sampled_from(HASHES)),
    st.tuples(st.just("unstamp")),
    st.tuples(st.just("delete"), st.integers(1, 3)),
    st.tuples(st.just("relabel"), st.integers(0, 20), st.sampled_from(OUTCOMES)),
    st.tuples(st.just("recount")),
)


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (workflow_memory, skillbox, class_stats, class_fingerprints, class_stats_state, partition_state):
            conn.execute(delete(table))


def _run(conn: Any, tenant: tuple[str, str], h: str | None, outcome: str, fp: str | None, minutes: int) -> None:
    conn.execute(
        insert(workflow_memory).values(
            id=f"r{next(_ids)}",
            agent_id=tenant[0],
            user_id=tenant[1],
            query="q",
            query_fingerprint=fp,
            canonical_hash=h,
            tool_sequence=f"tool_{h[-1]} > other" if h else None,  # one sequence per class, as capture derives it
            outcome=outcome,
            execution_outcome=outcome,
            outcome_source="execution",
            created_at=T0 + timedelta(minutes=minutes),
            steps=[],
            skills_activated=[],
        )
    )


def _skill(conn: Any, tenant: tuple[str, str], h: str, status: str, demoted_at: datetime | None) -> str:
    sid = f"s{next(_ids)}"
    version = 1 + int(
        conn.execute(
            select(func.max(skillbox.c.version)).where(
                skillbox.c.agent_id == tenant[0], skillbox.c.user_id == tenant[1], skillbox.c.canonical_hash == h
            )
        ).scalar()
        or 0
    )
    conn.execute(
        insert(skillbox).values(
            id=sid,
            agent_id=tenant[0],
            user_id=tenant[1],
            canonical_hash=h,
            version=version,
            name=f"skill-{sid}",
            description="d",
            status=status,
            live_key=live_key(tenant[0], tenant[1], h) if status == "active" else None,
            content="c",
            prompt_version="v",
            distiller="d",
            created_at=T0,
            updated_at=T0,
            demoted_at=demoted_at,
        )
    )
    return sid


def _relabel(conn: Any, nth: int, outcome: str) -> None:
    """A stored run's outcome changed after its capture (a conversation's late outcome, docs/guide/runtime.md):
    the row is updated and, once folded, its class is marked for a recount, as the capture path does."""
    wm = workflow_memory
    row = conn.execute(
        select(wm.c.id, wm.c.agent_id, wm.c.user_id, wm.c.canonical_hash, wm.c.stats_pending)
        .order_by(wm.c.id).offset(nth).limit(1)
    ).first()  # fmt: skip
    if row is None:
        return
    conn.execute(update(wm).where(wm.c.id == row.id).values(outcome=outcome))
    if row.canonical_hash is not None and row.stats_pending != 1:
        mark_stale(conn, [(row.agent_id, row.user_id, row.canonical_hash)])


def _apply(engine: Engine, step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "fold":
        fold(engine, *(step[1] or (None, None)))
        return
    if kind == "recount":
        recount(engine)
        return
    with engine.begin() as conn:
        if kind == "run":
            _run(conn, *step[1:])
        elif kind == "retire":
            _skill(conn, step[1], step[2], step[4], T0 + timedelta(minutes=step[3]))
        elif kind == "unretire":
            sid = conn.execute(
                select(skillbox.c.id).where(skillbox.c.status.in_(["demoted", "deprecated"])).order_by(skillbox.c.id)
            ).scalar()
            if sid is not None and step[1] == "delete":
                conn.execute(delete(skillbox).where(skillbox.c.id == sid))
            elif sid is not None:  # a retired skill restored (its demoted_at no longer counts)
                conn.execute(update(skillbox).where(skillbox.c.id == sid).values(status="shadow"))
        elif kind == "stamp":
            live = select(skillbox.c.id).where(skillbox.c.live_key == live_key(step[1][0], step[1][1], step[2]))
            if conn.execute(live).first() is None:
                stamp_class(conn, get_skill(conn, _skill(conn, step[1], step[2], "active", None)))
        elif kind == "unstamp":
            sid = conn.execute(
                select(skillbox.c.id).where(skillbox.c.status == "active").order_by(skillbox.c.id)
            ).scalar()
            if sid is not None:
                unstamp(conn, get_skill(conn, sid))
                conn.execute(update(skillbox).where(skillbox.c.id == sid).values(status="shadow", live_key=None))
        elif kind == "relabel":
            _relabel(conn, step[1], step[2])
        elif kind == "delete":
            ids = conn.execute(select(workflow_memory.c.agent_id, workflow_memory.c.user_id, workflow_memory.c.id)
                               .order_by(workflow_memory.c.id).limit(step[1])).all()  # fmt: skip
            for agent_id, user_id, run_id in ids:
                delete_runs(conn, agent_id, user_id, [run_id])


def _reference(engine: Engine) -> dict[tuple[str, str], list[ClassStats]]:
    with engine.connect() as conn:
        return {p: aggregate_classes(conn, *p) for p in partitions(conn)}


def _assert_counters(engine: Engine) -> None:
    """Counters (folded + pending) equal COUNT(*) per partition, and the listing equals the reference."""
    wm = workflow_memory
    with engine.connect() as conn:
        counted = dict(
            ((r[0], r[1]), r[2])
            for r in conn.execute(
                select(wm.c.agent_id, wm.c.user_id, func.count()).group_by(wm.c.agent_id, wm.c.user_id)
            )
        )
        if recounted(conn):
            kept = read_counters(conn, [*TENANTS, ("nobody", "x")])
            assert {p: c.runs for p, c in kept.items() if c.runs} == counted
            assert partitions(conn) == partitions_reference(conn)


def _assert_agree(engine: Engine) -> None:
    _assert_counters(engine)
    expected = _reference(engine)
    for p in TENANTS:
        assert partition_stats(engine, *p) == expected.get(p, []), p
        for s in expected.get(p, []):  # "Distill now" reads one class
            assert partition_stats(engine, *p, s.canonical_hash) == [s]
    fold(engine)
    with engine.connect() as conn:
        everything, outdated = read_stats(conn)
    assert outdated == []
    assert {p: v for p, v in everything.items() if v} == {p: v for p, v in expected.items() if v}
    with engine.connect() as conn:  # after a fold nothing is pending: runs_folded alone is COUNT(*)
        wm = workflow_memory
        counted = select(wm.c.agent_id, wm.c.user_id, func.count()).group_by(wm.c.agent_id, wm.c.user_id)
        folded = select(partition_state.c.agent_id, partition_state.c.user_id, partition_state.c.runs_folded)
        assert {(r[0], r[1]): r[2] for r in conn.execute(folded) if r[2]} == {
            (r[0], r[1]): r[2] for r in conn.execute(counted)
        }
    _assert_counters(engine)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(op, min_size=1, max_size=40))
def test_maintained_statistics_equal_the_full_aggregation(engine: Engine, history: list[tuple[Any, ...]]) -> None:
    _reset(engine)
    for step in history:
        _apply(engine, step)
    _assert_agree(engine)


def test_a_backdated_import_after_a_fold_is_counted(engine: Engine) -> None:
    """A run older than everything folded (an import of last year's runs) is pending like any new run."""
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        _run(conn, TENANTS[0], h, "success", "q1", 100)
    fold(engine)
    with engine.begin() as conn:
        _run(conn, TENANTS[0], h, "failure", "q2", -5000)
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.successes, s.failures, s.distinct_queries) == (1, 1, 1)  # q2 failed: not a request it served
    assert s.first_seen == T0 - timedelta(minutes=5000)


@pytest.mark.parametrize("path", ["fold", "recount", "reference"])
def test_distinct_queries_count_the_requests_of_successful_runs_only(engine: Engine, path: str) -> None:
    """Five successes of one request and a failure and an unknown outcome of two others: the procedure succeeded
    on one request, so ``min_distinct_queries = 2`` is not met (an outside audit found 3 counted)."""
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        for m in range(5):
            _run(conn, TENANTS[0], h, "success", "q1", m)
        _run(conn, TENANTS[0], h, "failure", "q2", 6)
        _run(conn, TENANTS[0], h, "unknown", "q3", 7)
    if path == "recount":
        recount(engine)
    if path == "reference":
        with engine.connect() as conn:
            [s] = aggregate_classes(conn, *TENANTS[0])
    else:
        [s] = partition_stats(engine, *TENANTS[0])
    assert (s.successes, s.failures, s.unknown, s.distinct_queries) == (5, 1, 1, 1)


def test_an_outcome_changed_after_the_fold_moves_the_distinct_queries(engine: Engine) -> None:
    """A folded run that turns out failed (a conversation's late outcome) no longer counts its request, and one
    that turns out successful counts it, from the next fold on."""
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        _run(conn, TENANTS[0], h, "success", "q1", 1)
        _run(conn, TENANTS[0], h, "success", "q2", 2)
        _run(conn, TENANTS[0], h, "unknown", "q3", 3)
    fold(engine)
    assert partition_stats(engine, *TENANTS[0])[0].distinct_queries == 2
    with engine.begin() as conn:
        ids = dict(conn.execute(select(workflow_memory.c.query_fingerprint, workflow_memory.c.id)).all())
    with engine.begin() as conn:
        _relabel_id(conn, ids["q2"], "failure")
    fold(engine)
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.successes, s.failures, s.distinct_queries) == (1, 1, 1)
    with engine.begin() as conn:
        _relabel_id(conn, ids["q3"], "success")
    fold(engine)
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.successes, s.failures, s.unknown, s.distinct_queries) == (2, 1, 0, 2)
    with engine.connect() as conn:
        assert partition_stats(engine, *TENANTS[0]) == aggregate_classes(conn, *TENANTS[0])


def _relabel_id(conn: Any, run_id: str, outcome: str) -> None:
    wm = workflow_memory
    conn.execute(update(wm).where(wm.c.id == run_id).values(outcome=outcome))
    mark_stale(conn, [(TENANTS[0][0], TENANTS[0][1], HASHES[0])])


def test_a_demotion_after_the_fold_resets_the_counts(engine: Engine) -> None:
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        for m in range(5):
            _run(conn, TENANTS[0], h, "success", f"q{m}", m)
    fold(engine)
    with engine.begin() as conn:
        _skill(conn, TENANTS[0], h, "demoted", T0 + timedelta(minutes=2, seconds=30))
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.executions, s.distinct_queries, s.since) == (2, 2, T0 + timedelta(minutes=2, seconds=30))
    with engine.connect() as conn:
        assert partition_stats(engine, *TENANTS[0]) == aggregate_classes(conn, *TENANTS[0])


def test_a_later_demotion_moves_since_forward(engine: Engine) -> None:
    """A second demotion of a class already folded with a ``since``: only runs after the newer one count."""
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        for m in range(1, 6):
            _run(conn, TENANTS[0], h, "success", "q1", m)
        _skill(conn, TENANTS[0], h, "demoted", T0 + timedelta(minutes=2))
    fold(engine)
    with engine.begin() as conn:
        _skill(conn, TENANTS[0], h, "deprecated", T0 + timedelta(minutes=4))
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.executions, s.since) == (1, T0 + timedelta(minutes=4))


def test_deleted_runs_leave_the_statistics(engine: Engine) -> None:
    _reset(engine)
    h = HASHES[0]
    with engine.begin() as conn:
        _run(conn, TENANTS[0], h, "success", "q1", 1)
        _run(conn, TENANTS[0], h, "failure", "q2", 2)
    fold(engine)
    with engine.begin() as conn:
        run_id = conn.execute(select(workflow_memory.c.id).where(workflow_memory.c.outcome == "failure")).scalar_one()
        assert delete_runs(conn, *TENANTS[0], [run_id]) == 1
        assert delete_runs(conn, "other", "tenant", [run_id]) == 0  # scoped by tenant: nothing else goes
    [s] = partition_stats(engine, *TENANTS[0])
    assert (s.successes, s.failures, s.distinct_queries, s.last_seen) == (1, 0, 1, T0 + timedelta(minutes=1))


def test_a_hand_delete_is_repaired_by_recount(engine: Engine) -> None:
    """A DBA deleting rows behind skillflow's back is not seen by the fold; ``recount`` repairs it (documented)."""
    _reset(engine)
    with engine.begin() as conn:
        _run(conn, TENANTS[0], HASHES[0], "success", "q1", 1)
        _run(conn, TENANTS[0], HASHES[0], "success", "q2", 2)
    fold(engine)
    with engine.begin() as conn:
        conn.execute(delete(workflow_memory).where(workflow_memory.c.query_fingerprint == "q2"))
    assert partition_stats(engine, *TENANTS[0])[0].successes == 2  # stale until the recount
    assert recount(engine) == 1
    assert partition_stats(engine, *TENANTS[0])[0].successes == 1
    mark_stale_keys = [(TENANTS[0][0], TENANTS[0][1], HASHES[0])]
    with engine.begin() as conn:  # marking a class stale recounts just that class at the next fold
        conn.execute(delete(workflow_memory))
        mark_stale(conn, mark_stale_keys)
    assert partition_stats(engine, *TENANTS[0]) == []


def test_fold_clears_the_pending_marks_and_a_second_fold_does_nothing(engine: Engine) -> None:
    _reset(engine)
    with engine.begin() as conn:
        for m in range(3):
            _run(conn, TENANTS[0], HASHES[0], "success", "q1", m)
    assert fold(engine)["recounted"] == 1  # the first fold after the migration is a recount
    with engine.begin() as conn:
        _run(conn, TENANTS[0], HASHES[1], "success", "q1", 9)
    assert fold(engine) == {"folded": 1, "recounted": 0}
    assert fold(engine) == {"folded": 0, "recounted": 0}
    with engine.connect() as conn:
        pending = select(func.count()).where(workflow_memory.c.stats_pending.is_not(None))
        assert conn.execute(pending).scalar() == 0


def test_dry_run_reads_the_full_aggregation_and_writes_nothing(engine: Engine) -> None:
    _reset(engine)
    with engine.begin() as conn:
        _run(conn, TENANTS[0], HASHES[0], "success", "q1", 1)
    stats = partition_stats(engine, *TENANTS[0], write=False)
    assert [s.successes for s in stats] == [1]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(class_stats)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(class_stats_state)).scalar() == 0
    fold(engine)
    with engine.begin() as conn:
        _run(conn, TENANTS[0], HASHES[0], "failure", "q2", 2)  # pending: the dry run aggregates, still writes nothing
    assert [s.failures for s in partition_stats(engine, *TENANTS[0], write=False)] == [1]
    fold(engine)
    with engine.begin() as conn:  # nothing pending: the dry run reads the statistics (planted to tell them apart)
        conn.execute(update(class_stats).values(unknown=7))
    assert [s.unknown for s in partition_stats(engine, *TENANTS[0], write=False)] == [7]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).where(workflow_memory.c.stats_pending.is_not(None))).scalar() == 0


@pytest.mark.parametrize("scope", [None, TENANTS[0]])
def test_concurrent_folds_converge(engine: Engine, scope: tuple[str, str] | None) -> None:
    """Folds racing each other (threads; real concurrency on PostgreSQL) count every run exactly once."""
    from concurrent.futures import ThreadPoolExecutor

    _reset(engine)
    fold(engine)
    with engine.begin() as conn:
        for m in range(40):
            _run(conn, TENANTS[m % 2], HASHES[m % 2], OUTCOMES[m % 3], f"q{m % 7}", m)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: fold(engine, *(scope or (None, None))), range(4)))
    _assert_agree(engine)
