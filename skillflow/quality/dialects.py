"""Dialect-specific SQL fragments the data-quality suites need (SQLite, PostgreSQL, Oracle).

JSON validity is the one predicate SQL does not share:

- SQLite: ``json_valid(col)`` (JSON1, built in).
- Oracle: ``col IS JSON`` (the columns also carry ``CHECK (col IS JSON)``).
- PostgreSQL 15 has neither ``IS JSON`` (16+) nor ``pg_input_is_valid`` (16+), and a bare ``::json``
  cast aborts the whole query on the first bad row. The quality runner therefore installs a
  session-scoped ``pg_temp.skillflow_is_json(text)`` function (a PL/pgSQL cast inside an exception
  block) on each of its own connections. It lives in the connection's temporary schema, disappears
  with the connection and never touches the application schema.

Only constants from this module are interpolated into SQL; data values never are.
"""

from __future__ import annotations

PG_IS_JSON_FUNCTION = (
    "CREATE OR REPLACE FUNCTION pg_temp.skillflow_is_json(doc text) RETURNS boolean "
    "LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN PERFORM doc::json; RETURN true; "
    "EXCEPTION WHEN others THEN RETURN false; END $$"
)

# Clock skew tolerated before a stored timestamp counts as "in the future".
FUTURE_TOLERANCE_MINUTES = 5


def json_invalid(dialect: str, col: str) -> str:
    """True for a non-NULL value that does not parse as JSON."""
    if dialect == "sqlite":
        return f"({col} IS NOT NULL AND json_valid({col}) = 0)"
    if dialect == "postgresql":
        return f"({col} IS NOT NULL AND NOT pg_temp.skillflow_is_json({col}))"
    if dialect == "oracle":
        return f"({col} IS NOT NULL AND {col} IS NOT JSON)"
    raise ValueError(f"unsupported dialect for data quality: {dialect}")


def json_member(dialect: str, col: str, key: str) -> str:
    """The text value of top-level ``key`` of a JSON object column (NULL when absent or unparsable)."""
    if dialect == "sqlite":
        return f"(CASE WHEN json_valid({col}) THEN json_extract({col}, '$.{key}') END)"
    if dialect == "postgresql":
        return (
            f"(CASE WHEN pg_temp.skillflow_is_json({col}) AND json_typeof({col}::json) = 'object' "
            f"THEN {col}::json ->> '{key}' END)"
        )
    if dialect == "oracle":
        return f"JSON_VALUE({col}, '$.{key}')"
    raise ValueError(f"unsupported dialect for data quality: {dialect}")


def future_bound(dialect: str) -> str:
    """The database clock plus the tolerance (stored SQLite text compares lexicographically)."""
    minutes = int(FUTURE_TOLERANCE_MINUTES)
    if dialect == "sqlite":
        return f"datetime('now', '+{minutes} minutes')"
    if dialect == "postgresql":
        return f"(now() + interval '{minutes} minutes')"
    if dialect == "oracle":
        return f"(SYSTIMESTAMP + INTERVAL '{minutes}' MINUTE)"
    raise ValueError(f"unsupported dialect for data quality: {dialect}")


def bad_shadow_records(dialect: str, versions: tuple[str, ...]) -> str:
    """Rows of ``{batch}`` (workflow_memory) whose shadow_evaluations is not an array of known-version records.

    GX substitutes ``{batch}`` with an aliased derived table when the query has no JOIN, so these
    queries reference its columns unqualified.
    """
    known = ", ".join(f"'{v}'" for v in versions)
    if dialect == "sqlite":
        return (
            "SELECT id FROM {batch} WHERE shadow_evaluations IS NOT NULL AND json_valid(shadow_evaluations) "
            "AND (json_type(shadow_evaluations) <> 'array' OR EXISTS (SELECT 1 FROM json_each(shadow_evaluations) e "
            f"WHERE COALESCE(json_extract(e.value, '$.evaluator_version'), '') NOT IN ({known})))"
        )
    if dialect == "postgresql":
        return (
            "WITH docs AS MATERIALIZED (SELECT id, shadow_evaluations::json AS doc FROM {batch} "
            "WHERE shadow_evaluations IS NOT NULL AND pg_temp.skillflow_is_json(shadow_evaluations)) "
            "SELECT d.id FROM docs d WHERE json_typeof(d.doc) <> 'array' OR EXISTS (SELECT 1 FROM "
            "json_array_elements(CASE WHEN json_typeof(d.doc) = 'array' THEN d.doc ELSE '[]'::json END) e "
            f"WHERE COALESCE(e.value ->> 'evaluator_version', '') NOT IN ({known}))"
        )
    if dialect == "oracle":
        return (
            "SELECT id FROM {batch} WHERE shadow_evaluations IS NOT NULL AND shadow_evaluations IS JSON "
            "AND EXISTS (SELECT 1 FROM JSON_TABLE(shadow_evaluations, '$[*]' COLUMNS "
            "(v VARCHAR2(16) PATH '$.evaluator_version')) jt "
            f"WHERE jt.v IS NULL OR jt.v NOT IN ({known}))"
        )
    raise ValueError(f"unsupported dialect for data quality: {dialect}")


def naive_timestamp_columns(dialect: str, tables: tuple[str, ...]) -> str | None:
    """A query listing timestamp columns without a time zone (None where the type cannot carry one)."""
    names = ", ".join(f"'{t}'" for t in tables)
    # The catalog is not the batch; the LEFT JOIN on it only keeps GX from printing a "{batch} missing" notice.
    batch = "LEFT JOIN (SELECT 1 AS one FROM {batch} b WHERE 1 = 0) x ON 1 = 1"
    if dialect == "postgresql":
        return (
            f"SELECT c.table_name, c.column_name FROM information_schema.columns c {batch} "
            f"WHERE c.table_schema = current_schema() AND c.table_name IN ({names}) "
            "AND c.data_type = 'timestamp without time zone'"
        )
    if dialect == "oracle":
        return (
            f"SELECT c.table_name, c.column_name FROM user_tab_columns c {batch} "
            f"WHERE LOWER(c.table_name) IN ({names}) AND c.data_type LIKE 'TIMESTAMP%' "
            "AND c.data_type NOT LIKE '%WITH TIME ZONE'"
        )
    return None  # SQLite stores naive UTC text by design (checked by format instead)


# SQLAlchemy's SQLite DateTime text: naive UTC, "YYYY-MM-DD HH:MM:SS[.ffffff]", never an offset.
SQLITE_TIMESTAMP_REGEX = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
