"""Numbered, recorded, idempotent migrations (``skillflow migrate``); the Oracle twins live in sql/oracle.

The schema is written once, in ``storage.schema.build_metadata(level)``: a migration creates the level's new
tables, columns, check constraints and indexes from its Table, Column and constraint objects, compiled for the
database (``CreateTable``/``CreateIndex``, ``ALTER TABLE … ADD`` from the column's compiled specification),
never from hand-written DDL. A test keeps sql/oracle in step with the same metadata.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sqlalchemy import CheckConstraint, Column, Connection, Engine, Index, Table, insert, inspect, select, text
from sqlalchemy.dialects import registry
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import AddConstraint, CreateIndex, CreateTable, DropIndex

from skillflow.kernel.models import utcnow
from skillflow.storage.schema import build_metadata, schema_migrations

log = logging.getLogger("skillflow.storage.migrations")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[Connection], None]


def _has_column(conn: Connection, table: str, column: str) -> bool:
    return column in {c["name"] for c in inspect(conn).get_columns(table)}


def _has_check(conn: Connection, table: str, name: str) -> bool:
    try:
        return name in {c.get("name") for c in inspect(conn).get_check_constraints(table)}
    except NotImplementedError:  # pragma: no cover - every supported dialect implements it
        return False


def _has_index(conn: Connection, table: str, name: str) -> bool:
    return name in {ix["name"] for ix in inspect(conn).get_indexes(table)}


def _index(level: int, table: str, name: str) -> Index:
    return next(ix for ix in build_metadata(level).tables[table].indexes if ix.name == name)


def _m001(conn: Connection) -> None:
    build_metadata(1).create_all(conn, checkfirst=True)


def _dialect(conn: Connection) -> Dialect:
    """A dialect to compile DDL for ``conn``'s database (by name, so a recording connection compiles too)."""
    return cast("type[Dialect]", registry.load(conn.dialect.name))()


def _column_checks(table: Table, column: str, dialect: str) -> list[CheckConstraint]:
    """The metadata's named check constraints on ``column`` that ``dialect`` creates (``ck_<table>_<column>``,
    and the JSON checks ``…_json`` on SQLite, ``…_is_json`` on Oracle)."""
    names = {f"ck_{table.name}_{column}{suffix}" for suffix in ("", "_json", "_is_json")}
    out = []
    for ck in table.constraints:
        ddl_if = getattr(ck, "_ddl_if", None)
        if isinstance(ck, CheckConstraint) and ck.name in names and (ddl_if is None or ddl_if.dialect == dialect):
            out.append(ck)
    return sorted(out, key=lambda ck: str(ck.name))


def _add_column(conn: Connection, level: int, table: str, column: str, default_later: bool = False) -> None:
    """Add the level-``level`` metadata's ``column`` if missing, its DDL compiled for the database, and on
    PostgreSQL and Oracle its named check constraints if missing (a column added by hand without them gets them;
    SQLite cannot add a constraint later, so there they are part of the ``ADD COLUMN``).

    ``default_later``: on PostgreSQL and Oracle the column is added without its server default, then the default
    is set, so the rows already stored keep NULL instead of being rewritten.
    """
    dialect = _dialect(conn)
    tbl = build_metadata(level).tables[table]
    compiler = dialect.ddl_compiler(dialect, CreateTable(tbl))
    col = tbl.c[column]
    checks = _column_checks(tbl, column, dialect.name)
    name = compiler.preparer.format_table(tbl)
    if dialect.name == "sqlite":
        if not _has_column(conn, table, column):
            inline = "".join(" " + compiler.process(ck) for ck in checks)
            conn.execute(text(f"ALTER TABLE {name} ADD COLUMN {compiler.get_column_specification(col)}{inline}"))
        return
    spec = col if not default_later else Column(col.name, col.type, nullable=col.nullable)
    if not _has_column(conn, table, column):
        spec_sql = compiler.get_column_specification(spec)
        add = f"ADD ({spec_sql})" if dialect.name == "oracle" else f"ADD COLUMN {spec_sql}"
        conn.execute(text(f"ALTER TABLE {name} {add}"))
    for ck in checks:
        if not _has_check(conn, table, str(ck.name)):
            conn.execute(text(str(AddConstraint(ck).compile(dialect=dialect))))
    if default_later:
        default, quoted = compiler.get_column_default_string(col), compiler.preparer.format_column(col)
        if dialect.name == "oracle":
            conn.execute(text(f"ALTER TABLE {name} MODIFY ({quoted} DEFAULT {default})"))
        else:
            conn.execute(text(f"ALTER TABLE {name} ALTER COLUMN {quoted} SET DEFAULT {default}"))


