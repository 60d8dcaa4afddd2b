"""The spool keeps every run it says it spooled, where the next replay looks, and replays them as a direct write.

docs/guide/runtime.md ("The spool, and when the database does not answer") and docs/RELIABILITY.md (the capture
outage rows): nothing is lost, never silently, and spooled-then-replayed rows equal what a direct write of the
same calls, in the same order, would have stored. Three ways that could fail:

- Two runs spooled under one ``run_id`` (two users of one agent passing their own request ids, an id reused
  after a restart, one user recording a run twice): each call answered ``spooled=True``. A direct write keeps the
  first and refuses the second (another user) or answers it ``already_stored`` (the same user); the replay must
  end in the same rows and say what it did with the later one.
- A relative spool folder (the default ``.skillflow/spool``): an agent that changes directory must keep spooling
  into, and replaying from, the folder it was made with.
- A process killed while it writes a spool file leaves the write's temporary file: a replay removes it once it
  is certainly abandoned, never a concurrent writer's file in progress.

The outage is the suite's usual one: a SQLite path where a folder sits in place of the database file, so every
connect fails and the agent's start-up check opens the breaker (each capture spools at once).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.capture import spool
from skillflow.capture.record import CaptureResult
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import workflow_memory
from tests.conftest import PG_SKIP_REASON, POSTGRES_DSN, _pg_clone
from tests.faults.dbdump import dump
from tests.faults.killing import run_killed
from tests.support.promotion import config

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
STEPS: list[dict[str, Any]] = [
    {"tool": "get_order", "arguments": {"id": 7}, "result": {"ok": True}},
    {"tool": "refund_order", "arguments": {"id": 7}},
]
TAKEN = "run_id is already used by another agent or user"
DAY = 24 * 3600.0


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def twin_engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    """Two migrated databases on one backend: (written directly, replayed into)."""
    if request.param == "sqlite":
        template = request.getfixturevalue("sqlite_template")
        urls = []
        for name in ("direct.db", "replayed.db"):
            shutil.copyfile(template, tmp_path / name)
            urls.append(f"sqlite:///{tmp_path / name}")
        clones: list[Iterator[str]] = []
    else:
        if not POSTGRES_DSN:
            pytest.skip(PG_SKIP_REASON)
        template = request.getfixturevalue("pg_template")
        clones = [_pg_clone(template), _pg_clone(template)]
        urls = [next(c) for c in clones]
    engines = [make_engine(u) for u in urls]
    try:
        yield engines[0], engines[1]
    finally:
        for eng in engines:
            eng.dispose()
        for clone in clones:
            next(clone, None)  # drops the clone


def _down(tmp_path: Path, spool_dir: Path, agent_id: str = "agent") -> Skillflow:
    """The agent while its database cannot be opened (a folder where the file belongs)."""
    down = tmp_path / "down.db"
    down.mkdir(exist_ok=True)
    return Skillflow(agent_id=agent_id, engine=make_engine(f"sqlite:///{down}"), config=config(), spool_dir=spool_dir)


def _rows(engine: Engine) -> list[tuple[Any, ...]]:
    wm = workflow_memory.c
    with engine.connect() as conn:
        q = select(wm.id, wm.agent_id, wm.user_id, wm.query, wm.created_at, wm.outcome, wm.outcome_source)
        return [tuple(r) for r in conn.execute(q.order_by(wm.id))]


def _spooled(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob("*.json"))


# (user, query) per call, all under one caller run id; the first call of each id is the one a direct write keeps.
SEQUENCES: dict[str, list[tuple[str, str]]] = {
    "two-users": [("alice", "refund order 1 for alice"), ("bob", "refund order 1 for bob")],
    "two-users-bob-first": [("bob", "refund order 1 for bob"), ("alice", "refund order 1 for alice")],
    "same-user-twice": [("alice", "refund order 1"), ("alice", "refund order 1, said again differently")],
    "interleaved": [("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("carol", "c1"), ("bob", "b2"), ("alice", "a3")],
}


def _calls(sf: Skillflow, sequence: list[tuple[str, str]]) -> list[CaptureResult]:
    out = []
    for i, (user, query) in enumerate(sequence):
        steps = [*STEPS, {"tool": "notify_user", "arguments": {"n": i}}] if i % 2 else STEPS
        out.append(sf.record_run(query, user, steps, run_id="req-1", created_at=T0 + timedelta(minutes=i)))
        # A second run id between them: its file sorts among the others', its row must not move.
        out.append(sf.record_run(f"other {i}", user, STEPS, run_id=f"other-{i}", created_at=T0))
    return out


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_runs_spooled_under_one_run_id_replay_to_the_rows_of_a_direct_write(
    twin_engines: tuple[Engine, Engine], tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the later call's file replaced the earlier's (both said ``spooled=True``) and the replay stored
    the later run: another user's row, or the same user's second content, where a direct write keeps the first."""
    direct_engine, replayed_engine = twin_engines
    sequence = SEQUENCES[name]
    direct = _calls(Skillflow(agent_id="agent", engine=direct_engine, config=config()), sequence)
    refused = [r for r in direct if not r.stored]
    assert all(r.error == TAKEN for r in refused)  # the direct write refuses another user's reuse of the id

    spool_dir = tmp_path / "spool"
    results = _calls(_down(tmp_path, spool_dir), sequence)
    assert all(r.spooled for r in results) and [r.run_id for r in results] == [r.run_id for r in direct]
    assert len(_spooled(spool_dir)) == len(results)  # before: one file per run id, the later call's

    caplog.set_level(logging.INFO, logger="skillflow.runtime")
    up = Skillflow(agent_id="agent", engine=replayed_engine, config=config(), spool_dir=spool_dir)
    replayed = up.replay_spool()
    assert _rows(replayed_engine) == _rows(direct_engine)
    assert dump(replayed_engine) == dump(direct_engine)
    # What the direct write answered each later call, the replay counted: stored, already stored, refused.
    assert replayed == sum(r.stored and not r.already_stored for r in direct)
    assert replayed.already_stored == sum(r.already_stored for r in direct)
    assert replayed.quarantined == len(refused)
    assert _spooled(spool_dir) == []
    kept = sorted((spool_dir / spool.QUARANTINE).glob("*.json")) if refused else []
    assert sorted(json.loads(p.read_text())["user_id"] for p in kept) == sorted(_users_refused(sequence))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum(TAKEN in line for line in warnings) == len(refused)  # each refusal logged, as a direct write's
    assert up.replay_spool() == 0 and _rows(replayed_engine) == _rows(direct_engine)


