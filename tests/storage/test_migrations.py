"""``migrate`` on SQLite and PostgreSQL: idempotent, recorded, and upgrades end identical to fresh installs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, inspect, select, text
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.models import utcnow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import MIGRATIONS, applied_versions, migrate
from skillflow.storage.schema import CLASS_COVER_COLUMNS, build_metadata, schema_migrations, skillbox

NAMES = [m.name for m in MIGRATIONS]


@pytest.fixture
def raw(db_url: str) -> Iterator[Engine]:
    """An empty, unmigrated database on each backend."""
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def snapshot(engine: Engine) -> dict[str, Any]:
    """What reflection sees: columns (type, nullability, default), constraint names, indexes."""
    insp = inspect(engine)
    out: dict[str, Any] = {}
    for table in sorted(insp.get_table_names()):
        out[table] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"], c.get("default")) for c in insp.get_columns(table)],
            "checks": sorted(str(c.get("name")) for c in insp.get_check_constraints(table)),
            "pk": (insp.get_pk_constraint(table)["constrained_columns"]),
            "unique": sorted(str(u.get("name")) for u in insp.get_unique_constraints(table)),
            "indexes": sorted((str(i["name"]), tuple(i["column_names"])) for i in insp.get_indexes(table)),
        }
    return out


def _legacy_skill(i: int) -> dict[str, Any]:
    now = utcnow()
    return {
        "id": f"legacy-{i}",
        "agent_id": "a",
        "user_id": "u",
        "canonical_hash": f"{i:064x}",
        "version": 1,
        "name": f"legacy-skill-{i}",
        "description": "Use when a customer asks to cancel a reservation.",
        "status": "active" if i == 0 else "shadow",
        "live_key": f"a|u|{i}",
        "content": "---\nname: legacy\n---\n",
        "prompt_version": "v0",
        "distiller": "upstream",
        "tools": ["lookup_order"],
        "created_at": now,
        "updated_at": now,
    }


def _record(engine: Engine, *versions: int) -> None:
    with engine.begin() as conn:
        schema_migrations.create(conn, checkfirst=True)
        for v in versions:
            name = next(m.name for m in MIGRATIONS if m.version == v)
            conn.execute(insert(schema_migrations).values(version=v, name=name, applied_at=utcnow()))


def _reference(db_url: str, tmp_path: Any) -> dict[str, Any]:
    """A fresh install's snapshot on the same backend (another SQLite file, or another PostgreSQL schema)."""
    schema = None
    if db_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        admin = make_engine(db_url)
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        admin.dispose()
        url = db_url.replace(db_url.split("search_path%3D", 1)[1], schema)
    eng = make_engine(url)
    try:
        migrate(eng)
        return snapshot(eng)
    finally:
        eng.dispose()
        if schema is not None:
            admin = make_engine(db_url)
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()


def test_migrate_is_idempotent_and_recorded(raw: Engine) -> None:
    assert applied_versions(raw) == set()
    assert migrate(raw) == NAMES
    first = snapshot(raw)
    assert migrate(raw) == []
    assert snapshot(raw) == first
    with raw.connect() as conn:
        rows = conn.execute(select(schema_migrations.c.version, schema_migrations.c.name).order_by("version")).all()
        applied_at = conn.execute(select(schema_migrations.c.applied_at)).scalars().all()
    assert [tuple(r) for r in rows] == [(m.version, m.name) for m in MIGRATIONS]
    assert all(ts.tzinfo is not None for ts in applied_at)
    assert "injection_role" in {c[0] for c in first["skillbox"]["columns"]}
    assert "shadow_evaluations" in {c[0] for c in first["workflow_memory"]["columns"]}


def test_upgrade_from_pre_002_schema_equals_fresh_install(raw: Engine, db_url: str, tmp_path: Any) -> None:
    legacy = build_metadata(1)
    legacy.create_all(raw)
    with raw.begin() as conn:
        conn.execute(insert(legacy.tables["skillbox"]), [_legacy_skill(i) for i in range(3)])
    _record(raw, 1)
    assert "injection_role" not in {c["name"] for c in inspect(raw).get_columns("skillbox")}

    assert migrate(raw) == NAMES[1:]

    assert snapshot(raw) == _reference(db_url, tmp_path)
    with raw.connect() as conn:
        roles = conn.execute(select(skillbox.c.id, skillbox.c.injection_role).order_by(skillbox.c.id)).all()
    assert [tuple(r) for r in roles] == [(f"legacy-{i}", "user") for i in range(3)]
    with pytest.raises(IntegrityError), raw.begin() as conn:  # the check constraint is live after the upgrade
        conn.execute(skillbox.update().where(skillbox.c.id == "legacy-0").values(injection_role="system"))