def _m002(conn: Connection) -> None:
    _add_column(conn, 2, "skillbox", "injection_role")


def _m003(conn: Connection) -> None:
    _add_column(conn, 3, "workflow_memory", "shadow_evaluations")


# (table, index) pairs migration 004 creates, and the index it drops because the first one supersedes it.
M004_CREATE = (("workflow_memory", "ix_workflow_memory_class_cover"), ("skillbox", "ix_skillbox_tenant_updated"))
M004_DROP = ("workflow_memory", "ix_workflow_memory_class")


def _m004(conn: Connection) -> None:
    """Create the covering and tenant/updated_at indexes, then drop the class index they supersede.

    Each step checks first (like ``Index.create(checkfirst=True)``), so a DBA may pre-build the indexes
    (``CREATE INDEX CONCURRENTLY`` on PostgreSQL, ``ONLINE`` on Oracle) and migrate then only records 004.
    """
    for table, name in M004_CREATE:
        if not _has_index(conn, table, name):
            conn.execute(CreateIndex(_index(4, table, name)))
    table, name = M004_DROP
    if _has_index(conn, table, name):
        conn.execute(DropIndex(_index(3, table, name)))


def _m007(conn: Connection) -> None:
    """Create ``skill_revisions`` (edited revisions of a skill version) if missing."""
    build_metadata(7).tables["skill_revisions"].create(conn, checkfirst=True)


def _m009(conn: Connection) -> None:
    """Create ``applicability_rules`` (each tenant's fitted injection rule) if missing."""
    build_metadata(9).tables["applicability_rules"].create(conn, checkfirst=True)


M008_INDEX = ("workflow_memory", "ix_workflow_memory_conversation")


def _m008(conn: Connection) -> None:
    """Conversations: ``workflow_memory.conversation_id``/``segment_index`` with their tenant index, and the
    declared ``agent_tools.changes_state`` flag (docs/guide/runtime.md). Every step checks first."""
    for column in ("conversation_id", "segment_index"):
        _add_column(conn, 8, "workflow_memory", column)
    _add_column(conn, 8, "agent_tools", "changes_state")
    table, name = M008_INDEX
    if not _has_index(conn, table, name):
        conn.execute(CreateIndex(_index(8, table, name)))


M010_INDEX = ("workflow_memory", "ix_workflow_memory_stats_pending")
M010_TABLES = ("class_stats", "class_fingerprints", "class_stats_state")


def _m010(conn: Connection) -> None:
    """Maintained class statistics (docs/guide/aggregate.md): ``workflow_memory.stats_pending`` (NULL on the rows
    already stored, default 1 for every new row, so the first fold is a recount, not a rewrite of the table), its
    pending-only index, and the statistics tables. Every step checks first."""
    # SQLite cannot change a default later: old rows get 1 too, and the first fold's recount clears them.
    _add_column(conn, 10, "workflow_memory", "stats_pending", default_later=True)
    table, name = M010_INDEX
    if not _has_index(conn, table, name):
        conn.execute(CreateIndex(_index(10, table, name)))
    for table_name in M010_TABLES:
        build_metadata(10).tables[table_name].create(conn, checkfirst=True)


def _m011(conn: Connection) -> None:
    """``partition_state.runs_folded``: each partition's runs folded into the class statistics, which the cycle's
    listing and cadence read instead of counting history (docs/guide/aggregate.md). The counters start at 0, so
    the bookkeeping row is dropped: the next fold is a recount, which sets every counter from a COUNT (until
    then the listing and the cadence count ``workflow_memory``, the reference path)."""
    _add_column(conn, 11, "partition_state", "runs_folded")
    conn.execute(text("DELETE FROM class_stats_state"))


