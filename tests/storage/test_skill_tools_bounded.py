"""The learned-skill tools never raise into the agent for a database problem, and are bounded like a capture.

A model calls ``list_skills``/``read_skill`` in the middle of the agent's loop (examples/openai_agent.py), so a
database that is down, or that stalls between the model call and the tool call, must give the tool call an answer
(``{"error": "skills could not be read (<ErrorClass>)"}``, as a missing skill gives one), within the capture bound
``SKILLFLOW_CAPTURE_TIMEOUT_SECONDS``; through the handle (``Skillflow.skill_tool``) the breaker then answers at
once (docs/guide/runtime.md, "Learned-skill tools" and "The spool, and when the database does not answer").

The stalled servers are those of tests/faults/test_capture_timeouts.py (a socket that accepts and never answers,
one that answers the PostgreSQL handshake and then never again), plus a TCP proxy in front of the real PostgreSQL
that stops forwarding after a healthy ``prepare``: the agent's pooled connection stalls mid-query.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.skill_tools import SkillNotAvailable, SkillsUnreadable, dispatch, list_skills, read_skill
from skillflow.kernel.models import SkillStatus
from skillflow.runtime import Skillflow
from skillflow.storage.engine import capture_engine, make_engine
from tests.faults.test_capture_timeouts import (  # noqa: F401 - fixtures, found by pytest in this module
    BOUND,
    StallingServer,
    real_postgres,
    short_timeouts,
)
from tests.storage.test_skill_tools import _skill

UNREADABLE = {"error": "skills could not be read (OperationalError)"}
BREAKER = {"error": "skills could not be read (DatabaseDown)"}


def _down_url(tmp_path: Path) -> str:
    """A SQLite database that cannot be opened (a folder where its file belongs): every connection fails."""
    db = tmp_path / "down.db"
    db.mkdir()
    return f"sqlite:///{db}"


def _in_thread(fn: Callable[[], Any], wait: float) -> tuple[Any, float]:
    """``fn()``'s answer (or exception) and its duration; fails when it is still blocked after ``wait`` s."""
    out: list[Any] = []

    def run() -> None:
        started = time.monotonic()
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            out.append(exc)
        out.append(time.monotonic() - started)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(wait)
    assert not worker.is_alive(), f"still blocked after {wait} s"
    return out[0], out[1]


# -- the database is down ---------------------------------------------------------------------------------


def test_a_database_that_is_down_answers_the_tool_call_with_the_error_class(tmp_path: Path) -> None:
    """Before, ``dispatch`` raised ``OperationalError`` into the agent's loop."""
    engine = make_engine(_down_url(tmp_path))
    kw: dict[str, Any] = {"engine": engine, "agent_id": "a", "user_id": "u"}
    assert dispatch("list_skills", "{}", **kw) == UNREADABLE
    assert dispatch("read_skill", {"name": "refund-order"}, **kw) == UNREADABLE
    # The functions themselves raise the documented refusal (a SkillNotAvailable), never the driver's error.
    with pytest.raises(SkillsUnreadable, match=r"^skills could not be read \(OperationalError\)$"):
        list_skills(engine, "a", "u")
    with pytest.raises(SkillNotAvailable):
        read_skill(engine, "a", "u", "refund-order")
    engine.dispose()


def test_the_handle_answers_from_its_breaker_once_the_database_failed(tmp_path: Path) -> None:
    """Through the handle the first failure opens the breaker: the next tool calls answer at once, without a
    connection attempt, as ``prepare`` and captures do."""
    sf = Skillflow(agent_id="a", database_url=_down_url(tmp_path), spool_dir=tmp_path / "spool")
    sf._down_until = 0.0  # the start-up check found it down: try once more, as after the breaker's window
    assert sf.skill_tool("list_skills", "{}", "u") == UNREADABLE
    assert sf._down()
    attempts: list[object] = []
    assert sf.engine is not None
    pool_connect = sf.engine.pool.connect
    sf.engine.pool.connect = lambda: attempts.append(1) or pool_connect()  # type: ignore[method-assign]
    assert sf.skill_tool("read_skill", {"name": "refund-order"}, "u") == BREAKER
    assert sf.skill_tool("list_skills", None, "u") == BREAKER
    assert attempts == []  # not one connection attempt while the breaker is open
    assert sf.skill_tool("read_skill", "{not json", "u") == {"error": "arguments must be a JSON object"}