def test_manually_managed_schema_with_the_002_column_migrates_cleanly(raw: Engine, db_url: str, tmp_path: Any) -> None:
    build_metadata(2).create_all(raw)  # injection_role added by hand, bookkeeping says only 001
    _record(raw, 1)
    assert migrate(raw) == NAMES[1:]
    assert migrate(raw) == []
    assert snapshot(raw) == _reference(db_url, tmp_path)


def _index_names(engine: Engine, table: str) -> set[str]:
    return {str(ix["name"]) for ix in inspect(engine).get_indexes(table)}


@pytest.mark.parametrize("prebuilt", [False, True], ids=["plain", "cover-index-prebuilt"])
def test_upgrade_from_003_equals_fresh_install(raw: Engine, db_url: str, tmp_path: Any, prebuilt: bool) -> None:
    with raw.begin() as conn:  # a deployment migrated by the release before 004
        for mig in MIGRATIONS[:3]:
            mig.apply(conn)
        conn.execute(insert(build_metadata(3).tables["skillbox"]), [_legacy_skill(i) for i in range(2)])
        if prebuilt:  # a DBA built it ahead of the release (CONCURRENTLY on PostgreSQL): migrate only records 004
            cols = ", ".join(CLASS_COVER_COLUMNS)
            conn.execute(text(f"CREATE INDEX ix_workflow_memory_class_cover ON workflow_memory ({cols})"))
    _record(raw, 1, 2, 3)
    assert "ix_workflow_memory_class" in _index_names(raw, "workflow_memory")

    assert migrate(raw) == NAMES[3:] and NAMES[3] == "004_add_covering_indexes"

    wm_indexes = _index_names(raw, "workflow_memory")
    assert "ix_workflow_memory_class_cover" in wm_indexes and "ix_workflow_memory_class" not in wm_indexes
    assert "ix_skillbox_tenant_updated" in _index_names(raw, "skillbox")
    assert snapshot(raw) == _reference(db_url, tmp_path)
    assert applied_versions(raw) == {m.version for m in MIGRATIONS}
    with raw.connect() as conn:  # rows survive the index swap
        assert conn.execute(select(skillbox.c.id).order_by(skillbox.c.id)).scalars().all() == ["legacy-0", "legacy-1"]
    assert migrate(raw) == []


def test_hand_added_column_without_its_check_gets_it(raw: Engine, db_url: str, tmp_path: Any) -> None:
    if raw.dialect.name == "sqlite":
        pytest.skip("SQLite cannot add a constraint to an existing column (ALTER TABLE has no ADD CONSTRAINT)")
    build_metadata(1).create_all(raw)
    with raw.begin() as conn:
        conn.execute(text("ALTER TABLE skillbox ADD COLUMN injection_role VARCHAR(20) DEFAULT 'user' NOT NULL"))
    _record(raw, 1)
    migrate(raw)
    checks = {c["name"] for c in inspect(raw).get_check_constraints("skillbox")}
    assert "ck_skillbox_injection_role" in checks
    assert snapshot(raw) == _reference(db_url, tmp_path)


def test_cli_migrate_reports_applied_then_current(db_url: str) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["migrate", "--db", db_url, "--json"])
    assert first.exit_code == 0, first.output
    body = json.loads(first.output)
    assert (body["applied"], body["current"]) == (NAMES, [])
    second = runner.invoke(app, ["migrate", "--db", db_url])
    assert second.exit_code == 0, second.output
    assert f"0 applied, {len(NAMES)} already current" in second.output
    assert all(f"current  {n}" in second.output for n in NAMES)