def _users_refused(sequence: list[tuple[str, str]]) -> list[str]:
    first = sequence[0][0]
    return [user for user, _ in sequence if user != first]


def test_a_conversation_recorded_turn_by_turn_during_an_outage_replays_to_the_direct_write(
    twin_engines: tuple[Engine, Engine], tmp_path: Path
) -> None:
    """Each turn's call spools the closed procedures again under their derived run ids; the final call carries
    the conversation's outcome. Replayed in order: the first insert, no-ops, then the late outcome. Before: the
    last call's file replaced the others, so each row took the final call's time instead of its first."""
    from tests.faults.test_capture_outage import CONVERSATION

    def record(sf: Skillflow) -> list[CaptureResult]:  # each call dated by its turn, as a caller may
        out: list[CaptureResult] = []
        for turn, n in enumerate((5, 8, len(CONVERSATION))):
            when = T0 + timedelta(minutes=turn)
            out += sf.record_conversation(
                CONVERSATION[:n], "u1", conversation_id="c-1", complete=False, created_at=when
            )
        when = T0 + timedelta(minutes=9)
        return out + sf.record_conversation(CONVERSATION, "u1", conversation_id="c-1", outcome=False, created_at=when)

    direct_engine, replayed_engine = twin_engines
    direct = record(Skillflow(agent_id="agent", engine=direct_engine, config=config()))
    assert direct and all(r.stored for r in direct)
    spool_dir = tmp_path / "spool"
    assert all(r.spooled for r in record(_down(tmp_path, spool_dir)))
    up = Skillflow(agent_id="agent", engine=replayed_engine, config=config(), spool_dir=spool_dir)
    replayed = up.replay_spool()
    wm = workflow_memory.c
    with replayed_engine.connect() as a, direct_engine.connect() as b:
        q = select(wm.id, wm.created_at, wm.outcome, wm.outcome_source, wm.execution_outcome).order_by(wm.id)
        assert a.execute(q).all() == b.execute(q).all()
    assert dump(replayed_engine) == dump(direct_engine)
    assert (replayed, replayed.already_stored) == (len({r.run_id for r in direct}), len(direct) - replayed)


