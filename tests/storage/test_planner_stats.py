"""After a recount, PostgreSQL plans the pending-runs reads from the pending-only index, not a scan of history.

A recount (or the first fold, which is one) clears ``stats_pending`` on every stored run. Analyzed while the runs
were pending, the table's statistics still said every run was pending, so the partition listing of every cycle
scanned the whole history (0.6–5.5 s at 1M rows, docs/BENCHMARKS.md) until autovacuum — off on some servers —
analyzed it again. The recount now refreshes the planner's statistics itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, event, text

from skillflow.lab.bench.scale_bench import Scenario, generate
from skillflow.storage.class_stats import fold, recount, refresh_planner_stats
from skillflow.storage.counters import listed_partitions, listing
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_engine

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not POSTGRES_DSN, reason=PG_SKIP_REASON)]
SCENARIO = Scenario(20, 1500, 3)  # 30 000 runs: enough for the planner to prefer an index when it can


@pytest.fixture
def pg() -> Iterator[Engine]:
    for url in _pg_engine():
        eng = make_engine(url)
        migrate(eng)
        yield eng
        eng.dispose()


def plan_of_listing(engine: Engine) -> str:
    """The plan of the partition listing's statement, unscoped."""
    sql = str(listing(None, None).compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return "\n".join(r[0] for r in conn.execute(text("EXPLAIN " + sql)))


@pytest.mark.parametrize("how", ["recount", "first fold"])
def test_a_recount_leaves_the_planner_reading_the_pending_index(pg: Engine, how: str) -> None:
    generate(pg, SCENARIO, pending=True)  # analyzed while every run is pending: the stale picture
    assert "Seq Scan on workflow_memory" in plan_of_listing(pg)  # what the planner does with that picture
    result = recount(pg) if how == "recount" else fold(pg)["recounted"]
    assert result == 60
    plan = plan_of_listing(pg)
    assert "Seq Scan on workflow_memory" not in plan, plan
    assert "ix_workflow_memory_stats_pending" in plan, plan
    with pg.connect() as conn:
        assert len(listed_partitions(conn, None, None)) == 20


def test_only_a_recount_or_a_large_fold_analyzes(pg: Engine) -> None:
    seen: list[str] = []
    listen = lambda conn, cursor, sql, *args: seen.append(sql)  # noqa: E731
    generate(pg, SCENARIO)
    event.listen(pg, "before_cursor_execute", listen)
    try:
        recount(pg)
        assert [s for s in seen if s.startswith("ANALYZE")] == [
            "ANALYZE workflow_memory", "ANALYZE class_stats", "ANALYZE class_fingerprints", "ANALYZE partition_state"
        ]  # fmt: skip
        seen.clear()
        generate(pg, SCENARIO, 10, prefix="n", pending=True)
        seen.clear()
        assert fold(pg)["folded"] == 10
        assert not [s for s in seen if s.startswith("ANALYZE")]  # a small fold leaves it to autovacuum
    finally:
        event.remove(pg, "before_cursor_execute", listen)
    sqlite = make_engine("sqlite://")
    assert refresh_planner_stats(sqlite) is False
    sqlite.dispose()
