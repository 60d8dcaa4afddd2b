"""Read the schema that the ``sql/oracle`` migrations build, by simulating them on an in-memory model.

``run_script`` applies a script's DDL in order the way SQL*Plus with ``WHENEVER SQLERROR EXIT`` would:
an object that already exists raises the ORA code Oracle raises, and only the codes its PL/SQL block
ignores are tolerated. That proves statically that the migrations are re-runnable and that a fresh
install and an upgraded schema end identical; ``oracle_tables`` feeds the no-drift test.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from tests.support.oracle.lexer import dynamic_sql, mask, split_script

TYPE = re.compile(
    r"(timestamp(\s*\(\d+\))?\s+with\s+(local\s+)?time\s+zone|vector\s*\([^()]*\)|\w+(\s*\([^()]*\))?)", re.I
)
DEFAULT = re.compile(r"\bdefault\s+('(?:[^']|'')*'|[-\w.]+(\s*\([^()]*\))?)", re.I)
INLINE_CONSTRAINT = re.compile(r"\bconstraint\s+(\w+)\s+(check|unique|primary\s+key|references)", re.I)
TABLE_CONSTRAINT = re.compile(r"^constraint\s+(\w+)\s+(check|unique|primary\s+key|foreign\s+key)\b", re.I)


class OracleError(Exception):
    """What Oracle would raise for a statement (``code`` is negative, like SQLCODE)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ORA-{-code:05d}: {message}")
        self.code = code


@dataclass
class Column:
    type: str
    nullable: bool = True
    default: str | None = None


@dataclass
class Table:
    columns: dict[str, Column] = field(default_factory=dict)
    constraints: dict[str, str] = field(default_factory=dict)  # name -> check | unique | primary key | …


@dataclass
class Schema:
    tables: dict[str, Table] = field(default_factory=dict)
    indexes: dict[str, tuple[str, tuple[str, ...], str]] = field(default_factory=dict)  # name -> table, cols, kind
    migrations: set[int] = field(default_factory=set)

    def copy(self) -> Schema:
        return copy.deepcopy(self)


def normalize_type(text: str) -> str:
    """``VARCHAR2(64 CHAR)`` → ``varchar2(64 char)``; ``VECTOR(384,FLOAT32,*)`` → ``vector(384,float32)``."""
    t = " ".join(text.lower().split())
    t = re.sub(r"\s*([(),])\s*", r"\1", t)
    return re.sub(r"^vector\(([^,]+),([^,]+),\*\)$", r"vector(\1,\2)", t)


def _split_top(body: str) -> list[str]:
    items, depth, start = [], 0, 0
    masked = mask(body)
    for i, c in enumerate(masked):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    return [item for item in items if item]


def _column(item: str) -> tuple[str, Column, dict[str, str]]:
    name, rest = item.split(None, 1)
    m = TYPE.match(rest)
    if m is None:
        raise ValueError(f"no type for column {name}")
    tail = rest[m.end() :]
    masked_tail = mask(tail)
    default = DEFAULT.search(tail)
    col = Column(
        type=normalize_type(m.group(0)),
        nullable=not re.search(r"\b(not\s+null|primary\s+key)\b", masked_tail, re.I),
        default=default.group(1) if default else None,
    )
    constraints = {c.group(1).lower(): " ".join(c.group(2).lower().split()) for c in INLINE_CONSTRAINT.finditer(tail)}
    return name.lower(), col, constraints


def _add_items(table: Table, body: str) -> None:
    for item in _split_top(body):
        c = TABLE_CONSTRAINT.match(item)
        if c:
            _add_constraint(table, c.group(1).lower(), " ".join(c.group(2).lower().split()))
            continue
        name, col, constraints = _column(item)
        if name in table.columns:
            raise OracleError(-1430, f"column being added already exists in table: {name}")
        table.columns[name] = col
        for cname, kind in constraints.items():
            _add_constraint(table, cname, kind)


def _add_constraint(table: Table, name: str, kind: str) -> None:
    if name in table.constraints:
        raise OracleError(-2264, f"name already used by an existing constraint: {name}")
    table.constraints[name] = kind


