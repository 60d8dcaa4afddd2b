"""The Oracle SQL files: static check, no drift from the SQLAlchemy schema, re-runnable migrations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import oracle
from sqlalchemy.schema import CreateTable
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.storage import migrations
from skillflow.storage.schema import CLASS_COVER_COLUMNS, LATEST, build_metadata
from tests.support.oracle.checks import (
    check_migration,
    check_oracle_sql,
    check_statement,
    load_query,
    migration_files,
    oracle_dir,
    oracle_tables,
)
from tests.support.oracle.ddl_model import OracleError, Schema, apply, normalize_type, run_script
from tests.support.oracle.lexer import split_script

SQL_FILES = sorted(oracle_dir().rglob("*.sql"))
NAMES = [m.name for m in migrations.MIGRATIONS]
VERSIONS = [m.version for m in migrations.MIGRATIONS]  # numbers may skip: levels are migration versions


def _texts(level: int = LATEST) -> list[str]:
    files = zip(VERSIONS, migration_files(), strict=True)
    return [p.read_text(encoding="utf-8") for v, p in files if v <= level]


def _run(level: int = LATEST, schema: Schema | None = None) -> Schema:
    for text in _texts(level):
        schema = run_script(text, schema)
    assert schema is not None
    return schema


def _rules(problems: list[Any]) -> set[str]:
    return {p.rule for p in problems}


# ---- every file passes -------------------------------------------------------------------------------------------


def test_the_migrations_are_the_numbered_files_in_order() -> None:
    assert [p.stem for p in migration_files()] == NAMES


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: p.name)
def test_every_oracle_file_passes_the_checker(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = check_migration(text) if path.parent.name == "oracle" else check_oracle_sql(text)
    assert problems == [], "\n".join(map(str, problems))


def test_every_migration_ddl_is_checked_inside_its_plsql_block() -> None:
    stmts = split_script(_texts(1)[0])
    blocks = [s for s in stmts if s.kind == "plsql"]
    assert len(blocks) == 12 + 11 + 1  # tables, b-tree indexes, the vector index
    assert [s.kind for s in stmts if s.kind == "sql"] == ["sql", "sql"]  # bookkeeping MERGE + COMMIT


# ---- planted bad SQL is caught -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "rule"),
    [
        ("select id from skillbox order by created_at limit 5", "limit"),
        ("create table t (a jsonb)", "jsonb"),
        ("insert into t (a) values (1) on conflict do nothing", "on-conflict"),
        ("insert or replace into t (a) values (1)", "upsert"),
        ("create table t (id serial primary key)", "serial"),
        ("create table t (id integer autoincrement)", "autoincrement"),
        ("create table t (a boolean)", "boolean"),
        ("create table t (a text)", "text-type"),
        ("create table t (a varchar(10))", "varchar"),
        ("select `a` from t", "backtick"),
        ("select now() from dual", "now"),
        ("select a::integer from t", "cast-operator"),
        ("select a from t offset 10", "offset"),
        ("crate table t (a integer)", "parse"),  # typo'd keyword sqlglot rejects
        ("create tabel t (a integer)", "parse"),  # typo'd keyword sqlglot would keep as a raw command
        ("selec a from t", "parse"),
        ("create table t (a integer not nul)", "parse"),
        ("create table t (level integer)", "reserved-word"),
        ("create table t (e vector(384, float33))", "vector-type"),
        ("create vector index ix on t (e) organization inmemory neighbour graph", "vector-index"),
        (
            "create vector index ix on t (e) organization inmemory neighbor graph with target accuracy 101",
            "vector-index",
        ),
        ("select a from t order by 1 fetch approx first 5 rows only with target accuracy 0", "approx"),
        ("select vector_distance(e, :q, cosinus) from t", "vector-distance"),
        ("alter table t modify (a varchar2(10 char) defualt 'x')", "modify"),
    ],
)
def test_planted_bad_sql_is_caught(sql: str, rule: str) -> None:
    assert rule in _rules(check_statement(sql))


@pytest.mark.parametrize(
    "sql",
    [
        "create table t (e vector(384, float32) not null, j clob, constraint ck_t_j check (j is json))",
        "create vector index ix on t (e) organization inmemory neighbor graph distance cosine with target accuracy 95",
        "select a from t where b = :b order by a fetch first :k rows only",
        "select a from t order by vector_distance(e, :q, dot) fetch approx first 5 rows only with target accuracy 90",
        "alter table t modify (a default 'user')",
        "select a from t offset 10 rows fetch next 5 rows only",
        "select q'[it's]' as s, 'limit' as t from dual",  # words inside strings are not SQL
    ],
)
def test_valid_oracle_sql_passes(sql: str) -> None:
    assert check_statement(sql) == []


BLOCK = """-- a comment mentioning limit and jsonb is fine
begin
    execute immediate 'create table t (a varchar2(10 char) default ''x'' not null)';
