"""Migration 014 on a database an older release folded: its distinct queries counted failed and unknown runs'
requests; after the migration the next fold recounts every class, and only served requests count."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, insert, select, update

from skillflow.kernel.models import utcnow
from skillflow.storage.class_stats import fold, partition_stats
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import MIGRATIONS, migrate
from skillflow.storage.schema import build_metadata, class_fingerprints, class_stats, schema_migrations
from tests.support.oracle.checks import check_migration, migration_files
from tests.support.oracle.ddl_model import run_script

T0 = utcnow() - timedelta(days=3)
H = "ab" * 32


def _run(i: int, fingerprint: str, outcome: str) -> dict[str, Any]:
    return {
        "id": f"r{i}", "agent_id": "a", "user_id": "u", "query": fingerprint, "query_fingerprint": fingerprint,
        "canonical_hash": H, "tool_sequence": "lookup > refund", "outcome": outcome, "execution_outcome": outcome,
        "outcome_source": "execution", "created_at": T0 + timedelta(minutes=i), "steps": [], "skills_activated": [],
    }  # fmt: skip


def _at_level_13_folded_by_the_old_release(db_url: str) -> Engine:
    engine = make_engine(db_url)
    md = build_metadata(13)
    md.create_all(engine)
    with engine.begin() as conn:
        for m in MIGRATIONS:
            if m.version <= 13:
                conn.execute(insert(schema_migrations).values(version=m.version, name=m.name, applied_at=utcnow()))
        runs = [_run(i, "refund order a1", "success") for i in range(5)]
        runs += [_run(5, "refund order b2", "failure"), _run(6, "refund order c3", "unknown")]
        conn.execute(insert(md.tables["workflow_memory"]), runs)
    fold(engine)  # the statistics tables exist at 013; then what the old release's fold left in them:
    with engine.begin() as conn:
        conn.execute(update(class_stats).values(distinct_queries=3))
        conn.execute(
            insert(class_fingerprints),
            [{"agent_id": "a", "user_id": "u", "canonical_hash": H, "query_fingerprint": fp, "last_seen": T0}
             for fp in ("refund order b2", "refund order c3")],
        )  # fmt: skip
    return engine


def test_014_recounts_so_only_served_requests_count(db_url: str) -> None:
    engine = _at_level_13_folded_by_the_old_release(db_url)
    try:
        assert migrate(engine)[0] == "014_recount_distinct_queries"
        [s] = partition_stats(engine, "a", "u")
        assert (s.successes, s.failures, s.unknown, s.distinct_queries) == (5, 1, 1, 1)
        fold(engine)  # the recount the migration asked for rewrote the maintained tables
        with engine.connect() as conn:
            assert conn.execute(select(class_stats.c.distinct_queries)).scalar_one() == 1
            assert conn.execute(select(class_fingerprints.c.query_fingerprint)).scalars().all() == ["refund order a1"]
        assert migrate(engine) == []
    finally:
        engine.dispose()


def test_the_oracle_file_of_014_passes_the_checker_and_runs_again() -> None:
    [path] = [p for p in migration_files() if p.stem == "014_recount_distinct_queries"]
    text = path.read_text(encoding="utf-8")
    assert check_migration(text) == []
    assert "delete from class_stats_state" in text.lower()
    schema = run_script(text, run_script(text, None))  # re-runnable
    assert schema is not None