def test_004_tenant_updated_index_serves_the_retrieval_cache_stamp(sqlite_engine: Engine) -> None:
    """The statement ``skillflow.injection.retrieval._stamp`` runs before every cached search: one index seek."""
    stmt = select(func.max(skillbox.c.updated_at)).where(skillbox.c.agent_id == "a", skillbox.c.user_id == "u")
    sql = stmt.compile(sqlite_engine, compile_kwargs={"literal_binds": True})
    with sqlite_engine.connect() as conn:
        plan = " | ".join(str(r[3]) for r in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
    assert plan == "SEARCH skillbox USING COVERING INDEX ix_skillbox_tenant_updated (agent_id=? AND user_id=?)"


def test_upgrade_from_007_keeps_runs_and_tools_and_equals_fresh_install(
    raw: Engine, db_url: str, tmp_path: Any
) -> None:
    """008 adds the conversation columns (NULL on old runs) and the declared-tool flag (NULL = verb rule)."""
    old = build_metadata(7)
    with raw.begin() as conn:
        for mig in MIGRATIONS:
            if mig.version <= 7:
                mig.apply(conn)
        conn.execute(
            insert(old.tables["agent_tools"]), {"agent_id": "a", "tool_name": "book_flight", "registered_at": utcnow()}
        )
        conn.execute(
            insert(old.tables["workflow_memory"]),
            {
                "id": "r1",
                "agent_id": "a",
                "user_id": "u",
                "query": "q",
                "outcome": "success",
                "execution_outcome": "success",
                "outcome_source": "execution",
                "created_at": utcnow(),
                "steps": [],
                "skills_activated": [],
            },
        )
    _record(raw, *(m.version for m in MIGRATIONS if m.version <= 7))
    assert "008_add_conversations" in migrate(raw)
    assert snapshot(raw) == _reference(db_url, tmp_path)
    assert "ix_workflow_memory_conversation" in _index_names(raw, "workflow_memory")
    with raw.connect() as conn:
        row = conn.execute(text("SELECT conversation_id, segment_index FROM workflow_memory WHERE id = 'r1'")).one()
        flag = conn.execute(text("SELECT changes_state FROM agent_tools WHERE tool_name = 'book_flight'")).scalar()
    assert tuple(row) == (None, None) and flag is None
    with pytest.raises(IntegrityError), raw.begin() as conn:  # the flag is 0, 1 or NULL
        conn.execute(text("UPDATE agent_tools SET changes_state = 2"))


@pytest.mark.parametrize("level", [0, 9])
def test_two_migrates_at_once_both_succeed_and_converge(db_url: str, level: int) -> None:
    """Two ``skillflow migrate`` (or ``deploy``) at once: one waits for the other and finds everything applied.
    Before, on PostgreSQL the second failed with a duplicate type or an existing column and told the operator to
    check that the server runs."""
    import threading

    seed = make_engine(db_url)
    if level:
        build_metadata(level).create_all(seed)
        with seed.begin() as conn:
            for m in MIGRATIONS:
                if m.version <= level:
                    conn.execute(insert(schema_migrations).values(version=m.version, name=m.name, applied_at=utcnow()))
    seed.dispose()
    engines = [make_engine(db_url) for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: list[Any] = [None, None]

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = migrate(engines[i])
        except Exception as exc:  # noqa: BLE001 - the test reports it
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not any(isinstance(o, Exception) for o in outcomes), outcomes
        pending = [m.name for m in MIGRATIONS if m.version > level]
        assert sorted(outcomes[0] + outcomes[1]) == sorted(pending)  # each applied once, by one of them
        assert applied_versions(engines[0]) == {m.version for m in MIGRATIONS}
    finally:
        for e in engines:
            e.dispose()


def test_015_backfills_the_declared_handoffs_and_runs_again(db_url: str) -> None:
    from skillflow.storage.schema import agent_handoffs, agent_tools
    from skillflow.storage.skills import declared_handoffs

    engine = make_engine(db_url)
    try:
        build_metadata(14).create_all(engine)
        with engine.begin() as conn:
            for m in MIGRATIONS:
                if m.version <= 14:
                    conn.execute(insert(schema_migrations).values(version=m.version, name=m.name, applied_at=utcnow()))
            conn.execute(
                insert(build_metadata(14).tables["agent_tools"]),
                [{"agent_id": "a", "tool_name": t, "registered_at": utcnow(), "hands_off": flag}
                 for t, flag in (("transfer", 1), ("lookup", 0), ("legacy", None))],
            )  # fmt: skip
        assert migrate(engine) == ["015_add_agent_handoffs"]
        with engine.begin() as conn:
            assert set(conn.execute(select(agent_handoffs.c.agent_id, agent_handoffs.c.tool_name)).all()) == {
                ("a", "transfer")
            }
            conn.execute(agent_tools.update().values(hands_off=None))  # an older release rewrote the toolbox
            assert declared_handoffs(conn, "a") == frozenset({"transfer"})
            from skillflow.storage import migrations

            migrations._m015(conn)  # again: nothing doubled
            assert conn.execute(select(func.count()).select_from(agent_handoffs)).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.slow
def test_two_migrates_opening_one_new_sqlite_file_never_find_it_locked(tmp_path: Path) -> None:
    """Two connections switching one new file to WAL at once: SQLite answered one "database is locked" at once,
    without its busy handler (5 of 40 rounds of two concurrent migrates on a fresh file, and once in a CI run);
    the switch is asked again until the busy timeout."""
    import threading

    failures = []
    for round_ in range(40):
        url = f"sqlite:///{tmp_path / f'new-{round_}.db'}"
        engines = [make_engine(url) for _ in range(2)]
        barrier = threading.Barrier(2)

        def run(engine: Any, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                migrate(engine)
            except Exception as exc:  # noqa: BLE001 - the test reports it
                failures.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=run, args=(e,)) for e in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert applied_versions(engines[0]) == {m.version for m in MIGRATIONS}
        for e in engines:
            e.dispose()
    assert failures == []
