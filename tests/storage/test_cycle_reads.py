"""A cycle's reads grow with its partitions' classes, not with history (SQLite and PostgreSQL).

The statements the ``promotion-cycle`` flow issues to list its partitions and read a chunk (fold, counters,
due partitions' statistics, this flow run's reports) are counted with a ``before_cursor_execute`` listener: the
count is the same after the stored history grows tenfold, and a partition that is not due issues none at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event

from skillflow.lab.bench.scale_bench import Scenario, generate
from skillflow.promotion.chunk import prefetch
from skillflow.promotion.cycle import run_partition
from skillflow.storage.aggregate import aggregate_classes, partitions, partitions_reference
from skillflow.storage.class_stats import fold, recount
from tests.support.promotion import config, offline_providers  # noqa: F401 - a fixture

TENANTS = 6
SCENARIO = Scenario(TENANTS, 40, 3)


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def note(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def _listing_and_chunk(engine: Engine, **cfg: Any) -> tuple[list[str], dict[Any, Any]]:
    with statements(engine) as seen:
        with engine.connect() as conn:
            parts = partitions(conn)
        shared = prefetch(engine, parts, config(**cfg), dry_run=False, force=False, flow_run_id="flow-1")
    return seen, shared


def _grow(engine: Engine, prefix: str, rows: int) -> None:
    generate(engine, SCENARIO, rows, prefix=prefix, pending=True)
    fold(engine)


def test_listing_and_chunk_read_do_not_grow_with_history(engine: Engine) -> None:
    generate(engine, SCENARIO)
    recount(engine)
    generate(engine, SCENARIO, TENANTS * 3, prefix="s", pending=True)  # a few pending runs for the chunk's fold
    small, shared = _listing_and_chunk(engine, promotion_every_n_runs=1)
    assert len(shared) == TENANTS and all(p.stats for p in shared.values())  # every partition due, stats read
    _grow(engine, "x", SCENARIO.rows * 10)  # ten times the history, folded
    generate(engine, SCENARIO, TENANTS * 3, prefix="y", pending=True)  # and as many pending runs as before
    large, shared = _listing_and_chunk(engine, promotion_every_n_runs=1)
    assert len(small) == len(large), (small, large)
    with engine.connect() as conn:
        for (a, u), pre in shared.items():  # the chunk's read is the full aggregation of each partition
            assert pre.stats == aggregate_classes(conn, a, u)
            assert pre.counters.runs == SCENARIO.runs_per_tenant * 11 + 6 and pre.counters.pending == 0
    _, shared = _listing_and_chunk(engine, promotion_every_n_runs=1)  # nothing pending: no fold at all
    with statements(engine) as seen:
        prefetch(engine, list(shared), config(promotion_every_n_runs=1), dry_run=False, force=False, flow_run_id="f")
    assert len(seen) == 3, seen  # recount check, counters, statistics (every partition is due: no report lookup)


def test_a_partition_that_is_not_due_issues_no_statement(engine: Engine, offline_providers: None) -> None:  # noqa: F811
    generate(engine, SCENARIO)
    recount(engine)
    cfg = config(promotion_every_n_runs=10_000)
    _, shared = _listing_and_chunk(engine, promotion_every_n_runs=10_000)
    assert all(p.stats is None for p in shared.values())  # nothing due: no statistics read
    for (a, u), pre in shared.items():
        with statements(engine) as seen:
            report = run_partition(engine, a, u, cfg, force=False, flow_run_id="flow-1", prefetched=pre)
        assert seen == [] and report.partition_skipped and report.partition_skipped.startswith("cadence")


def test_a_due_partition_does_not_read_its_statistics_again(engine: Engine, offline_providers: None) -> None:  # noqa: F811
    generate(engine, SCENARIO)
    recount(engine)
    _, shared = _listing_and_chunk(engine, promotion_every_n_runs=1)
    a, u = next(iter(shared))
    with statements(engine) as seen:
        report = run_partition(engine, a, u, config(promotion_every_n_runs=1), force=False, prefetched=shared[(a, u)])
    assert report.partition_skipped is None and report.candidates_considered == SCENARIO.classes_per_tenant
    assert not [s for s in seen if re.search(r"\bclass_stats\b", s) or "ix_workflow_memory" in s], seen
    assert not [s for s in seen if s.startswith("SELECT") and "GROUP BY workflow_memory.canonical_hash" in s]


def test_listing_from_counters_equals_the_reference_before_and_after_a_fold(engine: Engine) -> None:
    generate(engine, SCENARIO)
    with engine.connect() as conn:  # no recount yet: the reference answers
        assert partitions(conn) == partitions_reference(conn)
    recount(engine)
    generate(engine, Scenario(TENANTS + 2, 5, 2), prefix="p", pending=True)  # two new tenants, only pending
    with engine.connect() as conn:
        assert partitions(conn) == partitions_reference(conn) and len(partitions(conn)) == TENANTS + 2
        assert partitions(conn, user_id="user-1") == [("bench-agent", "user-1")]
    fold(engine)
    with engine.connect() as conn:
        assert partitions(conn) == partitions_reference(conn)


def test_a_dry_run_chunk_read_writes_nothing(engine: Engine) -> None:
    generate(engine, SCENARIO)
    recount(engine)
    generate(engine, SCENARIO, TENANTS, prefix="p", pending=True)  # one pending run per partition
    with statements(engine) as seen:
        shared = prefetch(engine, [("bench-agent", "user-0")], config(), dry_run=True, force=True, flow_run_id=None)
    assert all(s.split()[0].upper() in ("SELECT", "WITH") for s in seen), seen
    assert shared[("bench-agent", "user-0")].stats is None  # runs pending: the partition aggregates at the gates


def test_upgrading_to_011_counts_history_until_the_next_fold_recounts(db_url: str) -> None:
    """A store folded at 010 gets zero counters from 011: the listing and cadence count history until the next
    fold, which is a recount and sets every counter."""
    from sqlalchemy import insert, text

    from skillflow.kernel.models import utcnow
    from skillflow.storage.counters import read_counters, recounted
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import MIGRATIONS, migrate
    from skillflow.storage.schema import schema_migrations

    eng = make_engine(db_url)
    try:
        with eng.begin() as conn:
            schema_migrations.create(conn, checkfirst=True)
            for mig in MIGRATIONS:
                if mig.version <= 10:
                    mig.apply(conn)
                    conn.execute(
                        insert(schema_migrations).values(version=mig.version, name=mig.name, applied_at=utcnow())
                    )
            for i in range(5):
                conn.execute(
                    text(
                        "INSERT INTO workflow_memory (id, agent_id, user_id, query, outcome, execution_outcome, "
                        "outcome_source, created_at, steps, skills_activated, stats_pending) VALUES "
                        "(:id, 'a', :u, 'q', 'success', 'success', 'execution', :at, '[]', '[]', NULL)"
                    ),
                    {"id": f"r{i}", "u": f"u{i % 2}", "at": utcnow().replace(tzinfo=None)},
                )
            now = utcnow().replace(tzinfo=None)
            conn.execute(text("INSERT INTO class_stats_state VALUES (1, :n, :n, 5)"), {"n": now})  # folded at 010
        assert "011_add_partition_runs_folded" in migrate(eng)
        with eng.connect() as conn:
            assert not recounted(conn)
            assert partitions(conn) == [("a", "u0"), ("a", "u1")]  # the reference answers meanwhile
        fold(eng)
        with eng.connect() as conn:
            assert recounted(conn)
            assert {p: c.runs_folded for p, c in read_counters(conn, partitions(conn)).items()} == {
                ("a", "u0"): 3,
                ("a", "u1"): 2,
            }
    finally:
        eng.dispose()


def test_concurrent_chunk_reads_converge(engine: Engine) -> None:
    """Two children reading their chunks at once (disjoint, then overlapping: a retried child) fold every pending
    run exactly once; on PostgreSQL the scoped folds of disjoint chunks run side by side."""
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import func, select

    from skillflow.storage.counters import read_counters
    from skillflow.storage.schema import workflow_memory as wm

    generate(engine, SCENARIO)
    recount(engine)
    generate(engine, SCENARIO, SCENARIO.rows, prefix="p", pending=True)
    with engine.connect() as conn:
        parts = partitions(conn)
    half = len(parts) // 2
    chunks = [parts[:half], parts[half:], parts[half - 1 : half + 1]]
    cfg = config(promotion_every_n_runs=1)
    with ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda c: prefetch(engine, c, cfg, dry_run=False, force=True, flow_run_id=None), chunks))
    with engine.connect() as conn:
        counted = dict(
            ((r[0], r[1]), r[2])
            for r in conn.execute(
                select(wm.c.agent_id, wm.c.user_id, func.count()).group_by(wm.c.agent_id, wm.c.user_id)
            )
        )
        assert {p: c.runs_folded for p, c in read_counters(conn, parts).items()} == counted
        assert conn.execute(select(func.count()).where(wm.c.stats_pending.is_not(None))).scalar() == 0
        for shared in done[:2]:
            for (a, u), pre in shared.items():
                assert pre.stats == aggregate_classes(conn, a, u)


def test_a_chunk_larger_than_a_slice_reads_in_bounded_statements(engine: Engine, monkeypatch: Any) -> None:
    """IN lists stay bounded (10 000 partitions in one list overflow PostgreSQL's parser stack): a chunk is folded
    and read in slices, with the same answer."""
    from skillflow.promotion import chunk
    from skillflow.storage import class_stats, counters

    for module in (chunk, counters, class_stats):
        monkeypatch.setattr(module, "SLICE", 4)
    generate(engine, SCENARIO)
    recount(engine)
    generate(engine, SCENARIO, SCENARIO.rows, prefix="p", pending=True)
    with engine.connect() as conn:
        parts = partitions(conn)
    users: list[set[str]] = []

    def note(conn: Any, cursor: Any, sql: str, params: Any, *args: Any) -> None:
        values = list(params.values() if isinstance(params, dict) else params)
        flat = [x for v in values for x in (v if isinstance(v, list) else [v])]  # PostgreSQL binds one array
        users.append({v for v in flat if isinstance(v, str) and v.startswith("user-")})

    event.listen(engine, "before_cursor_execute", note)
    try:
        shared = prefetch(engine, parts, config(), dry_run=False, force=True, flow_run_id="flow-1")
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert len(parts) == TENANTS and max(len(u) for u in users) == 4  # no statement lists more than a slice
    with engine.connect() as conn:
        for (a, u), pre in shared.items():
            assert pre.stats == aggregate_classes(conn, a, u) and pre.counters.pending == 0


def test_a_partition_list_over_several_agents_and_users_is_exact(engine: Engine) -> None:
    """Listed (a, u1) and (b, u2) fold those two partitions only, not (a, u2) or (b, u1) from the product."""
    from sqlalchemy import insert, select

    from skillflow.kernel.models import utcnow
    from skillflow.storage.counters import read_counters
    from skillflow.storage.schema import workflow_memory as wm

    recount(engine)
    pairs = [("a", "u1"), ("a", "u2"), ("b", "u1"), ("b", "u2"), ("a:", "u1")]
    with engine.begin() as conn:
        for i, (a, u) in enumerate(pairs):
            conn.execute(
                insert(wm).values(id=f"r{i}", agent_id=a, user_id=u, query="q", outcome="success",
                                  execution_outcome="success", outcome_source="execution", created_at=utcnow(),
                                  steps=[], skills_activated=[])
            )  # fmt: skip
    fold(engine, partitions=[("a", "u1"), ("b", "u2")])
    with engine.connect() as conn:
        left = {(r[0], r[1]) for r in conn.execute(select(wm.c.agent_id, wm.c.user_id).where(wm.c.stats_pending == 1))}
        counted = read_counters(conn, pairs)
    assert left == {("a", "u2"), ("b", "u1"), ("a:", "u1")}
    assert {p: (c.runs_folded, c.pending) for p, c in counted.items()} == {
        ("a", "u1"): (1, 0), ("b", "u2"): (1, 0), ("a", "u2"): (0, 1), ("b", "u1"): (0, 1), ("a:", "u1"): (0, 1)
    }  # fmt: skip


def test_sqlite_reads_pending_runs_off_the_pending_index(sqlite_engine: Engine) -> None:
    """SQLite's planner walked a tenant index through every stored run to group the pending ones (the fold took
    seconds at 1M rows); every statement that reads pending runs must search the pending-only index instead."""
    from sqlalchemy import text

    from skillflow.kernel.models import utcnow
    from skillflow.storage import class_stats_sql as q
    from skillflow.storage import counters

    scoped = [("a", "u1"), ("a", "u2")]
    statements_ = {
        "fold_delta": q.fold_delta(utcnow(), None, None, scoped),
        "fingerprints": q.fingerprints_select(None, None, None, True, scoped),
        "counters": counters.run_counts("a", None, scoped),
        "clear": q.clear_pending("a", "u1"),
    }
    with sqlite_engine.connect() as conn:
        for name, stmt in statements_.items():
            sql = str(stmt.compile(sqlite_engine, compile_kwargs={"literal_binds": True, "render_postcompile": True}))
            plan = [r[3] for r in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
            assert any("ix_workflow_memory_stats_pending" in p for p in plan), (name, plan)
            assert not [p for p in plan if p.startswith("SCAN workflow_memory")], (name, plan)


def test_a_cycle_counts_one_another_flow_run_made_after_its_chunk_read(
    db_url: str,
    offline_providers: None,  # noqa: F811
) -> None:
    """A fleet audit (2026-12-06): a chunk reads its partitions' counters before it takes each one's lease; the
    re-qualification automation's run cycled a partition meanwhile, and the chunk's cycle then reported the same
    cycle number and did not advance the counter (cycles 1, 2, 2; counter 2): the rejection backoff, counted in
    cycles, ran a cycle long. The cycle's number is read again once the lease is held."""
    from sqlalchemy import select

    from skillflow.storage.schema import partition_state
    from tests.support.promotion import cancel_history

    engine, _ = cancel_history(db_url)
    cfg, p = config(), ("agent-a", "u1")
    first = run_partition(engine, *p, cfg, force=True, flow_run_id="cycle-run-1")
    early = prefetch(engine, [p], cfg, dry_run=False, force=True, flow_run_id="chunk-B")
    other = run_partition(engine, *p, cfg, force=True, flow_run_id="requalify-A")
    late = run_partition(engine, *p, cfg, force=True, flow_run_id="chunk-B", prefetched=early[p])
    with engine.connect() as conn:
        count = conn.execute(select(partition_state.c.cycle_count).where(partition_state.c.user_id == "u1")).scalar()
    assert (first.cycle, other.cycle, late.cycle, count) == (1, 2, 3, 3)
    engine.dispose()