def test_two_writers_spooling_one_run_id_at_once_keep_every_file(sqlite_engine: Engine, tmp_path: Path) -> None:
    """Four threads (each its own handle, as processes would be) spool one run id ten times each at once: forty
    files; the replay stores one run and accounts for the other thirty-nine."""
    spool_dir = tmp_path / "spool"
    users = ["alice", "alice", "bob", "carol"]
    start = threading.Barrier(len(users), timeout=60)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        sf = _down(tmp_path, spool_dir)
        start.wait()
        try:
            for i in range(10):
                assert sf.record_run(f"q {k} {i}", users[k], STEPS, run_id="shared", created_at=T0).spooled
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(len(users))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and all(not t.is_alive() for t in threads)
    files = _spooled(spool_dir)
    assert len(files) == 40  # before: 1
    docs = [json.loads(p.read_text()) for p in spool.pending(spool_dir)]  # in the replay's order
    first = docs[0]  # the first file of the run id is the one stored
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=spool_dir)
    replayed = up.replay_spool()
    assert replayed == 1 and replayed + replayed.already_stored + replayed.quarantined == 40
    same_user = sum(d["user_id"] == first["user_id"] for d in docs) - 1
    assert replayed.already_stored == same_user  # the rest were another user's: refused, in bad/
    assert [(r[2], r[3]) for r in _rows(sqlite_engine)] == [(first["user_id"], first["query"])]


def test_two_writers_taking_one_position_never_replace_each_others_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes that name their files at the same moment (one position for a run id): both files are kept
    (a name is never taken twice)."""
    monkeypatch.setattr(spool, "_next_position", lambda: 0)
    spool_dir = tmp_path / "spool"
    sf = _down(tmp_path, spool_dir)
    assert sf.record_run("first", "alice", STEPS, run_id="x").spooled
    assert sf.record_run("second", "bob", STEPS, run_id="x").spooled
    assert sorted(json.loads(p.read_text())["query"] for p in _spooled(spool_dir)) == ["first", "second"]


def test_a_file_kept_for_the_next_replay_holds_the_later_runs_of_its_run_id(
    sqlite_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose replay failed (kept for the next) must not let a later run of its id be stored before it."""
    spool_dir = tmp_path / "spool"
    down = _down(tmp_path, spool_dir)
    assert down.record_run("alice's", "alice", STEPS, run_id="x", created_at=T0).spooled
    assert down.record_run("bob's", "bob", STEPS, run_id="x", created_at=T0).spooled
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=spool_dir)
    write = up._write
    failures = [1]

    def failing_once(*args: Any, **kwargs: Any) -> CaptureResult:
        if failures:
            failures.pop()
            raise RuntimeError("a transient failure")
        return write(*args, **kwargs)

    monkeypatch.setattr(up, "_write", failing_once)
    assert up.replay_spool() == 0 and _rows(sqlite_engine) == []  # bob's run waits behind alice's
    assert len(_spooled(spool_dir)) == 2
    replayed = up.replay_spool()
    assert (replayed, replayed.quarantined) == (1, 1)
    assert [r[2] for r in _rows(sqlite_engine)] == ["alice"]


def test_a_file_spooled_before_the_position_names_replays_first_in_its_run_id(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    """A spool written by the release before (one ``<digest>.json`` per run id) replays before the later calls."""
    spool_dir = tmp_path / "spool"
    down = _down(tmp_path, spool_dir)
    assert down.record_run("old release", "alice", STEPS, run_id="x", created_at=T0).spooled
    (old,) = _spooled(spool_dir)
    old.rename(spool_dir / f"{old.name.split('-')[0]}.json")
    assert down.record_run("this release", "bob", STEPS, run_id="x", created_at=T0).spooled
    assert down.record_run("this release", "alice", STEPS, run_id="x", created_at=T0).spooled
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=spool_dir)
    replayed = up.replay_spool()
    assert (replayed, replayed.already_stored, replayed.quarantined) == (1, 1, 1)
    assert [(r[2], r[3]) for r in _rows(sqlite_engine)] == [("alice", "old release")]


