"""A database that does not answer cannot hold the agent: capture spools within its bound, replay stores the row.

Real sockets on 127.0.0.1: a server that accepts TCP connections and never says a word, and one that
speaks the PostgreSQL start-up handshake (authentication OK, ready for query) and then stalls on the
first query; and a SQLite database whose write lock another connection holds. ``Skillflow()`` is built
from a URL (the runtime's own engine), with ``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS`` at 0.5 s so the test
stays short; libpq's connection timeout cannot go below 2 s. Elapsed times are asserted only as bounds.
"""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import agent_tools, workflow_memory
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_engine

# Real stalled servers and locks, each waited out to its bound: `make test` runs them, `make test-fast` not.
pytestmark = pytest.mark.slow

STEPS = [{"tool": "lookup_order", "arguments": {"order_id": 7}, "result": {"ok": True}}]
BOUND = 5.0  # seconds: the 2 s connection floor (or the 0.5 s capture timeout) plus scheduling slack


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _handshake() -> bytes:
    """What a PostgreSQL server says after a start-up packet: authenticated, its parameters, ready."""
    params = [
        ("server_version", "16.0"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("standard_conforming_strings", "on"),
        ("integer_datetimes", "on"),
        ("DateStyle", "ISO, MDY"),
        ("TimeZone", "UTC"),
    ]
    out = _message(b"R", struct.pack("!I", 0))
    for name, value in params:
        out += _message(b"S", name.encode() + b"\0" + value.encode() + b"\0")
    return out + _message(b"K", struct.pack("!II", 4242, 1)) + _message(b"Z", b"I")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError
        data += chunk
    return data


class StallingServer:
    """``silent``: accepts and never answers; ``after_startup``: answers the handshake, then never again."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._open.append(conn)
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        try:
            while self.mode == "after_startup":
                length = struct.unpack("!I", _recv_exact(conn, 4))[0]
                code = struct.unpack("!I", _recv_exact(conn, length - 4)[:4])[0]
                if code in (80877103, 80877104):  # SSL / GSS encryption request: not offered
                    conn.sendall(b"N")
                    continue
                conn.sendall(_handshake())
                break
            while conn.recv(65536):  # read whatever comes and never reply
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for conn in self._open:
            conn.close()


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLFLOW_CAPTURE_TIMEOUT_SECONDS", "0.5")
    monkeypatch.setenv("SKILLFLOW_CAPTURE_CONNECT_TIMEOUT_SECONDS", "2")
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "0")  # every call tries: the bound of one call is measured


@pytest.fixture
def real_postgres() -> Iterator[Engine]:
    if not POSTGRES_DSN:
        pytest.skip(PG_SKIP_REASON)
    urls = _pg_engine()
    engine = make_engine(next(urls))
    migrate(engine)
    try:
        yield engine
    finally:
        engine.dispose()
        next(urls, None)


def _row(engine: Engine, run_id: str) -> tuple[str, int] | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(workflow_memory.c.query, workflow_memory.c.step_count).where(workflow_memory.c.id == run_id)
        ).first()
    return None if row is None else (row[0], row[1])


def _sqlite_agent(tmp_path: Path) -> tuple[Path, Skillflow]:
    """A migrated SQLite file and an agent handle on it (its own engine, the capture bounds of the environment)."""
    db = tmp_path / "skillflow.db"
    engine = make_engine(f"sqlite:///{db}")
    migrate(engine)
    engine.dispose()
    return db, Skillflow(agent_id="agent", database_url=f"sqlite:///{db}", spool_dir=tmp_path / "spool")


@pytest.mark.usefixtures("short_timeouts")
@pytest.mark.parametrize("mode", ["silent", "after_startup"])
def test_a_postgres_server_that_never_answers_spools_the_run_within_the_bound(
    mode: str, tmp_path: Path, real_postgres: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = StallingServer(mode)
    spool = tmp_path / "spool"
    url = f"postgresql://postgres@127.0.0.1:{server.port}/test?sslmode=disable&gssencmode=disable"
    try:
        started = time.monotonic()
        agent = Skillflow(agent_id="agent", database_url=url, spool_dir=spool)
        built = time.monotonic() - started
        started = time.monotonic()
        result = agent.record_run("refund order 7", "u1", STEPS, run_id=f"stalled-{mode}")
        captured = time.monotonic() - started
    finally:
        server.close()
    assert server.accepted >= 1  # the connection really reached the stalling server
    assert built < BOUND and captured < BOUND, (built, captured)
    assert (result.stored, result.spooled, result.error) == (False, True, "OperationalError")
    assert len(list(spool.glob("*.json"))) == 1

    # The replay runs at the default capture bound: 0.5 s is for the stalled server, and a loaded CI host's
    # first write into a fresh schema has been seen to take longer (the replay then keeps the file).
    monkeypatch.delenv("SKILLFLOW_CAPTURE_TIMEOUT_SECONDS")
    later = Skillflow(agent_id="agent", engine=real_postgres, spool_dir=spool)
    assert later.replay_spool() == 1
    assert _row(real_postgres, f"stalled-{mode}") == ("refund order 7", 1)


@pytest.mark.usefixtures("short_timeouts")
def test_a_locked_sqlite_database_spools_within_the_capture_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, agent = _sqlite_agent(tmp_path)
    locker = sqlite3.connect(db, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")  # another writer holds the lock (30 s busy wait before)
    try:
        started = time.monotonic()
        result = agent.record_run("refund order 7", "u1", STEPS, run_id="locked")
        elapsed = time.monotonic() - started
    finally:
        locker.rollback()
        locker.close()
    assert elapsed < BOUND / 2, elapsed
    assert (result.stored, result.spooled) == (False, True), result.error
    monkeypatch.delenv("SKILLFLOW_CAPTURE_TIMEOUT_SECONDS")  # the replay at the default bound, as above
    later = Skillflow(agent_id="agent", database_url=f"sqlite:///{db}", spool_dir=tmp_path / "spool")
    assert later.replay_spool() == 1
    engine = make_engine(f"sqlite:///{db}")
    assert _row(engine, "locked") == ("refund order 7", 1)
    engine.dispose()


@pytest.mark.usefixtures("short_timeouts")
@pytest.mark.parametrize("mode", ["silent", "after_startup"])
def test_prepare_against_a_postgres_server_that_never_answers_returns_within_the_bound(mode: str) -> None:
    """The skill read is bounded like a capture: the agent gets its request, without skills, and the reason."""
    server = StallingServer(mode)
    url = f"postgresql://postgres@127.0.0.1:{server.port}/test?sslmode=disable&gssencmode=disable"
    out: dict[str, object] = {}

    def call() -> None:
        agent = Skillflow(agent_id="agent", database_url=url, continual_learning=True)
        started = time.monotonic()
        out["prepared"] = agent.prepare("refund order 7", "u1")
        out["elapsed"] = time.monotonic() - started

    worker = threading.Thread(target=call, daemon=True)
    try:
        worker.start()
        worker.join(4 * BOUND)
    finally:
        server.close()
    assert not worker.is_alive(), "prepare still blocked on a stalled database"
    assert server.accepted >= 1
    prepared = out["prepared"]
    assert float(out["elapsed"]) < BOUND, out["elapsed"]  # type: ignore[arg-type]
    assert list(prepared.skill_ids) == []  # type: ignore[attr-defined]
    assert prepared.error == "skills could not be read (OperationalError)"  # type: ignore[attr-defined]
    assert "refund order 7" in json.dumps(prepared.request)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("short_timeouts")
def test_while_the_database_is_down_calls_stop_waiting_on_it_until_the_breaker_window_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One failure opens the breaker: captures spool and ``prepare`` skips the skill read at once, without a
    connection attempt; after the window the next call tries the database again."""
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "1.5")
    server = StallingServer("silent")
    spool = tmp_path / "spool"
    url = f"postgresql://postgres@127.0.0.1:{server.port}/test?sslmode=disable&gssencmode=disable"
    try:
        with caplog.at_level(logging.INFO, logger="skillflow.runtime"):
            agent = Skillflow(agent_id="agent", database_url=url, spool_dir=spool, continual_learning=True)
            tried = server.accepted  # the start-up schema check found the database down
            started = time.monotonic()
            results = [agent.record_run(f"refund order {i}", "u1", STEPS, run_id=f"down-{i}") for i in range(3)]
            prepared = agent.prepare("refund order 7", "u1")
            elapsed = time.monotonic() - started
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 2 and "for 2 s runs spool" in warned[1]  # start-up, the breaker: no line per call
        assert tried >= 1 and server.accepted == tried  # not one connection attempt while the breaker is open
        assert elapsed < 1.0, elapsed  # three captures and a prepare, none waiting on the database (was 4 × 2 s)
        assert [(r.stored, r.spooled, r.error) for r in results] == [(False, True, "DatabaseDown")] * 3
        assert (list(prepared.skill_ids), prepared.error) == ([], "skills could not be read (DatabaseDown)")
        assert "refund order 7" in json.dumps(prepared.request)
        time.sleep(1.6)
        started = time.monotonic()
        again = agent.record_run("refund order 9", "u1", STEPS, run_id="down-9")
        assert time.monotonic() - started >= 1.0  # the window is over: it waited on the database again
        assert server.accepted > tried and (again.spooled, again.error) == (True, "OperationalError")
    finally:
        server.close()
    assert len(list(spool.glob("*.json"))) == 4  # nothing lost