def _table(schema: Schema, name: str) -> Table:
    if name not in schema.tables:
        raise OracleError(-942, f"table or view does not exist: {name}")
    return schema.tables[name]


def apply(schema: Schema, sql: str) -> None:
    """Apply one DDL statement to ``schema`` (DML other than migration bookkeeping has no schema effect)."""
    flat = " ".join(sql.split())
    low = mask(flat).lower()
    if m := re.match(r"create table (\w+) \((.*)\)$", low):
        name = m.group(1)
        if name in schema.tables or name in schema.indexes:
            raise OracleError(-955, f"name is already used by an existing object: {name}")
        table = Table()
        _add_items(table, flat[m.start(2) : m.end(2)])
        schema.tables[name] = table
    elif m := re.match(r"create (unique |vector )?index (\w+) on (\w+) ?\(([^()]*)\)", low):
        name, on, cols = m.group(2), m.group(3), tuple(c.strip() for c in m.group(4).split(","))
        _table(schema, on)
        if name in schema.indexes or name in schema.tables:
            raise OracleError(-955, f"name is already used by an existing object: {name}")
        kind = (m.group(1) or "btree ").strip()
        if kind != "vector" and any(ix[:2] == (on, cols) and ix[2] != "vector" for ix in schema.indexes.values()):
            raise OracleError(-1408, f"such column list already indexed: {on}{cols}")
        schema.indexes[name] = (on, cols, kind)
    elif m := re.match(r"drop index (\w+)$", low):
        if m.group(1) not in schema.indexes:
            raise OracleError(-1418, f"specified index does not exist: {m.group(1)}")
        del schema.indexes[m.group(1)]
    elif m := re.match(r"alter table (\w+) add constraint (\w+) (check|unique|primary key)\b", low):
        _add_constraint(_table(schema, m.group(1)), m.group(2), m.group(3))
    elif m := re.match(r"alter table (\w+) add ?\((.*)\)$", low):
        _add_items(_table(schema, m.group(1)), flat[m.start(2) : m.end(2)])
    elif m := re.match(r"alter table (\w+) modify ?\( ?(\w+)(.*)\)$", low):
        table = _table(schema, m.group(1))
        col = table.columns.get(m.group(2))
        if col is None:
            raise OracleError(-904, f"invalid identifier: {m.group(2)}")
        tail = flat[m.start(3) : m.end(3)]
        if default := DEFAULT.search(tail):
            col.default = default.group(1)
        if re.search(r"\bnot null\b", low[m.start(3) : m.end(3)]):
            if not col.nullable:
                raise OracleError(-1442, "column to be modified to NOT NULL is already NOT NULL")
            col.nullable = False
    elif m := re.match(r"merge into schema_migrations \w+ using \(select (\d+) as version\b", low):
        _table(schema, "schema_migrations")
        schema.migrations.add(int(m.group(1)))
    elif re.match(r"(create|alter|drop|rename|truncate)\b", low):
        raise ValueError(f"statement not modelled: {flat[:60]}")


def run_script(text: str, schema: Schema | None = None) -> Schema:
    """The schema after running a migration script on ``schema`` (a copy; a fresh database when None)."""
    schema = Schema() if schema is None else schema.copy()
    for stmt in split_script(text):
        if stmt.kind == "sql":
            apply(schema, stmt.text)
        elif stmt.kind == "plsql":
            codes = re.search(r"sqlcode\s+not\s+in\s*\(([^)]*)\)", mask(stmt.text), re.I)
            ignored = {int(c) for c in re.findall(r"-?\d+", codes.group(1))} if codes else set()
            for sql, _line in dynamic_sql(stmt):
                try:
                    apply(schema, sql)
                except OracleError as err:
                    if err.code not in ignored:
                        raise
    return schema


def oracle_tables(text: str) -> dict[str, dict[str, str]]:
    """``{table: {column: type}}`` built by the script(s) in ``text`` (types normalized, lowercase)."""
    schema = run_script(text)
    return {name: {col: c.type for col, c in t.columns.items()} for name, t in schema.tables.items()}
