"""The fold's Oracle forms (``MERGE``) and migration 011 on Oracle, verified statically (no Oracle server here).

Every statement the fold, the recount and the counters run is compiled by SQLAlchemy's Oracle dialect and must
pass the project's Oracle checker and parse as Oracle SQL with sqlglot; the upserts must be ``MERGE`` with the
same update rules as ``ON CONFLICT`` on the other backends. ``skillflow migrate``'s Oracle statements for 011
must build what ``sql/oracle/011_add_partition_runs_folded.sql`` builds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlalchemy import insert
from sqlalchemy.dialects import oracle
from sqlglot import exp

from skillflow.kernel.models import utcnow
from skillflow.storage import class_stats_sql as q
from skillflow.storage import counters, migrations
from skillflow.storage.schema import class_fingerprints
from tests.support.oracle.checks import check_oracle_sql, check_statement, oracle_dir
from tests.support.oracle.ddl_model import apply, run_script

SCOPES = [(None, None, None), ("a", None, None), ("a", "u", None), (None, None, [("a", "u"), ("b", "v")])]
NOW = utcnow()


def _sql(stmt: Any) -> str:
    return str(stmt.compile(dialect=oracle.dialect(), compile_kwargs={"render_postcompile": True}))


def _statements(agent_id: str | None, user_id: str | None, parts: list[tuple[str, str]] | None) -> dict[str, Any]:
    return {
        "fold_stats": q.fold_stats("oracle", NOW, agent_id, user_id, parts),
        "fold_fingerprints": q.fold_fingerprints("oracle", agent_id, user_id, parts),
        "fold_counters": counters.fold_counters("oracle", agent_id, user_id, parts),
        "recount_counters": counters.fold_counters("oracle", agent_id, user_id, parts, recount=True),
        "clear_pending": q.clear_pending(agent_id, user_id, parts),
        "outdated_keys": q.outdated_keys(agent_id, user_id, parts),
        "recount_stats": q.insert_stats(q.recount_select(NOW, agent_id, user_id)),
        "recount_fingerprints": insert(class_fingerprints).from_select(
            list(q.FP_COLUMNS), q.fingerprints_select(agent_id, user_id)
        ),
        "reset_counters": counters.reset_counters(agent_id, user_id),
    }


@pytest.mark.parametrize("scope", SCOPES, ids=["all", "agent", "tenant", "partitions"])
def test_every_fold_statement_is_valid_oracle_sql(scope: tuple[Any, Any, Any]) -> None:
    for name, stmt in _statements(*scope).items():
        sql = _sql(stmt)
        assert check_oracle_sql(sql + ";\n") == [], name
        assert "ON CONFLICT" not in sql.upper() and "EXCLUDED" not in sql.upper(), name
        parsed = sqlglot.parse_one(sql, read="oracle")
        if name.startswith(("fold_", "recount_counters")):
            assert isinstance(parsed, exp.Merge), name


def test_the_merges_keep_the_upsert_rules() -> None:
    stats = " ".join(_sql(q.fold_stats("oracle", NOW, None, None)).split())
    assert "MERGE INTO class_stats t USING (" in stats
    assert "ON (t.agent_id = s.agent_id AND t.user_id = s.user_id AND t.canonical_hash = s.canonical_hash)" in stats
    for col in ("successes", "failures", "unknown", "stamped", "distinct_queries"):
        assert f"t.{col} = t.{col} + s.{col}" in stats  # counts add
    assert "t.since =" not in stats  # since keeps the stored value (a moved since is recounted)
    assert "WHEN s.first_seen < t.first_seen THEN s.first_seen" in stats
    assert "WHEN s.last_seen > t.last_seen THEN s.last_seen" in stats
    assert "t.tool_sequence = CASE WHEN s.newest_at >= t.newest_at THEN s.tool_sequence" in stats
    fps = " ".join(_sql(q.fold_fingerprints("oracle", None, None)).split())
    assert "t.query_fingerprint = s.query_fingerprint" in fps and "WHEN s.last_seen > t.last_seen" in fps
    add = _sql(counters.fold_counters("oracle", None, None))
    assert "t.runs_folded = t.runs_folded + s.runs_folded" in add
    assert "t.runs_folded = s.runs_folded" in _sql(counters.fold_counters("oracle", None, None, recount=True))
    assert "stats_pending IS NOT NULL" in add  # only the pending runs are added


def test_the_merge_keeps_its_bind_parameters() -> None:
    stmt = counters.fold_counters("oracle", "agent-1", None, [("agent-1", "u")])
    params = stmt.compile(dialect=oracle.dialect()).params
    assert sorted(v for v in params.values() if isinstance(v, str)) == ["agent-1", "agent-1", "u"]
    stats = q.fold_stats("oracle", NOW, None, None).compile(dialect=oracle.dialect()).params
    assert NOW in stats.values()


class _SimulatedOracleConn:
    class dialect:
        name = "oracle"

    def __init__(self, schema: Any) -> None:
        self.schema, self.executed = schema, []

    def execute(self, clause: Any) -> None:
        sql = str(clause).strip()
        assert check_statement(sql) == [], sql
        if not sql.upper().startswith("DELETE"):
            apply(self.schema, sql)
        self.executed.append(sql)


def _files(upto: int) -> list[Path]:
    return [p for p in sorted(oracle_dir().glob("0*.sql")) if int(p.name[:3]) <= upto]


@pytest.mark.parametrize("has_column", [False, True])
def test_python_oracle_migration_011_matches_the_sql_file(monkeypatch: pytest.MonkeyPatch, has_column: bool) -> None:
    schema = None
    for path in _files(10):
        schema = run_script(path.read_text(encoding="utf-8"), schema)
    conn = _SimulatedOracleConn(schema)
    if has_column:  # a DBA ran the file first: migrate only drops the bookkeeping row again
        apply(conn.schema, "alter table partition_state add (runs_folded integer default 0 not null)")
    monkeypatch.setattr(migrations, "_has_column", lambda _c, table, column: has_column)
    migrations._m011(conn)  # type: ignore[arg-type]
    assert conn.executed[-1] == "DELETE FROM class_stats_state"  # the next fold recounts and sets the counters
    assert len(conn.executed) == (1 if has_column else 2)
    fresh = None
    for path in _files(11):
        fresh = run_script(path.read_text(encoding="utf-8"), fresh)
    assert fresh is not None and conn.schema.tables == fresh.tables
