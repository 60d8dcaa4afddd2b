"""The CLI's error layer: an expected failure becomes one line on stderr and an exit code, never a traceback.

Exit code 2: what the operator gave is wrong (a database URL, the config file, an environment variable, a
path). Exit code 1: something the command depends on failed or refused (the database or the Prefect API is
unreachable, a skill's transition was refused). Any other exception is a bug and keeps its traceback, as
every failure does with ``--debug`` or ``SKILLFLOW_DEBUG=1`` (docs/RELIABILITY.md, "The CLI's errors").
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Iterator
from urllib.parse import urlsplit

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from skillflow.kernel.config import ConfigError, Settings
from skillflow.storage.engine import shown_url

USAGE, FAILED = 2, 1
STDOUT_CLOSED = 141  # 128 + SIGPIPE: the shell's status of a command whose reader left (`| head`)
PROJECT_PACKAGES = frozenset({"skillflow", "flows", "tasks"})
URL_HINT = "a SQLAlchemy URL such as sqlite:////abs/path/skillflow.db or postgresql://user@host:5432/db"


class CliError(Exception):
    """An expected failure with the one line to print and the exit code."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def checked_database_url(db: str | None) -> str:
    """``--db`` or ``$SKILLFLOW_DATABASE_URL``, checked: a URL SQLAlchemy cannot use is a one-line error."""
    url = db or Settings().database_url
    try:
        dialect = make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise bad_database_url(url, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    try:
        dialect.import_dbapi()  # the driver: what the engine imports on its first connection
    except ImportError as exc:
        shown = shown_url(url)
        raise CliError(
            f"--db {shown!r}: its driver is not installed ({exc.name or exc}); install the extra for the database "
            "(pip install '.[postgres]' or '.[oracle]'), or use another URL"
        ) from exc
    return url


def bad_database_url(url: str, problem: str) -> CliError:
    """The error for a database URL SQLAlchemy cannot use, with the ``sqlite:///`` form of a bare path."""
    if "://" not in url and (url.startswith(("/", ".", "~")) or url.endswith((".db", ".sqlite", ".sqlite3"))):
        absolute = os.path.abspath(os.path.expanduser(url))
        return CliError(f"--db {url!r} is a file path, not a database URL: use sqlite:///{absolute}")
    return CliError(f"--db {shown_url(url)!r}: {problem}; expected {URL_HINT}")


def stdout_closed() -> int:
    """After a ``BrokenPipeError``: the reader of stdout left (``skillflow … | head``), which is no error to report.

    Python's own advice (the ``signal`` module's "Note on SIGPIPE"): stdout then points at ``/dev/null``, so the
    flush at exit does not raise again (docs/RELIABILITY.md, "The CLI's errors")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (a test's capture): nothing to flush there
        pass
    finally:
        os.close(devnull)
    return STDOUT_CLOSED


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else ""


def _validation(exc: ValidationError) -> str:
    notes = getattr(exc, "__notes__", None)
    if notes:  # from kernel.config: each problem with the variable, override or file it came from
        return "invalid setting: " + "; ".join(notes) + " (the keys: `skillflow config --markdown`)"
    if exc.title == "Settings":
        problems = [f"SKILLFLOW_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()]
        return "invalid environment variable: " + "; ".join(problems)
    problems = [f"{'.'.join(str(p) for p in e['loc']) or exc.title}: {e['msg']}" for e in exc.errors()]
    return f"invalid {exc.title}: " + "; ".join(problems)


def _unreachable(exc: BaseException) -> str:
    try:
        request_url = str(exc.request.url)  # type: ignore[attr-defined]  # httpx errors carry their request
    except (AttributeError, RuntimeError):
        request_url = ""
    prefect = os.environ.get("PREFECT_API_URL", "")
    where = urlsplit(request_url or prefect)
    origin = f"{where.scheme}://{where.netloc}" if where.netloc else "the server"
    detail = _first_line(exc) or type(exc).__name__
    if prefect and urlsplit(prefect).netloc == where.netloc:
        return (
            f"cannot reach the Prefect API at {prefect} ({detail}): start it (`prefect server start`) "
            "or point PREFECT_API_URL at a running server"
        )
    return f"cannot reach {origin} ({detail}): check that it is running and the URL is right (Prefect: PREFECT_API_URL)"


CONFLICT_STATES = ("40001", "40P01")  # PostgreSQL: a serialization failure, a deadlock
# What a database server answered, in a driver's message: libpq's severity before the server's own text (psycopg
# gives a failed connection no SQLSTATE), or an Oracle error code other than the client's network ones (ORA-12xxx).
SERVER_ANSWER = re.compile(r"\b(?:FATAL|ERROR|PANIC):|\bORA-(?!12\d{3})\d{5}")


def _unreached(exc: DBAPIError) -> bool:
    """Whether the connection failed before any server answered (refused, no such host, a timeout): only then is
    "is the server running?" the question. A server that refused the login or the database (`FATAL: database "x"
    does not exist`), a statement that failed, and SQLite (a file, no server) are not (docs/RELIABILITY.md, "The
    CLI's errors")."""
    if exc.statement is not None or getattr(exc.orig, "sqlstate", None):
        return False
    if type(exc.orig).__module__.split(".")[0] == "sqlite3":
        return False
    return SERVER_ANSWER.search(str(exc.orig)) is None


def explain(exc: BaseException) -> CliError | None:
    """The one-line error for an expected failure, or None for a bug (which keeps its traceback)."""
    for link in _chain(exc):
        if isinstance(link, CliError):
            return link
        if type(link).__module__.startswith("httpx") and type(link).__name__.endswith(("ConnectError", "Timeout")):
            return CliError(_unreachable(link), FAILED)
    if isinstance(exc, ConfigError):
        return CliError(str(exc))
    if isinstance(exc, tomllib.TOMLDecodeError):
        return CliError(f"invalid TOML: {exc}")
    if isinstance(exc, ValidationError):
        return CliError(_validation(exc))
    if isinstance(exc, NoSuchModuleError | ArgumentError):
        return CliError(f"{_first_line(exc)}; a database URL must be {URL_HINT}")
    if isinstance(exc, OperationalError | DBAPIError):
        if getattr(exc.orig, "sqlstate", None) in CONFLICT_STATES:  # the server answered: other work held the rows
            return CliError(
                f"database error: {_first_line(exc.orig)} (concurrent work on the same rows, retries spent: run "
                "the command again)",
                FAILED,
            )
        running = "is the server running? " if _unreached(exc) else ""
        return CliError(
            f"database error: {_first_line(exc.orig)} ({running}check --db or SKILLFLOW_DATABASE_URL)", FAILED
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        return CliError(f"cannot use {exc.filename}: {exc.strerror or type(exc).__name__}; choose another path")
    if isinstance(exc, ConnectionError | TimeoutError):
        return CliError(f"connection failed: {_first_line(exc) or type(exc).__name__}", FAILED)
    if type(exc).__module__.split(".")[0] in PROJECT_PACKAGES and str(exc).strip():
        return CliError(_first_line(exc), FAILED)  # the project's own refusals and failures say what is wrong
    return None