@pytest.mark.usefixtures("short_timeouts")
def test_the_breaker_closes_when_the_database_answers_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "1")
    db, agent = _sqlite_agent(tmp_path)
    locker = sqlite3.connect(db, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        first = agent.record_run("refund order 1", "u1", STEPS, run_id="lock-1")  # waits 0.5 s, opens the breaker
        second = agent.record_run("refund order 2", "u1", STEPS, run_id="lock-2")  # not tried: no lock wait
    finally:
        locker.rollback()
        locker.close()
    assert (first.error, second.error) == ("OperationalError", "DatabaseDown")
    assert second.spooled and not second.stored
    time.sleep(1.1)
    assert agent.record_run("refund order 3", "u1", STEPS, run_id="lock-3").stored  # tried again, and closed
    assert agent.record_run("refund order 4", "u1", STEPS, run_id="lock-4").stored
    assert agent.replay_spool() == 2
    engine = make_engine(f"sqlite:///{db}")
    assert [_row(engine, f"lock-{i}") for i in (1, 2)] == [("refund order 1", 1), ("refund order 2", 1)]
    engine.dispose()


def _token_conversation(n: int) -> list[dict[str, object]]:
    """A user turn whose first call (``get_token``, declared state-changing against its read verb) closes a
    procedure, and a trailing read: two segments under the declaration, one read-only segment under the verb rule."""
    calls = [("get_token", {"scope": "refunds"}), ("lookup_order", {"order_id": n})]
    out: list[dict[str, object]] = [{"role": "user", "content": f"refund order {n}"}]
    for i, (tool, args) in enumerate(calls):
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
        ]})  # fmt: skip
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": '{"ok": true}'})
    return out


