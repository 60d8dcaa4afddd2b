"""Migration 012 on a database whose live skills already share names: it completes, keys the oldest, says so."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, inspect, select, update

from skillflow.kernel.models import utcnow
from skillflow.quality.runner import new_context, run_quality
from skillflow.storage import migrations
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import MIGRATIONS, migrate
from skillflow.storage.schema import build_metadata, schema_migrations, skillbox
from skillflow.storage.skills import live_name_key
from tests.support.oracle.checks import check_statement, migration_files
from tests.support.oracle.ddl_model import Schema, apply, run_script

T0 = utcnow() - timedelta(days=3)
SCRIPT = next(p for p in migration_files() if p.stem == "012_add_live_name_key")


def _row(sid: str, name: str, status: str, age: int, user: str = "u") -> dict[str, Any]:
    live = status in ("candidate", "shadow", "active")
    return {
        "id": sid, "agent_id": "a", "user_id": user, "canonical_hash": sid.ljust(64, "0"), "version": 1,
        "name": name, "description": "d", "status": status, "live_key": sid.ljust(64, "k") if live else None,
        "content": "c", "prompt_version": "v1", "distiller": "offline", "created_at": T0 + timedelta(hours=age),
        "updated_at": T0 + timedelta(hours=age), "injection_role": "user",
    }  # fmt: skip


ROWS = [
    _row("dup-old", "refund-order", "active", 0),
    _row("dup-mid", "refund-order", "shadow", 1),
    _row("dup-new", "refund-order", "candidate", 2),
    _row("retired", "refund-order", "demoted", -1),  # older, but not live: never keyed, never in the way
    _row("other-tenant", "refund-order", "active", 5, user="v"),
    _row("solo", "book-flight", "shadow", 3),
]


def _at_level_11(db_url: str) -> Engine:
    engine = make_engine(db_url)
    md = build_metadata(11)
    md.create_all(engine)
    with engine.begin() as conn:
        for m in MIGRATIONS:
            if m.version <= 11:
                conn.execute(insert(schema_migrations).values(version=m.version, name=m.name, applied_at=utcnow()))
        conn.execute(insert(md.tables["skillbox"]), ROWS)
    return engine


def _keys(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(select(skillbox.c.id, skillbox.c.live_name_key)).all())  # type: ignore[arg-type]


def test_012_over_duplicate_live_names_keys_the_oldest_and_warns(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = _at_level_11(db_url)
    try:
        with caplog.at_level(logging.WARNING, logger="skillflow.storage.migrations"):
            assert migrate(engine)[0] == "012_add_live_name_key"
        assert "2 live skill(s) share their name" in caplog.text
        # The database's sha256 (PostgreSQL) or the connection's (SQLite) equals the application's key.
        assert _keys(engine) == {
            "dup-old": live_name_key("a", "u", "refund-order"),
            "dup-mid": None,
            "dup-new": None,
            "retired": None,
            "other-tenant": live_name_key("a", "v", "refund-order"),
            "solo": live_name_key("a", "u", "book-flight"),
        }
        assert "uq_skillbox_live_name_key" in {ix["name"] for ix in inspect(engine).get_indexes("skillbox")}
        report = run_quality(engine.url.render_as_string(hide_password=False), context=new_context())
        checks = {c.id: c for c in report.checks}
        assert checks["skillbox.live_name_key_iff_live"].status == "passed"  # legacy duplicates do not block
        unique = checks["skillbox.live_names_unique"]
        assert (unique.status, unique.severity) == ("failed", "warning")
        assert {s for s in unique.sample for sid in ("dup-old", "dup-mid", "dup-new") if sid in s}
        # Once the oldest leaves, re-running the backfill keys the next oldest (a repair, never a failure).
        with engine.begin() as conn:
            conn.execute(
                update(skillbox)
                .where(skillbox.c.id == "dup-old")
                .values(status="demoted", live_key=None, live_name_key=None)
            )
            migrations._m012(conn)
        keys = _keys(engine)
        assert (keys["dup-mid"], keys["dup-new"]) == (live_name_key("a", "u", "refund-order"), None)
    finally:
        engine.dispose()


def test_012_blocking_check_catches_a_key_on_a_retired_skill_or_a_live_skill_without_one(
    engine: Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        conn.execute(insert(skillbox), [_row("keyless", "a-name", "active", 0), _row("stale", "b-name", "demoted", 0)])
        conn.execute(update(skillbox).where(skillbox.c.id == "stale").values(live_name_key="s" * 64))
    report = run_quality(db_url, context=new_context())
    check = {c.id: c for c in report.checks}["skillbox.live_name_key_iff_live"]
    assert (check.status, check.severity) == ("failed", "blocking")
    assert {sid for sid in ("keyless", "stale") if any(sid in s for s in check.sample)} == {"keyless", "stale"}


class _OracleConn:
    """What ``skillflow migrate`` executes on Oracle, checked statically and applied to the simulated schema."""

    class dialect:
        name = "oracle"

    class _Count:
        @staticmethod
        def scalar() -> int:
            return 0

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.executed: list[str] = []

    def execute(self, clause: Any) -> Any:
        sql = str(clause).strip()
        assert check_statement(sql) == [], sql
        apply(self.schema, sql)
        self.executed.append(sql)
        return self._Count()


def _oracle_level(level: int) -> Schema:
    schema: Schema | None = None
    for mig, path in zip(MIGRATIONS, migration_files(), strict=True):
        if mig.version <= level:
            schema = run_script(path.read_text(encoding="utf-8"), schema)
    assert schema is not None
    return schema


def test_python_oracle_migration_012_matches_the_sql_file(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _OracleConn(_oracle_level(11))
    tables = conn.schema.tables
    monkeypatch.setattr(migrations, "_has_index", lambda _conn, table, name: name in conn.schema.indexes)
    monkeypatch.setattr(migrations, "_has_column", lambda _conn, table, column: column in tables[table].columns)
    migrations._m012(conn)  # type: ignore[arg-type]
    by_file = run_script(SCRIPT.read_text(encoding="utf-8"), _oracle_level(11))
    assert (conn.schema.tables, conn.schema.indexes) == (by_file.tables, by_file.indexes)
    assert by_file.indexes["uq_skillbox_live_name_key"] == ("skillbox", ("live_name_key",), "unique")
    backfill = " ".join(migrations.M012_BACKFILL.format(hash=migrations._NAME_HASH["oracle"]).lower().split())
    assert backfill in " ".join(SCRIPT.read_text(encoding="utf-8").lower().split())
    assert backfill in " ".join(conn.executed).lower()
    migrations._m012(conn)  # type: ignore[arg-type]  # a re-run adds nothing
    assert (conn.schema.tables, conn.schema.indexes) == (by_file.tables, by_file.indexes)
