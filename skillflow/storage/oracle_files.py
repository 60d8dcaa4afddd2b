"""Where the Oracle SQL files live (a source checkout or the wheel); no parser needed to read them."""

from __future__ import annotations

import re
from pathlib import Path


def oracle_dir() -> Path:
    """``sql/oracle`` of a source checkout, or the copy packaged as ``skillflow/_sql/oracle``."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_sql" / "oracle", package.parent / "sql" / "oracle"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("sql/oracle not found (neither packaged nor in a source checkout)")


def migration_files() -> list[Path]:
    """The numbered Oracle migrations in the order a DBA runs them."""
    return sorted(oracle_dir().glob("[0-9][0-9][0-9]_*.sql"))


def load_query(name: str) -> str:
    """The text of ``sql/oracle/queries/<name>.sql`` (comments kept, no trailing ``;``)."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"bad query name {name!r}")
    path = oracle_dir() / "queries" / f"{name}.sql"
    return path.read_text(encoding="utf-8").strip().rstrip(";").strip()
