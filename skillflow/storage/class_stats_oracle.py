"""The Oracle forms of the fold's upserts: ``MERGE`` statements around a source query compiled for Oracle.

SQLite and PostgreSQL upsert with ``INSERT … ON CONFLICT`` (:mod:`skillflow.storage.class_stats_sql`); Oracle has
no such clause, so each upsert is one ``MERGE INTO <table> t USING (<source>) s ON (<key>) WHEN MATCHED THEN
UPDATE … WHEN NOT MATCHED THEN INSERT …`` with the same source query, compiled by SQLAlchemy's Oracle dialect
with its bind parameters kept (expanding ``IN`` lists rendered). The update rules are those of the other
dialects: counts add, first/last seen widen, the newest run's tool sequence wins, a fingerprint keeps its newest
run, a partition counter adds (or is set by a recount). Verified statically (docs/oracle.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import TextClause, bindparam, text
from sqlalchemy.dialects import oracle
from sqlalchemy.sql import Select

_DIALECT = oracle.dialect()  # type: ignore[no-untyped-call]


def _least(col: str) -> str:
    t, s = f"t.{col}", f"s.{col}"
    return f"CASE WHEN {t} IS NULL THEN {s} WHEN {s} IS NULL THEN {t} WHEN {s} < {t} THEN {s} ELSE {t} END"


def _greatest(col: str) -> str:
    t, s = f"t.{col}", f"s.{col}"
    return f"CASE WHEN {t} IS NULL THEN {s} WHEN {s} IS NULL THEN {t} WHEN {s} > {t} THEN {s} ELSE {t} END"


def merge(
    table: str, source: Select[Any], key: Sequence[str], update: Mapping[str, str], columns: Sequence[str]
) -> TextClause:
    """``MERGE INTO table`` from ``source`` on ``key``: matched rows get ``update`` (column → expression over
    ``t.`` the stored row and ``s.`` the source row), unmatched source rows insert ``columns``."""
    compiled = source.compile(dialect=_DIALECT, compile_kwargs={"render_postcompile": True})
    types = {b.key: b.type for b in compiled.binds.values()}
    on = " AND ".join(f"t.{k} = s.{k}" for k in key)
    sets = ", ".join(f"t.{c} = {e}" for c, e in update.items())
    sql = (
        f"MERGE INTO {table} t USING ({compiled}) s ON ({on}) WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(columns)}) VALUES ({', '.join('s.' + c for c in columns)})"
    )
    params = [bindparam(k, v, type_=types.get(k)) for k, v in compiled.params.items()]
    return text(sql).bindparams(*params)


def merge_stats(source: Select[Any], columns: Sequence[str], key: Sequence[str], counts: Sequence[str]) -> TextClause:
    newer = "s.newest_at >= t.newest_at"
    update = {c: f"t.{c} + s.{c}" for c in counts}
    update.update(
        first_seen=_least("first_seen"),
        last_seen=_greatest("last_seen"),
        newest_at=f"CASE WHEN {newer} THEN s.newest_at ELSE t.newest_at END",
        tool_sequence=f"CASE WHEN {newer} THEN s.tool_sequence ELSE t.tool_sequence END",
        updated_at="s.updated_at",
    )
    return merge("class_stats", source, key, update, columns)


def merge_fingerprints(source: Select[Any], columns: Sequence[str]) -> TextClause:
    return merge("class_fingerprints", source, columns[:4], {"last_seen": _greatest("last_seen")}, columns)


def merge_counters(source: Select[Any], *, add: bool) -> TextClause:
    value = "t.runs_folded + s.runs_folded" if add else "s.runs_folded"
    columns = ("agent_id", "user_id", "runs_folded")
    return merge("partition_state", source, columns[:2], {"runs_folded": value}, columns)