M012_INDEX = ("skillbox", "uq_skillbox_live_name_key")
# sha256 hex of agent_id \x1f user_id \x1f name, as ``storage.skills.live_name_key`` computes it.
_NAME_HASH = {
    "postgresql": "encode(sha256(convert_to(agent_id || chr(31) || user_id || chr(31) || name, 'UTF8')), 'hex')",
    "oracle": "lower(rawtohex(standard_hash(agent_id || chr(31) || user_id || chr(31) || name, 'SHA256')))",
    "sqlite": "skillflow_sha256(agent_id || char(31) || user_id || char(31) || name)",
}
# Key the live rows that lack it, except a row whose name an older live row of its tenant (or one already
# keyed) holds: legacy duplicates keep NULL instead of failing the unique index (sql/oracle/012 runs the same).
M012_BACKFILL = (
    "UPDATE skillbox SET live_name_key = {hash} WHERE live_key IS NOT NULL AND live_name_key IS NULL "
    "AND NOT EXISTS (SELECT 1 FROM skillbox o WHERE o.agent_id = skillbox.agent_id "
    "AND o.user_id = skillbox.user_id AND o.name = skillbox.name AND o.live_key IS NOT NULL AND o.id <> skillbox.id "
    "AND (o.live_name_key IS NOT NULL OR o.created_at < skillbox.created_at "
    "OR (o.created_at = skillbox.created_at AND o.id < skillbox.id)))"
)
M012_UNKEYED = "SELECT COUNT(*) FROM skillbox WHERE live_key IS NOT NULL AND live_name_key IS NULL"


def _sha256_hex(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode("utf-8")).hexdigest()


def _m012(conn: Connection) -> None:
    """Live names unique per tenant (docs/design.md): ``skillbox.live_name_key``, backfilled on the live rows, then
    its unique index. Live rows sharing a name with an older live row of their tenant keep NULL and are logged
    (the data-quality warning ``skillbox.live_names_unique`` lists them); the migration never fails on them."""
    _add_column(conn, 12, "skillbox", "live_name_key")
    dialect = conn.dialect.name
    if dialect == "sqlite":  # no sha256 in SQLite: the migration's connection gets Python's
        conn.connection.driver_connection.create_function(  # type: ignore[union-attr]
            "skillflow_sha256", 1, _sha256_hex, deterministic=True
        )
    conn.execute(text(M012_BACKFILL.format(hash=_NAME_HASH[dialect])))
    unkeyed = conn.execute(text(M012_UNKEYED)).scalar()
    if unkeyed:
        log.warning(
            "%d live skill(s) share their name with an older live skill of their tenant: their live_name_key stays "
            "NULL (data-quality warning skillbox.live_names_unique); rename or retire them",
            unkeyed,
        )
    table, name = M012_INDEX
    if not _has_index(conn, table, name):
        conn.execute(CreateIndex(_index(12, table, name)))


def _m013(conn: Connection) -> None:
    """``agent_tools.hands_off``: the tools an agent declared as hand-offs (a transfer to a human or another agent),
    whose procedures the ``handoff`` gate holds back (docs/guide/promotion.md, "Gates"). Existing rows keep NULL
    (no hand-off declared) until the agent registers its tools again."""
    _add_column(conn, 13, "agent_tools", "hands_off")


def _m014(conn: Connection) -> None:
    """No schema change: ``distinct_queries`` counts the requests of successful runs only (docs/guide/aggregate.md),
    and ``class_stats``/``class_fingerprints`` were folded counting every run's. The fold's bookkeeping row is
    dropped, so the next fold recounts the whole store with the new rule (until then the cycle reads the
    reference aggregation, which already counts so)."""
    conn.execute(text("DELETE FROM class_stats_state"))


M015_BACKFILL = (
    "INSERT INTO agent_handoffs (agent_id, tool_name, declared_at) "
    "SELECT t.agent_id, t.tool_name, t.registered_at FROM agent_tools t WHERE t.hands_off = 1 "
    "AND NOT EXISTS (SELECT 1 FROM agent_handoffs h WHERE h.agent_id = t.agent_id AND h.tool_name = t.tool_name)"
)


def _m015(conn: Connection) -> None:
    """``agent_handoffs``: the tools an agent declared hand-offs, kept apart from ``agent_tools`` so that an agent
    process of a release before 013 registering its tools again (it rewrites ``agent_tools`` without
    ``hands_off``) cannot switch the ``handoff`` gate off (docs/guide/promotion.md, "Gates"); backfilled from
    ``agent_tools.hands_off``. Re-runnable."""
    build_metadata(15).tables["agent_handoffs"].create(conn, checkfirst=True)
    conn.execute(text(M015_BACKFILL))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "001_init", _m001),
    Migration(2, "002_add_skill_injection_role", _m002),
    Migration(3, "003_add_shadow_evaluations", _m003),
    Migration(4, "004_add_covering_indexes", _m004),
    Migration(7, "007_add_skill_revisions", _m007),
    Migration(8, "008_add_conversations", _m008),
    Migration(9, "009_add_applicability_rules", _m009),
    Migration(10, "010_add_class_stats", _m010),
    Migration(11, "011_add_partition_runs_folded", _m011),
    Migration(12, "012_add_live_name_key", _m012),
    Migration(13, "013_add_agent_tools_hands_off", _m013),
    Migration(14, "014_recount_distinct_queries", _m014),
    Migration(15, "015_add_agent_handoffs", _m015),
)


