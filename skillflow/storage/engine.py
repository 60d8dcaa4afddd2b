"""Engines for SQLite (embedded default), PostgreSQL (psycopg 3) and Oracle (oracledb thin mode)."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool, StaticPool

SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str) -> str:
    """Pick the project's drivers: ``postgresql://`` → psycopg 3, ``oracle://`` → oracledb."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername == "oracle":
        parsed = parsed.set(drivername="oracle+oracledb")
    return parsed.render_as_string(hide_password=False)


def recordable_url(url: str) -> str | None:
    """``url`` as a Prefect deployment or flow run may record it: ``None`` when it carries a password.

    Deployment parameters, job variables and run parameters are shown in the Prefect UI and stored by its
    server, so a password must not be in them; a run given ``None`` reads ``$SKILLFLOW_DATABASE_URL`` from the
    environment it runs in (the worker's, or ``skillflow serve``'s). docs/guide/ops.md, "Secrets".
    """
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: nothing in it to hide, and it fails later
        return url
    in_query = any(_SECRET_PARAM.search(key) for key in parsed.query)  # ?password=…, ?sslpassword=…
    return None if parsed.password or in_query else url


_SECRET_PARAM = re.compile(r"(?i)passw(?:or)?d|pwd|secret|token")  # not "sslkey": a path, shown as paths are
_USERINFO = re.compile(r"(://[^/@:]*:)[^/@]*@")