@pytest.mark.usefixtures("short_timeouts")
def test_during_an_outage_a_conversation_is_segmented_with_the_declared_flags_last_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The declared state-changing flags cannot be read while the database is down: the handle segments with the
    ones it last read or registered, so the spooled procedures replay to the rows of a direct write."""
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "30")
    db, agent = _sqlite_agent(tmp_path)
    agent.register_tools(["get_token", "lookup_order"], state_changing={"get_token": True})
    direct = agent.record_conversation(_token_conversation(1), "u1", conversation_id="up")
    assert [r.stored for r in direct] == [True, True]
    locker = sqlite3.connect(db, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        assert agent.record_run("refund order 0", "u1", STEPS, run_id="lock-0").error == "OperationalError"
        down = agent.record_conversation(_token_conversation(2), "u1", conversation_id="down")
    finally:
        locker.rollback()
        locker.close()
    assert [(r.spooled, r.error) for r in down] == [(True, "DatabaseDown")] * 2  # two procedures, as declared
    assert agent.replay_spool() == 3
    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        rows = conn.execute(
            select(workflow_memory.c.conversation_id, workflow_memory.c.segment_index, workflow_memory.c.tool_sequence)
            .where(workflow_memory.c.conversation_id.is_not(None))
            .order_by(workflow_memory.c.conversation_id, workflow_memory.c.segment_index)
        ).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [
        ("down", 0, "get_token"), ("down", 1, "lookup_order"), ("up", 0, "get_token"), ("up", 1, "lookup_order")
    ]  # fmt: skip


def _registered(db: Path) -> list[tuple[str, int | None]]:
    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        rows = conn.execute(
            select(agent_tools.c.tool_name, agent_tools.c.changes_state).order_by(agent_tools.c.tool_name)
        ).all()
    engine.dispose()
    return [(r[0], r[1]) for r in rows]


@pytest.mark.usefixtures("short_timeouts")
def test_register_tools_during_an_outage_keeps_the_declaration_and_writes_it_when_the_database_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that registers its tools at start-up while the database is locked is not stopped: the handle
    segments with the flags it was given at once, and the registration is written by its next capture that reaches
    the database. Before, ``register_tools`` raised ``OperationalError`` into the agent and the flags were lost."""
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "30")
    db, agent = _sqlite_agent(tmp_path)
    locker = sqlite3.connect(db, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        assert agent.register_tools(["get_token", "lookup_order"], state_changing={"get_token": True}) is False
        assert time.monotonic() - started < BOUND
        down = agent.record_conversation(_token_conversation(2), "u1", conversation_id="down")
        agent._down_until = 0.0  # the breaker's window over, the database still locked
        # The capture's registration meets the outage and opens the breaker: the run spools without a second wait.
        spooled = agent.record_run("refund order 9", "u1", STEPS, run_id="during")
    finally:
        locker.rollback()
        locker.close()
    assert [(r.spooled, r.error) for r in down] == [(True, "DatabaseDown")] * 2  # two procedures, as declared
    assert (spooled.spooled, spooled.error) == (True, "DatabaseDown")
    assert _registered(db) == []  # not written yet
    agent._down_until = 0.0  # the breaker's window over (not waited out in the test)
    assert agent.record_run("refund order 3", "u1", STEPS, run_id="after").stored
    assert _registered(db) == [("get_token", 1), ("lookup_order", None)]
    assert agent.replay_spool() == 3


@pytest.mark.usefixtures("short_timeouts")
@pytest.mark.parametrize("mode", ["silent", "after_startup"])
def test_register_tools_against_a_postgres_server_that_never_answers_returns_within_the_bound(mode: str) -> None:
    """Before, ``register_tools`` waited on a stalled server with no bound (``after_startup``) or raised."""
    server = StallingServer(mode)
    try:
        agent = Skillflow(
            agent_id="agent", database_url=f"postgresql+psycopg://u@127.0.0.1:{server.port}/db", spool_dir=None
        )
        outcome: list[object] = []

        def call() -> None:
            try:
                outcome.append(agent.register_tools(["lookup_order"]))
            except Exception as exc:  # noqa: BLE001 - the assertion below names it
                outcome.append(exc)

        worker = threading.Thread(target=call, daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(BOUND + 5)
        assert not worker.is_alive(), "register_tools still blocked"
        assert time.monotonic() - started < BOUND
        assert outcome == [False]
        assert agent._declared_tools() == {}
    finally:
        server.close()