def test_the_handle_keeps_the_tenant_scoping_of_the_tools(engine: Engine) -> None:
    active = _skill(engine, "a", "u", "h1", "refund-order", SkillStatus.ACTIVE)
    shadow = _skill(engine, "a", "u", "h2", "cancel-order", SkillStatus.SHADOW)
    other_user = _skill(engine, "a", "v", "h1", "refund-order", SkillStatus.ACTIVE)
    other_agent = _skill(engine, "b", "u", "h4", "track-parcel", SkillStatus.ACTIVE)
    sf = Skillflow(agent_id="a", engine=engine, embedder=HashingEmbedder())
    assert [s["id"] for s in sf.skill_tool("list_skills", "{}", "u")] == [active]
    assert sf.skill_tool("read_skill", json.dumps({"name": "refund-order"}), "u")["id"] == active
    assert sf.skill_tool("read_skill", {"name": "refund-order"}, "v")["id"] == other_user
    for name in ("cancel-order", shadow, other_user, other_agent, "track-parcel"):
        assert sf.skill_tool("read_skill", {"name": name}, "u") == {"error": "no active learned skill with that name"}
    assert sf.skill_tool("list_skills", "{}", "nobody") == []
    with pytest.raises(ValueError, match="not a skill tool"):
        sf.skill_tool("drop_tables", {}, "u")


# -- the database stalls ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("short_timeouts")
@pytest.mark.parametrize("mode", ["silent", "after_startup"])
def test_a_postgres_server_that_never_answers_answers_the_tool_call_within_the_bound(mode: str) -> None:
    """Before, ``dispatch`` on the runtime's engine waited with no bound on a server past its handshake
    (``after_startup``) and raised ``OperationalError`` on one that never answered at all (``silent``)."""
    server = StallingServer(mode)
    url = f"postgresql://postgres@127.0.0.1:{server.port}/test?sslmode=disable&gssencmode=disable"
    try:
        engine = capture_engine(url, 2, 0.5)
        kw: dict[str, Any] = {"engine": engine, "agent_id": "a", "user_id": "u"}
        answer, elapsed = _in_thread(lambda: dispatch("read_skill", {"name": "refund-order"}, **kw), 4 * BOUND)
        assert (answer, elapsed < BOUND) == (UNREADABLE, True), elapsed
        answer, elapsed = _in_thread(lambda: dispatch("list_skills", {}, **kw), 4 * BOUND)
        assert (answer, elapsed < BOUND) == (UNREADABLE, True), elapsed
        sf = Skillflow(agent_id="a", database_url=url, spool_dir=None)
        sf._down_until = 0.0  # its start-up check met the stall; the window is over
        answer, elapsed = _in_thread(lambda: sf.skill_tool("list_skills", {}, "u"), 4 * BOUND)
        assert (answer, elapsed < BOUND) == (UNREADABLE, True), elapsed
    finally:
        server.close()
    assert server.accepted >= 1


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream``; after :meth:`stall` it forwards nothing either way
    (a database that accepts and never answers, on the connections the agent's pool already holds)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.stalled = threading.Event()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def stall(self) -> None:
        self.stalled.set()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.stalled.is_set():
                    continue  # swallowed: the other side waits for an answer that never comes
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for s in self._open:
            s.close()


@pytest.fixture
def proxied(real_postgres: Engine) -> Iterator[tuple[Proxy, str]]:  # noqa: F811 - the imported fixture
    url = real_postgres.url
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    try:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.close()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.usefixtures("short_timeouts")
def test_a_database_that_stalls_after_prepare_answers_the_tool_call_within_the_bound(
    proxied: tuple[Proxy, str],
    real_postgres: Engine,  # noqa: F811 - the imported fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent's pooled connection worked for ``prepare``; the server stalls before the model's tool call.
    Before, ``dispatch('read_skill', ...)`` on that connection stayed blocked for as long as the stall lasted
    (60 s and more); now the tool call answers within the bound and the next one from the breaker, at once."""
    monkeypatch.setenv("SKILLFLOW_CAPTURE_BREAKER_SECONDS", "30")
    proxy, url = proxied
    skill = _skill(real_postgres, "a", "u", "h1", "refund-order", SkillStatus.ACTIVE)
    sf = Skillflow(agent_id="a", database_url=url, spool_dir=None, continual_learning=True, embedder=HashingEmbedder())
    assert sf.prepare("refund order 7", "u").error is None  # the database answered: the pool holds a connection
    assert sf.skill_tool("read_skill", {"name": "refund-order"}, "u")["id"] == skill
    proxy.stall()
    answer, elapsed = _in_thread(lambda: sf.skill_tool("read_skill", {"name": "refund-order"}, "u"), 4 * BOUND)
    assert (answer, elapsed < BOUND) == (UNREADABLE, True), elapsed
    answer, elapsed = _in_thread(lambda: sf.skill_tool("list_skills", {}, "u"), BOUND)
    assert (answer, elapsed < 0.1) == (BREAKER, True), elapsed
    # The module's dispatch on the same engine (the form earlier versions of the example used) is bounded too.
    answer, elapsed = _in_thread(
        lambda: dispatch("read_skill", {"name": "refund-order"}, engine=sf.engine, agent_id="a", user_id="u"),
        4 * BOUND,
    )
    assert answer == UNREADABLE and elapsed < BOUND, elapsed