def shown_url(url: str) -> str:
    """``url`` as the CLI prints it or a log line names it: the password, and a query value whose key reads like
    one (``?password=``, ``?sslpassword=``, ``?token=``), as ``***``. A URL SQLAlchemy cannot parse has what sits
    between ``user:`` and ``@`` masked."""
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: mask what looks like a password
        return _USERINFO.sub(r"\1***@", url)
    query = {key: "***" if _SECRET_PARAM.search(key) else value for key, value in parsed.query.items()}
    return parsed.set(query=query).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    # Two connections opening one new file at once (`skillflow migrate` twice, two workers): SQLite can answer the
    # switch to WAL "database is locked" at once, without its busy handler (the other connection is switching it
    # too). Asked again until the busy timeout; WAL once set stays, so a later connection's switch is a no-op.
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(
    url: str, *, connect_timeout: int | None = None, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, **kwargs: Any
) -> Engine:
    """A new engine; SQLite files get their folder, WAL and a busy timeout; ``connect_timeout`` (seconds)
    bounds a PostgreSQL connection attempt (psycopg's own default is 130 s).

    Its pool waits for a free connection at most until the thread's :func:`deadline` ends
    (:class:`BoundedQueuePool`), and it is safe across ``fork``: a forked process never uses a connection
    of its parent (:func:`_fork_safe`; docs/guide/runtime.md)."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and connect_timeout is not None:
        kwargs["connect_args"] = {"connect_timeout": connect_timeout, **kwargs.get("connect_args", {})}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            kwargs.setdefault("poolclass", StaticPool)
            kwargs.setdefault("connect_args", {"check_same_thread": False})
        else:
            kwargs.setdefault("poolclass", BoundedQueuePool)
            with suppress(OSError):  # one that cannot be made fails on connect, as a database that is down
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, **kwargs)
        if database not in ("", ":memory:"):
            event.listen(engine, "connect", partial(_sqlite_pragmas, busy_timeout_ms=busy_timeout_ms))
        return _fork_safe(engine)
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("poolclass", BoundedQueuePool)
    return _fork_safe(create_engine(url, **kwargs))


class BoundedQueuePool(QueuePool):
    """A :class:`~sqlalchemy.pool.QueuePool` whose wait for a free connection ends with the calling thread's
    :func:`deadline` (never later than ``pool_timeout``): with every connection in use by threads that wait on
    a stalled database, a checkout raises :class:`sqlalchemy.exc.TimeoutError` within the bound instead of
    after ``pool_timeout`` (30 s). Outside a deadline it is the plain ``QueuePool``. docs/guide/runtime.md,
    "The spool, and when the database does not answer"."""

    _configured_timeout: float = 30.0

    @property  # QueuePool reads ``self._timeout`` for each wait on its queue
    def _timeout(self) -> float:
        bound: Deadline | None = getattr(_active, "deadline", None)
        if bound is None:
            return self._configured_timeout
        return min(self._configured_timeout, bound.remaining())

    @_timeout.setter
    def _timeout(self, value: float) -> None:
        self._configured_timeout = value

    def recreate(self) -> QueuePool:
        pool = super().recreate()
        if isinstance(pool, BoundedQueuePool):  # never a deadline's remaining time as the new pool's timeout
            pool._configured_timeout = self._configured_timeout
        return pool


# -- fork: SQLAlchemy's "Using Connection Pools with Multiprocessing or os.fork()" ------------------------------
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()  # every engine make_engine built, alive
_PID = "skillflow_pid"


def _fork_safe(engine: Engine) -> Engine:
    """Keep ``engine``'s pooled connections to the process that opened them (docs/guide/runtime.md).

    A forked child (gunicorn ``--preload``, celery prefork, ``multiprocessing`` with ``fork``) inherits the
    parent's pooled connections: two processes on one server session interleave their transactions, and a run
    reported stored can be rolled back by the other process. The child's copy of every such engine gets a new,
    empty pool right after ``os.fork()`` (``dispose(close=False)``: the parent's connections are left open for
    the parent), and a checkout of a connection another process opened (a fork that skips Python's at-fork
    hooks) replaces it without closing it. An in-memory SQLite engine (one connection, in the process's own
    memory) keeps its copy."""
    if isinstance(engine.pool, StaticPool):
        return engine
    event.listen(engine, "connect", _mark_process)
    event.listen(engine, "checkout", _refuse_other_process, insert=True)  # before a deadline attaches it
    _ENGINES.add(engine)
    return engine


def _mark_process(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    record.info[_PID] = os.getpid()


def _refuse_other_process(_dbapi_conn: Any, record: Any, proxy: Any) -> None:
    pid = os.getpid()
    owner = record.info.get(_PID, pid)
    if owner != pid:
        # Not closed: it is the other process's session. The pool then opens a new connection for this process.
        record.dbapi_connection = proxy.dbapi_connection = None
        raise exc.DisconnectionError(f"pooled connection of process {owner} checked out in process {pid}")


def _forget_parent_connections() -> None:
    for engine in list(_ENGINES):
        with suppress(Exception):  # a hook that raises is only printed; the checkout guard still holds
            engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_parent_connections)


def close_file(url: str) -> None:
    """Before a command that wrote a SQLite file exits: close every pooled connection this process holds (each
    engine :func:`make_engine` built) and fold the write-ahead log into the file, so that the file alone is the
    whole database (a copy of it, a backup) once the process is gone. A process that exits with connections open
    leaves its last writes in ``<file>-wal``. Other URLs: nothing to do."""
    import sqlite3

    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or not parsed.database or not os.path.isfile(parsed.database):
        return
    for engine in list(_ENGINES):
        with suppress(Exception):
            engine.dispose()
    with suppress(sqlite3.Error):  # not a database, or held busy past the timeout: the log stays beside the file
        conn = sqlite3.connect(parsed.database, timeout=30)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


@lru_cache(maxsize=16)
def cached_engine(url: str) -> Engine:
    """One engine per URL per process (tasks take URLs, never engines)."""
    return make_engine(url)


@lru_cache(maxsize=16)
def capture_engine(url: str, connect_timeout: int, timeout_seconds: float) -> Engine:
    """The agent runtime's engine: connects within ``connect_timeout`` s, waits on a SQLite lock at most
    ``timeout_seconds``, and pings nothing on checkout (a ping to a stalled server would block outside
    :func:`deadline`; the runtime retries once on a stale connection instead)."""
    return make_engine(
        url,
        connect_timeout=connect_timeout,
        busy_timeout_ms=max(1, int(timeout_seconds * 1000)),
        pool_pre_ping=False,
    )


class Deadline:
    """A wall-clock bound on one unit of database work; :meth:`fire` aborts every connection it holds."""

    def __init__(self, seconds: float = float("inf")) -> None:
        self.ends = time.monotonic() + seconds
        self.fired = False
        self._lock = threading.Lock()
        self._conns: list[Any] = []

    def attach(self, dbapi_conn: Any) -> None:
        with self._lock:
            self._conns.append(dbapi_conn)
            fired = self.fired
        if fired:
            _abort(dbapi_conn)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            conns = list(self._conns)
        for conn in conns:
            _abort(conn)

    def remaining(self) -> float:
        """Seconds left before it fires (0 once fired)."""
        return 0.0 if self.fired else max(0.0, self.ends - time.monotonic())


_active = threading.local()


def _abort(dbapi_conn: Any) -> None:
    """Make a blocked call on ``dbapi_conn`` return with an error (the connection is then discarded)."""
    try:
        if hasattr(dbapi_conn, "interrupt"):  # sqlite3: abort the running statement
            dbapi_conn.interrupt()
        elif hasattr(dbapi_conn, "pgconn"):  # psycopg: a server that never answers gets its socket shut
            sock = socket.socket(fileno=os.dup(dbapi_conn.pgconn.socket))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()
    except Exception:  # noqa: BLE001 - the connection may already be closed; nothing left to abort
        pass


def _attach(dbapi_conn: Any, *_: Any) -> None:
    current = getattr(_active, "deadline", None)
    if current is not None:
        current.attach(dbapi_conn)


@contextmanager
def deadline(engine: Engine, seconds: float) -> Iterator[Deadline]:
    """Abort this thread's connections of ``engine`` still busy after ``seconds`` (docs/RELIABILITY.md).

    A blocked statement then raises ``OperationalError``: a server that accepted the connection but stalls
    mid-query cannot hold the caller longer than the bound. SQLite statements are interrupted; PostgreSQL
    (psycopg) connections get their socket shut. A connection attempt is bounded by the engine's
    ``connect_timeout`` instead. The wait for a free pooled connection ends with the deadline on an engine of
    :func:`make_engine` (:class:`BoundedQueuePool`), raising ``sqlalchemy.exc.TimeoutError``.
    """
    if not event.contains(engine, "checkout", _attach):
        # A new connection runs the dialect's first queries before it is checked out: attach it first.
        event.listen(engine, "first_connect", _attach, insert=True)
        event.listen(engine, "connect", _attach, insert=True)
        event.listen(engine, "checkout", _attach)
    bound = Deadline(seconds)
    previous = getattr(_active, "deadline", None)
    _active.deadline = bound
    timer = threading.Timer(seconds, bound.fire)
    timer.daemon = True
    timer.start()
    try:
        yield bound
    finally:
        timer.cancel()
        _active.deadline = previous


class Budget:
    """One bound shared by several units of database work (``prepare``'s skill read, docs/guide/runtime.md,
    "When prepare degrades"): each :meth:`unit` runs under :func:`deadline` with the time the units before it
    left, so a database that answers each unit in time but slowly cannot make the whole read longer than
    ``seconds``. The time between units (the request's embedding) is not counted. Once spent, a unit raises
    :class:`sqlalchemy.exc.TimeoutError` without opening a connection."""

    def __init__(self, engine: Engine, seconds: float) -> None:
        self.engine = engine
        self.left = seconds
        self.fired = False  # a unit's bound fired (its connection was aborted, not found stale)

    @contextmanager
    def unit(self) -> Iterator[Deadline]:
        if self.left <= 0:
            raise exc.TimeoutError("the database work's time bound is spent")
        started = time.monotonic()
        bound: Deadline | None = None
        try:
            with deadline(self.engine, self.left) as bound:
                yield bound
        finally:
            self.left -= time.monotonic() - started
            self.fired = self.fired or (bound is not None and bound.fired)


def stale(error: BaseException, bound: Deadline | Budget) -> bool:
    """Whether ``error`` met a pooled connection the server had closed (a restart, a failover, an idle cut-off),
    not ``bound`` firing: SQLAlchemy then invalidated the pool, so the unit may run once more on a new connection
    (the agent runtime's engine pings nothing on checkout, :func:`capture_engine`)."""
    return isinstance(error, exc.OperationalError) and bool(error.connection_invalidated) and not bound.fired


def set_statement_timeout(conn: Connection, seconds: float) -> None:
    """Inside a transaction: PostgreSQL cancels a statement of it still running after ``seconds``."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}")
