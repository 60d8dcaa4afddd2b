"""Static checks for the Oracle 23ai SQL in ``sql/oracle`` (no Oracle server needed).

``check_oracle_sql`` splits a SQL*Plus script into statements (PL/SQL blocks end at a lone ``/``), checks
each plain statement and each DDL string run by ``EXECUTE IMMEDIATE`` with sqlglot (``read="oracle"``)
plus explicit rules for what sqlglot wrongly accepts (``LIMIT``, ``JSONB``, ``ON CONFLICT``…) or cannot
parse (``VECTOR(n, FLOAT32)``, ``CREATE VECTOR INDEX``, ``FETCH APPROX``). ``check_migration`` adds the
re-runnability rules; ``tests.support.oracle.ddl_model`` reads the tables back for the no-drift test.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from skillflow.storage.oracle_files import load_query, migration_files, oracle_dir
from tests.support.oracle.ddl_model import oracle_tables, run_script
from tests.support.oracle.lexer import Statement, dynamic_sql, mask, split_script

__all__ = [
    "Problem",
    "Statement",
    "check_migration",
    "check_oracle_sql",
    "dynamic_sql",
    "load_query",
    "migration_files",
    "oracle_dir",
    "oracle_tables",
    "run_script",
    "split_script",
]

# "Already exists / already done" errors a re-runnable migration may ignore, by the DDL that raises them.
IGNORABLE = {
    "create table": {-955},
    "create index": {-955, -1408},
    "create vector index": {-955},
    "add column": {-1430},
    "add constraint": {-2260, -2261, -2264, -2275},
    "modify not null": {-1442},
    "drop index": {-1418},  # ORA-01418 specified index does not exist
}

# Oracle reserved words (V$RESERVED_WORDS, reserved = 'Y') that break unquoted identifiers.
RESERVED = frozenset(
    """access add all alter and any as asc audit between by char check cluster column comment compress connect
    create current date decimal default delete desc distinct drop else exclusive exists file float for from grant
    group having identified immediate in increment index initial insert integer intersect into is level like lock
    long maxextents minus mlslabel mode modify noaudit nocompress not nowait null number of offline on online option
    or order pctfree prior public raw rename resource revoke row rowid rownum rows select session set share size
    smallint start successful synonym sysdate table then to trigger uid union unique update user validate values
    varchar varchar2 view whenever where with""".split()  # noqa: SIM905 - a word list reads better as text
)

# (pattern on comment- and string-masked text, message): SQL that sqlglot accepts but Oracle rejects.
RULES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (name, re.compile(pattern, re.I), message)
    for name, pattern, message in (
        ("limit", r"\blimit\b", "LIMIT is not Oracle SQL: use FETCH FIRST n ROWS ONLY"),
        ("jsonb", r"\bjsonb\b", "JSONB is PostgreSQL: use CLOB CHECK (col IS JSON)"),
        ("on-conflict", r"\bon\s+conflict\b", "ON CONFLICT is PostgreSQL/SQLite: use MERGE"),
        ("upsert", r"\b(insert\s+or\s+(ignore|replace)|replace\s+into|on\s+duplicate\s+key)\b", "use MERGE"),
        ("serial", r"\b(big|small)?serial\b", "SERIAL is PostgreSQL: use GENERATED ... AS IDENTITY"),
        ("autoincrement", r"\bauto_?increment\b", "AUTOINCREMENT is not Oracle: use GENERATED ... AS IDENTITY"),
        ("boolean", r"\bboolean\b", "no BOOLEAN columns (23ai-only, older clients break): use SMALLINT + CHECK"),
        ("text-type", r"\btext\b", "TEXT is not an Oracle type: use CLOB or VARCHAR2(n CHAR)"),
        ("varchar", r"\bvarchar\s*\(", "use VARCHAR2(n CHAR), not VARCHAR"),
        ("backtick", r"`", "backticks are MySQL quoting: Oracle quotes identifiers with double quotes"),
        ("now", r"\bnow\s*\(", "NOW() is not Oracle: bind the time from the application (or SYSTIMESTAMP)"),
        ("cast-operator", r"::", "the :: cast is PostgreSQL: use CAST(x AS type)"),
        ("ilike", r"\bilike\b", "ILIKE is PostgreSQL: compare UPPER()/LOWER() values"),
        ("pg-types", r"\b(timestamptz|bytea|datetime|tinyint|mediumtext)\b", "not an Oracle type"),
        ("string-agg", r"\b(string_agg|group_concat)\b", "use LISTAGG"),
        ("offset", r"\boffset\s+(\d+|:\w+)\b(?!\s+rows?\b)", "Oracle needs OFFSET n ROWS"),
    )
)

VECTOR_TYPE = re.compile(r"\bvector\s*\(([^()]*)\)", re.I)
VECTOR_FORMATS = {"float32", "float64", "int8", "binary", "*"}
METRICS = "cosine|euclidean|euclidean_squared|l2_squared|dot|manhattan|hamming|jaccard"
VECTOR_INDEX = re.compile(
    r"^create\s+vector\s+index\s+\w+\s+on\s+\w+\s*\(\s*\w+\s*\)\s+"
    r"organization\s+(inmemory\s+neighbor\s+graph|neighbor\s+partitions)"
    rf"(\s+distance\s+({METRICS}))?(\s+with\s+target\s+accuracy\s+(?P<acc>\d+))?"
    r"(\s+parameters\s*\([^()]*\))?(\s+parallel\s+\d+)?$",
    re.I,
)
APPROX_FETCH = re.compile(
    r"\bfetch\s+(approx|approximate)\s+(first|next)\s+(\S+)\s+(rows?)\s+only(\s+with\s+target\s+accuracy\s+(\d+))?",
    re.I,
)
MODIFY = re.compile(r"^alter\s+table\s+\w+\s+modify\s*\(\s*\w+(\s+default\s+[^()]+?)?(\s+(not\s+)?null)?\s*\)$", re.I)
DISTANCE = re.compile(r"\bvector_distance\s*\(([^()]*)\)", re.I)


@dataclass(frozen=True)
class Problem:
    """One finding: the script line it starts on, a stable rule id and what to do."""

    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.message}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def _vector_rules(sql: str, masked: str, line: int) -> tuple[list[Problem], str]:
    """Validate VECTOR types and APPROX fetches; return problems and the SQL with them made sqlglot-readable."""
    problems: list[Problem] = []
    for m in VECTOR_TYPE.finditer(masked):
        args = [a.strip().lower() for a in m.group(1).split(",")]
        ok = (
            1 <= len(args) <= 3
            and (args[0] == "*" or (args[0].isdigit() and 0 < int(args[0]) <= 65535))
            and (len(args) < 2 or args[1] in VECTOR_FORMATS)
            and (len(args) < 3 or args[2] in {"dense", "sparse"})
        )
        if not ok:
            problems.append(Problem(line + _line_of(masked, m.start()), "vector-type", "malformed VECTOR(dim, format)"))
    for m in APPROX_FETCH.finditer(masked):
        acc = m.group(6)
        if acc is not None and not 0 < int(acc) <= 100:
            problems.append(Problem(line + _line_of(masked, m.start()), "approx", "TARGET ACCURACY must be 1..100"))
    for m in DISTANCE.finditer(masked):
        args = [a.strip().lower() for a in m.group(1).split(",")]
        if len(args) == 3 and not re.fullmatch(METRICS, args[2]):
            problems.append(Problem(line + _line_of(masked, m.start()), "vector-distance", f"unknown metric {args[2]}"))
    # sqlglot cannot parse these; swap in equivalents of the same length so offsets and lines still match.
    readable = VECTOR_TYPE.sub(lambda m: "blob".ljust(len(m.group(0))), sql)
    readable = APPROX_FETCH.sub(
        lambda m: f"fetch first {m.group(3)} {m.group(4)} only".ljust(len(m.group(0))), readable
    )
    return problems, readable


def _identifier_problems(tree: exp.Expression, line: int) -> list[Problem]:
    problems = []
    for node in tree.find_all(exp.ColumnDef, exp.Table, exp.Constraint, exp.TableAlias, exp.Alias):
        name = node.alias if isinstance(node, exp.Alias) else node.name
        quoted = isinstance(node.this, exp.Identifier) and node.this.quoted
        if name and not quoted and name.lower() in RESERVED:
            problems.append(Problem(line, "reserved-word", f"{name!r} is an Oracle reserved word"))
        if len(name) > 128:
            problems.append(Problem(line, "identifier-length", f"identifier longer than 128 bytes: {name[:40]}…"))
    return problems


def check_statement(sql: str, line: int = 1, dynamic: bool = False) -> list[Problem]:
    """Check one SQL statement (no trailing ``;`` expected when it is run by EXECUTE IMMEDIATE)."""
    masked = mask(sql)
    body = masked.strip()
    if not body:
        return [Problem(line, "empty", "empty statement")]
    problems = [
        Problem(line + _line_of(masked, m.start()), name, message)
        for name, pattern, message in RULES
        for m in pattern.finditer(masked)
    ]
    if dynamic and body.endswith(";"):
        problems.append(Problem(line, "dynamic-semicolon", "EXECUTE IMMEDIATE DDL must not end with ';' (ORA-00911)"))
    vector_problems, readable = _vector_rules(sql, masked, line)
    problems += vector_problems
    flat = " ".join(body.split())
    if re.match(r"create\s+vector\s+index\b", flat, re.I):
        m = VECTOR_INDEX.match(flat)
        if not m or (m.group("acc") and not 0 < int(m.group("acc")) <= 100):
            problems.append(Problem(line, "vector-index", "CREATE VECTOR INDEX does not match the 23ai grammar"))
        return problems
    if re.match(r"alter\s+table\s+\w+\s+modify\b", flat, re.I):
        if not MODIFY.match(flat):
            problems.append(Problem(line, "modify", "expected ALTER TABLE t MODIFY (col [DEFAULT expr] [NOT NULL])"))
        return problems
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # sqlglot warns before falling back to a Command; we report that ourselves
    try:
        trees = sqlglot.parse(readable, read="oracle")
    except SqlglotError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return [*problems, Problem(line, "parse", f"not valid Oracle SQL: {first}")]
    finally:
        logger.setLevel(level)
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        problems.append(Problem(line, "statements", f"expected one statement, found {len(trees)}"))
    for tree in trees:
        if not isinstance(tree, exp.Expression):
            continue
        if isinstance(tree, exp.Command):
            problems.append(Problem(line, "parse", f"not understood as Oracle SQL: {flat[:60]}"))
        else:
            problems += _identifier_problems(tree, line)
    return problems


def _check_block(stmt: Statement) -> list[Problem]:
    problems: list[Problem] = []
    masked = mask(stmt.text).lower()
    words = re.findall(r"[a-z_][a-z0-9_$#]*", masked)
    depth = 0
    for i, word in enumerate(words):
        prev = words[i - 1] if i else ""
        if word == "begin" or (word in ("if", "loop", "case") and prev != "end"):
            depth += 1
        elif word == "end":
            depth -= 1
        if depth < 0:
            break
    if depth != 0:
        problems.append(Problem(stmt.line, "plsql", "unbalanced BEGIN/IF/LOOP … END in PL/SQL block"))
    if re.search(r"\bwhen\s+others\s+then\s+null\b", masked) or ("when others" in masked and "raise" not in masked):
        problems.append(Problem(stmt.line, "swallow", "WHEN OTHERS must re-raise errors it does not expect"))
    for sql, line in dynamic_sql(stmt):
        problems += check_statement(sql, line, dynamic=True)
    return problems


def check_oracle_sql(text: str) -> list[Problem]:
    """All problems in a SQL*Plus script or a single query file; an empty list means it passed."""
    problems: list[Problem] = []
    for stmt in split_script(text):
        if stmt.kind == "error":
            problems.append(Problem(stmt.line, "script", stmt.text))
        elif stmt.kind == "plsql":
            problems += _check_block(stmt)
        elif stmt.kind == "sql":
            problems += check_statement(stmt.text, stmt.line)
    return problems


def _ddl_kind(sql: str) -> str | None:
    flat = " ".join(mask(sql).lower().split())
    for kind, pattern in (
        ("create vector index", r"^create vector index\b"),
        ("create table", r"^create table\b"),
        ("create index", r"^create (unique )?index\b"),
        ("add constraint", r"^alter table \w+ add constraint\b"),
        ("add column", r"^alter table \w+ add\s*\("),
        ("modify not null", r"^alter table \w+ modify\s*\(\s*\w+\s+not null\s*\)$"),
        ("drop index", r"^drop index\b"),
        ("modify", r"^alter table \w+ modify\b"),
    ):
        if re.search(pattern, flat):
            return kind
    return "other ddl" if re.match(r"^(create|alter|drop|rename|truncate)\b", flat) else None


def check_migration(text: str) -> list[Problem]:
    """``check_oracle_sql`` plus the rules that make a migration re-runnable."""
    problems = check_oracle_sql(text)
    for stmt in split_script(text):
        if stmt.kind == "sql":
            kind = _ddl_kind(stmt.text)
            if kind is not None:
                problems.append(Problem(stmt.line, "rerun", f"top-level {kind} fails on re-run: wrap it in a block"))
            if re.match(r"\s*insert\b", mask(stmt.text), re.I):
                problems.append(Problem(stmt.line, "rerun", "plain INSERT duplicates on re-run: use MERGE"))
        elif stmt.kind == "plsql":
            ignored = {-int(c) for c in re.findall(r"-\s*(\d+)", _ignore_list(stmt.text))}
            for sql, line in dynamic_sql(stmt):
                kind = _ddl_kind(sql)
                expected = IGNORABLE.get(kind or "", set())
                if expected and not ignored & expected:
                    codes = ", ".join(f"ORA-{-c:05d}" for c in sorted(expected, reverse=True))
                    problems.append(Problem(line, "rerun", f"{kind} must ignore {codes} to be re-runnable"))
                unexpected = ignored - set().union(*IGNORABLE.values())
                if unexpected:
                    problems.append(Problem(line, "rerun", f"ignores unexpected error codes {sorted(unexpected)}"))
    return problems


def _ignore_list(block: str) -> str:
    m = re.search(r"sqlcode\s+not\s+in\s*\(([^)]*)\)", mask(block), re.I)
    return m.group(1) if m else ""