exception
    when others then
        if sqlcode not in (-955) then
            raise;
        end if;
end;
/
"""


def test_execute_immediate_strings_are_unescaped_and_checked_with_their_line() -> None:
    assert check_migration(BLOCK) == []
    bad = BLOCK.replace("varchar2(10 char)", "jsonb")
    assert [(p.line, p.rule) for p in check_oracle_sql(bad)] == [(3, "jsonb")]
    q_quoted = "begin\n    execute immediate q'[\ncreate table t (\n    a text\n)\n]';\nend;\n/\n"
    assert [(p.line, p.rule) for p in check_oracle_sql(q_quoted)] == [(4, "text-type")]


def test_plsql_and_script_structure_errors_are_caught() -> None:
    assert "dynamic-semicolon" in _rules(check_oracle_sql(BLOCK.replace("not null)'", "not null);'")))
    assert "swallow" in _rules(check_oracle_sql(BLOCK.replace("if sqlcode not in (-955) then", "null; if 1 = 1 then")))
    swallow = "begin\n  execute immediate 'drop table t';\nexception\n  when others then null;\nend;\n/\n"
    assert "swallow" in _rules(check_oracle_sql(swallow))
    assert "plsql" in _rules(check_oracle_sql(BLOCK.replace("        end if;\n", "")))
    assert "script" in _rules(check_oracle_sql(BLOCK.rstrip().rstrip("/")))  # block never terminated by '/'
    assert "script" in _rules(check_oracle_sql("commit;\n/\n"))  # a stray '/' re-runs the previous statement
    assert "script" in _rules(check_oracle_sql("commit;\nselect 1 from dual\n"))  # unterminated last statement


def test_rerun_rules() -> None:
    assert "rerun" in _rules(check_migration("create table t (a integer);\n"))
    assert "rerun" in _rules(check_migration("insert into schema_migrations (version) values (1);\n"))
    assert "rerun" in _rules(check_migration(BLOCK.replace("-955", "-942")))  # ignores the wrong error
    add_column = BLOCK.replace(
        "create table t (a varchar2(10 char) default ''x'' not null)", "alter table t add (b clob)"
    )
    assert "rerun" in _rules(check_migration(add_column))
    assert check_migration(add_column.replace("-955", "-1430")) == []


# ---- no drift: the Oracle files build exactly the SQLAlchemy schema ----------------------------------------------


def _sqlalchemy_oracle(level: int) -> dict[str, Any]:
    dialect = oracle.dialect()
    out: dict[str, Any] = {}
    for table in build_metadata(level).tables.values():
        ddl = str(CreateTable(table).compile(dialect=dialect))
        cols = [
            (
                c.name,
                normalize_type(c.type.compile(dialect=dialect)),
                bool(c.nullable),
                c.server_default.arg.text if c.server_default is not None else None,  # type: ignore[attr-defined]
            )
            for c in table.columns
        ]
        constraints = {
            name.lower(): " ".join(kind.lower().split())
            for name, kind in re.findall(r"CONSTRAINT (\w+) (CHECK|PRIMARY KEY|UNIQUE)", ddl)
        }
        indexes = {
            ix.name: (tuple(c.name for c in ix.columns), "unique" if ix.unique else "btree") for ix in table.indexes
        }
        out[table.name] = {"columns": cols, "constraints": constraints, "indexes": indexes}
    return out


def _oracle_files(schema: Schema) -> dict[str, Any]:
    return {
        name: {
            "columns": [(c, col.type, col.nullable, col.default) for c, col in t.columns.items()],
            "constraints": t.constraints,
            "indexes": {
                ix: (cols, kind) for ix, (on, cols, kind) in schema.indexes.items() if on == name and kind != "vector"
            },
        }
        for name, t in schema.tables.items()
    }


@pytest.mark.parametrize("level", VERSIONS)
def test_no_drift_between_oracle_files_and_sqlalchemy_schema(level: int) -> None:
    expected = _sqlalchemy_oracle(level)
    actual = _oracle_files(_run(level))
    assert sorted(actual) == sorted(expected)
    for table in expected:
        assert actual[table] == expected[table], table


def test_oracle_tables_types_and_the_vector_index() -> None:
    tables = oracle_tables("\n".join(_texts()))
    assert tables["skill_vectors"]["embedding"] == "vector(384,float32)"
    assert tables["skillbox"]["injection_role"] == "varchar2(20 char)"
    assert tables["workflow_memory"]["shadow_evaluations"] == "clob"
    assert tables["workflow_memory"]["created_at"] == "timestamp with time zone"
    schema = _run()
    assert schema.indexes["ix_skill_vectors_embedding"] == ("skill_vectors", ("embedding",), "vector")
    assert schema.indexes["ix_skillbox_tenant_status"] == ("skillbox", ("agent_id", "user_id", "status"), "btree")
    skillbox = schema.tables["skillbox"]
    assert (skillbox.columns["injection_role"].default, skillbox.columns["injection_role"].nullable) == (
        "'user'",
        False,
    )
    assert skillbox.constraints["ck_skillbox_injection_role"] == "check"
    assert schema.tables["workflow_memory"].constraints["ck_workflow_memory_shadow_evaluations_is_json"] == "check"
    assert schema.migrations == set(VERSIONS)
    assert schema.tables["skill_revisions"].constraints["pk_skill_revisions"] == "primary key"
    cover = ("agent_id", "user_id", "canonical_hash", "created_at", "outcome", "query_fingerprint", "promoted_skill_id")
    assert schema.indexes["ix_workflow_memory_class_cover"] == ("workflow_memory", cover, "btree")
    assert schema.indexes["ix_skillbox_tenant_updated"] == ("skillbox", ("agent_id", "user_id", "updated_at"), "btree")
    assert "ix_workflow_memory_class" not in schema.indexes  # 004 drops it: the covering index's prefix


# ---- re-runnable; fresh install and upgrades end identical -------------------------------------------------------


def test_the_simulator_raises_what_oracle_raises() -> None:
    schema = _run(1)
    with pytest.raises(OracleError) as err:
        apply(schema, "create table skillbox (id integer)")
    assert err.value.code == -955
    with pytest.raises(OracleError) as err:
        apply(schema, "alter table skillbox add (name clob)")
    assert err.value.code == -1430
    with pytest.raises(OracleError) as err:  # a script that did not ignore the error would stop here
        run_script("begin\n  execute immediate 'create table skillbox (id integer)';\nend;\n/\n", schema)
    assert err.value.code == -955


def test_migrations_are_rerunnable() -> None:
    fresh = _run()
    assert _run(schema=fresh) == fresh  # the whole sequence again converges
    for level, text in zip(VERSIONS, _texts(), strict=True):
        at_level = _run(level)
        assert run_script(text, at_level) == at_level  # each script twice in a row
        if level > 1:
            assert run_script(text, fresh) == fresh  # 002+ can be re-run at any later time
    # 001 alone on an upgraded schema re-adds only the index 004 dropped, and 004 drops it again.
    rerun_001 = run_script(_texts(1)[0], fresh)
    assert rerun_001.tables == fresh.tables
    assert set(rerun_001.indexes) - set(fresh.indexes) == {"ix_workflow_memory_class"}
    assert run_script(_texts()[3], rerun_001) == fresh


def test_upgrade_from_003_equals_fresh_install_even_with_a_prebuilt_index() -> None:
    fresh = _run(4)
    level3 = _run(3)
    assert "ix_workflow_memory_class" in level3.indexes and "ix_workflow_memory_class_cover" not in level3.indexes
    assert run_script(_texts()[3], level3) == fresh
    # A DBA built the covering index beforehand (e.g. ONLINE) under its name, or the same columns under another.
    for name in ("ix_workflow_memory_class_cover", "ix_wm_cover_dba"):
        prebuilt = level3.copy()
        apply(prebuilt, f"create index {name} on workflow_memory ({', '.join(CLASS_COVER_COLUMNS)})")
        upgraded = run_script(_texts()[3], prebuilt)
        assert upgraded.tables == fresh.tables and upgraded.migrations == fresh.migrations
        assert upgraded.indexes[name] == ("workflow_memory", CLASS_COVER_COLUMNS, "btree")
        assert {n: ix[:2] for n, ix in upgraded.indexes.items() if n != name} == {
            n: ix[:2] for n, ix in fresh.indexes.items() if n != "ix_workflow_memory_class_cover"
        }


def test_drop_index_is_simulated_and_must_be_guarded() -> None:
    schema = _run(3)
    apply(schema, "drop index ix_workflow_memory_class")
    assert "ix_workflow_memory_class" not in schema.indexes
    with pytest.raises(OracleError) as err:
        apply(schema, "drop index ix_workflow_memory_class")
    assert err.value.code == -1418
    guarded = BLOCK.replace("create table t (a varchar2(10 char) default ''x'' not null)", "drop index ix_t_a")
    assert "rerun" in _rules(check_migration(guarded))  # still ignores -955, not what a drop raises
    assert check_migration(guarded.replace("-955", "-1418")) == []


def test_upgrade_from_pre_002_schema_equals_fresh_install() -> None:
    fresh = _run()
    legacy = _run(1)
    assert "injection_role" not in legacy.tables["skillbox"].columns
    upgraded = legacy
    for text in _texts()[1:]:
        upgraded = run_script(text, upgraded)
    assert upgraded == fresh


def test_manually_managed_schema_upgrades_to_fresh_install() -> None:
    """The column added by hand: nullable, no default, no check constraint, no bookkeeping table."""
    manual = _run(1)
    del manual.tables["schema_migrations"]
    manual.migrations.clear()
    apply(manual, "alter table skillbox add (injection_role varchar2(20 char))")
    apply(manual, "alter table workflow_memory add (shadow_evaluations clob)")
    upgraded = manual
    for text in _texts()[1:]:
        upgraded = run_script(text, upgraded)
    fresh = _run()
    assert upgraded.tables == fresh.tables
    assert upgraded.migrations == set(VERSIONS) - {1}


class _FakeOracleConn:
    """Records what ``skillflow migrate`` would execute on Oracle (column/constraint presence is given)."""

    class dialect:
        name = "oracle"

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, clause: Any) -> None:
        self.executed.append(str(clause))


@pytest.mark.parametrize("has_column", [False, True])
def test_python_oracle_migrations_match_the_sql_files(monkeypatch: pytest.MonkeyPatch, has_column: bool) -> None:
    monkeypatch.setattr(migrations, "_has_column", lambda conn, table, column: has_column)
    monkeypatch.setattr(migrations, "_has_check", lambda conn, table, name: False)
    conn = _FakeOracleConn()
    migrations._m002(conn)  # type: ignore[arg-type]
    migrations._m003(conn)  # type: ignore[arg-type]
    assert len(conn.executed) == (2 if has_column else 4)  # a hand-added column still gets its check
    schema = _run(1)
    if has_column:
        apply(schema, "alter table skillbox add (injection_role varchar2(20 char) default 'user' not null)")
        apply(schema, "alter table workflow_memory add (shadow_evaluations clob)")
    for sql in conn.executed:
        assert check_statement(sql) == []
        apply(schema, sql)
    assert schema.tables == _run(3).tables


class _SimulatedOracleConn:
    """Applies what ``skillflow migrate`` executes on Oracle to a simulated schema, checking each statement."""

    class dialect:
        name = "oracle"

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.executed: list[str] = []

    def execute(self, clause: Any) -> None:
        sql = str(clause).strip()
        assert check_statement(sql) == [], sql
        apply(self.schema, sql)
        self.executed.append(sql)


@pytest.mark.parametrize("prebuilt", [False, True])
def test_python_oracle_migration_004_matches_the_sql_file(monkeypatch: pytest.MonkeyPatch, prebuilt: bool) -> None:
    conn = _SimulatedOracleConn(_run(3))
    if prebuilt:  # a DBA built the covering index ahead of the release
        apply(
            conn.schema,
            f"create index ix_workflow_memory_class_cover on workflow_memory ({', '.join(CLASS_COVER_COLUMNS)})",
        )
    monkeypatch.setattr(migrations, "_has_index", lambda _conn, table, name: name in conn.schema.indexes)
    migrations._m004(conn)  # type: ignore[arg-type]
    assert len(conn.executed) == (2 if prebuilt else 3)
    migrations._m004(conn)  # type: ignore[arg-type]  # a re-run finds everything done
    assert len(conn.executed) == (2 if prebuilt else 3)
    fresh = _run(4)
    assert (conn.schema.tables, conn.schema.indexes) == (fresh.tables, fresh.indexes)


# ---- queries -----------------------------------------------------------------------------------------------------


def _flat(sql: str) -> str:
    return " ".join(re.sub(r"--[^\n]*", "", sql).lower().split())


TENANT_FILTERS = ("s.agent_id = :agent_id", "s.user_id = :user_id", "s.status = :status", "v.model_id = :model_id")


def test_search_skills_query_filters_before_top_k() -> None:
    sql = load_query("search_skills")
    assert not sql.endswith(";")
    assert check_statement(sql) == []
    flat = _flat(sql)
    binds = {"query_vec", "agent_id", "user_id", "status", "model_id", "min_score", "k"}
    assert set(re.findall(r":(\w+)", flat)) == binds  # what skillflow.injection.retrieval binds on Oracle
    assert "1 - vector_distance(v.embedding, :query_vec, cosine) as similarity" in flat
    inner = flat[: flat.index("group by")]
    assert all(predicate in inner for predicate in TENANT_FILTERS)
    assert flat.endswith(
        "group by skill_id having max(similarity) >= :min_score order by score desc, skill_id fetch first :k rows only"
    )


def test_search_skills_approx_filters_before_the_approximate_top_k() -> None:
    flat = _flat(load_query("search_skills_approx"))
    assert check_statement(load_query("search_skills_approx")) == []
    inner = flat[: flat.index("fetch approx first :candidates rows only with target accuracy 95")]
    assert all(predicate in inner for predicate in TENANT_FILTERS)
    assert flat.endswith("order by score desc, skill_id fetch first :k rows only")


def test_claim_shadow_outbox_skips_locked_rows() -> None:
    sql = load_query("claim_shadow_outbox")
    assert check_statement(sql) == []
    assert "for update of w.shadow_claimed_at skip locked" in " ".join(sql.lower().split())


def test_load_query_rejects_paths() -> None:
    with pytest.raises(ValueError):
        load_query("../001_init")
    with pytest.raises(FileNotFoundError):
        load_query("no_such_query")


def test_cli_prints_the_oracle_files_in_order() -> None:
    result = CliRunner().invoke(app, ["migrate", "--print-oracle"])
    assert result.exit_code == 0, result.output
    heads = re.findall(r"^-- ===== (\S+) =====$", result.output, re.M)
    assert heads == [f"{n}.sql" for n in NAMES]
    assert "create vector index ix_skill_vectors_embedding" in result.output


@pytest.mark.parametrize("hand_added", [False, True])
def test_python_oracle_migration_008_matches_the_sql_file(monkeypatch: pytest.MonkeyPatch, hand_added: bool) -> None:
    """``skillflow migrate`` on Oracle and sql/oracle/008 build the same level-8 schema, also over a column a DBA
    added by hand (without its check constraint), and a re-run executes nothing."""
    conn = _SimulatedOracleConn(_run(7))
    if hand_added:
        apply(conn.schema, "alter table agent_tools add (changes_state smallint)")
    tables = conn.schema.tables
    monkeypatch.setattr(migrations, "_has_index", lambda _conn, table, name: name in conn.schema.indexes)
    monkeypatch.setattr(migrations, "_has_column", lambda _conn, table, column: column in tables[table].columns)
    monkeypatch.setattr(migrations, "_has_check", lambda _conn, table, name: name in tables[table].constraints)
    migrations._m008(conn)  # type: ignore[arg-type]
    assert len(conn.executed) == (4 if hand_added else 5)
    migrations._m008(conn)  # type: ignore[arg-type]
    assert len(conn.executed) == (4 if hand_added else 5)
    by_file = run_script(_texts(8)[-1], _run(7))
    assert (conn.schema.tables, conn.schema.indexes) == (by_file.tables, by_file.indexes)
    assert conn.schema.tables == _run(8).tables
    assert by_file.indexes["ix_workflow_memory_conversation"] == (
        "workflow_memory",
        ("agent_id", "user_id", "conversation_id"),
        "btree",
    )
    assert tables["agent_tools"].constraints["ck_agent_tools_changes_state"] == "check"