# -- the spool folder is made absolute once ------------------------------------------------------------------


@pytest.mark.parametrize("given", [None, "spool-here"])
def test_an_agent_that_changes_directory_keeps_one_spool_folder(
    sqlite_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    """Before: the relative folder was resolved again at every write and replay, so runs spooled from another
    directory were stranded there and the replay from the start folder stored none."""
    start, task1, task2 = tmp_path / "start", tmp_path / "task1", tmp_path / "task2"
    for folder in (start, task1, task2):
        folder.mkdir()
    monkeypatch.chdir(start)
    down = _down(tmp_path, given)  # type: ignore[arg-type]
    want = start / (given or ".skillflow/spool")
    monkeypatch.chdir(task1)
    assert down.record_run("fix bug 1", "u", [{"tool": "edit_file"}], run_id="r1").spooled
    monkeypatch.chdir(task2)
    assert down.record_run("fix bug 2", "u", [{"tool": "edit_file"}], run_id="r2").spooled
    assert list(tmp_path.glob("task*/**/*.json")) == [] and len(_spooled(want)) == 2
    assert down.spool_dir == want and down.spool_dir.is_absolute()
    monkeypatch.chdir(start)
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=given)  # type: ignore[arg-type]
    monkeypatch.chdir(task1)  # the replay, too, reads the folder the handle was made with
    assert up.replay_spool() == 2 and [r[0] for r in _rows(sqlite_engine)] == ["r1", "r2"]


# -- temporary files of writes cut short ----------------------------------------------------------------------


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_replay_removes_abandoned_temporary_files_and_keeps_fresh_ones(
    sqlite_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool_dir = tmp_path / "spool"
    assert _down(tmp_path, spool_dir).record_run("kept run", "u", STEPS, run_id="r").spooled
    old = [spool_dir / ".abandon1.tmp", spool_dir / ".abandon2.tmp"]
    fresh = spool_dir / ".writing.tmp"  # a concurrent writer's file in progress
    for path in (*old, fresh):
        path.write_bytes(b'{"query": "cut sh')
    for path in old:
        _age(path, 2 * DAY)
    _age(fresh, 60)
    other = spool_dir / "notes.tmp"  # not a spool write's name: never touched
    other.write_bytes(b"x")
    _age(other, 2 * DAY)
    caplog.set_level(logging.INFO, logger="skillflow.runtime")
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=spool_dir)
    replayed = up.replay_spool()
    assert sorted(p.name for p in spool_dir.iterdir() if p.is_file()) == [".writing.tmp", "notes.tmp"]
    assert (replayed, replayed.removed_temporary) == (1, 2)
    assert any("2 abandoned temporary" in r.getMessage() for r in caplog.records)
    assert up.replay_spool().removed_temporary == 0


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_a_temporary_file_the_replay_removes_once_abandoned(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    """SIGKILL after the run's bytes were written and before the rename: a ``.tmp`` is left (no ``.json``).
    Before: no replay ever removed it (an audit counted 7.5 MB after 15 kills)."""
    spool_dir = tmp_path / "spool"
    run_killed("tests.faults.spool_kill_worker", str(tmp_path / "down.db"), str(spool_dir))
    (left,) = [p for p in spool_dir.iterdir() if p.is_file()]
    assert left.name.startswith(".") and left.suffix == ".tmp" and left.stat().st_size > 0
    up = Skillflow(agent_id="agent", engine=sqlite_engine, config=config(), spool_dir=spool_dir)
    up.replay_spool()
    assert left.exists()  # just written: perhaps a write still in progress
    _age(left, 2 * DAY)
    replayed = up.replay_spool()
    assert not left.exists() and replayed.removed_temporary == 1