class SchemaOutdated(RuntimeError):
    """The database lacks migrations this code needs; the message names the command that applies them."""


class SchemaNewer(SchemaOutdated):
    """The database holds migrations this code does not know: this process runs an older skillflow."""


def applied_versions(engine: Engine) -> set[int]:
    return set(applied(engine))


def applied(engine: Engine) -> dict[int, str]:
    """Version → name of every migration recorded in the database (empty before the first)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("schema_migrations"):
            return {}
        return {int(v): str(n) for v, n in conn.execute(select(schema_migrations.c.version, schema_migrations.c.name))}


def require_known(engine: Engine, recorded: dict[int, str] | None = None) -> None:
    """Fail when the database holds a migration this code does not know (:class:`SchemaNewer`): a newer
    skillflow migrated it, and this older one would write rows without what those migrations guard."""
    recorded = applied(engine) if recorded is None else recorded
    known = {m.version for m in MIGRATIONS}
    newer = [name for version, name in sorted(recorded.items()) if version not in known]
    if newer:
        url = engine.url.render_as_string(hide_password=True)
        raise SchemaNewer(
            f"database {url} was migrated by a newer skillflow (it has {', '.join(newer)}, which this one does not "
            'know): upgrade skillflow here to the version that migrated it (docs/guide/ops.md, "Upgrading a fleet")'
        )


def migrate(engine: Engine, on_applied: Callable[[str], None] | None = None) -> list[str]:
    """Apply pending migrations in order; each is re-runnable and recorded. Returns the names applied; ``on_applied``
    is told each name once its migration committed (so an interrupted run can say what it applied). A database
    a newer skillflow migrated is refused (:func:`require_known`), never half-migrated by an older one."""
    recorded = applied(engine)
    require_known(engine, recorded)
    done = set(recorded)
    applied_now: list[str] = []
    for mig in MIGRATIONS:
        if mig.version in done:
            continue
        with engine.connect() as conn:
            # One migrate at a time (two `skillflow migrate` or `deploy` at once): each migration takes the
            # database's migration lock, then reads again whether another process applied it meanwhile.
            _lock(conn)
            if _recorded(conn, mig.version):
                conn.rollback()
                continue
            schema_migrations.create(conn, checkfirst=True)
            mig.apply(conn)
            conn.execute(insert(schema_migrations).values(version=mig.version, name=mig.name, applied_at=utcnow()))
            conn.commit()
        applied_now.append(mig.name)
        if on_applied is not None:
            on_applied(mig.name)
    return applied_now


def _lock(conn: Connection) -> None:
    """Take the migration lock for this transaction: PostgreSQL's transaction-scoped advisory lock keyed by the
    schema, SQLite's write lock (``BEGIN IMMEDIATE``; a second migrate waits up to the busy timeout). Oracle
    commits every DDL statement, so no lock spans a migration there: run one ``migrate`` at a time
    (docs/guide/oracle.md)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('skillflow.migrate:' || current_schema()))"))
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _recorded(conn: Connection, version: int) -> bool:
    if not inspect(conn).has_table("schema_migrations"):
        return False
    return (
        conn.execute(select(schema_migrations.c.version).where(schema_migrations.c.version == version)).first()
        is not None
    )


def migrate_database(url: str, on_applied: Callable[[str], None] | None = None) -> tuple[list[str], list[str]]:
    """``skillflow migrate`` on ``url``: (migrations applied now, migrations that were already current);
    ``on_applied`` as :func:`migrate`'s."""
    from skillflow.storage.engine import make_engine

    engine = make_engine(url)
    try:
        applied = migrate(engine, on_applied)
        versions = applied_versions(engine)
    finally:
        engine.dispose()
    return applied, [m.name for m in MIGRATIONS if m.version in versions and m.name not in applied]


def require_current(engine: Engine) -> None:
    """Fail at once when ``engine``'s database is unmigrated or behind (naming ``skillflow migrate``), or was
    migrated by a newer skillflow (:class:`SchemaNewer`, naming the upgrade)."""
    recorded = applied(engine)
    missing = [m.name for m in MIGRATIONS if m.version not in recorded]
    if missing:
        url = engine.url.render_as_string(hide_password=True)
        state = "has no skillflow schema" if not recorded else f"is behind (missing {', '.join(missing)})"
        raise SchemaOutdated(f"database {url} {state}: run `skillflow migrate --db {url}` first")
    require_known(engine, recorded)
