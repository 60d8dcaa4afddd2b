"""Capture cannot strand a run: lone surrogates, hostile run ids and broken spool files.

A lone surrogate (``"\\ud800"``) in any field but the tenant ids (refused there, see
tests/storage/test_hostile_callers.py) is replaced by U+FFFD at capture, so the run is stored while the
database is up and spooled (then replayed) while it is down; a spool file is written
atomically and named without trusting the caller's ``run_id``; ``replay_spool`` quarantines a file it
cannot read in ``bad/`` and goes on with the good ones.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory

S = "\ud800"  # a lone surrogate: not encodable as UTF-8
STEPS = [{"tool": "lookup", "arguments": {"id": 1}, "result": {"ok": True}}]


def _row(engine: Engine, run_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(select(workflow_memory).where(workflow_memory.c.id == run_id)).mappings().first()
    return dict(row) if row is not None else None


def _down(tmp_path: Path) -> Engine:
    """A SQLite path that cannot be opened (a directory sits there): every connect is an OperationalError."""
    where = tmp_path / "down.db"
    where.mkdir(exist_ok=True)
    return make_engine(f"sqlite:///{where}")


CASES: list[tuple[str, dict[str, Any]]] = [
    ("query", {"query": f"refund {S} now"}),
    ("tool", {"steps": [{"tool": f"look{S}up"}]}),
    ("argument key", {"steps": [{"tool": "lookup", "arguments": {f"k{S}": 1}}]}),
    ("argument value", {"steps": [{"tool": "lookup", "arguments": {"k": f"v{S}"}}]}),
    ("result", {"steps": [{"tool": "lookup", "result": {"r": [f"x{S}"]}}]}),
    ("step error", {"steps": [{"tool": "lookup", "error": f"boom{S}", "error_class": f"E{S}"}]}),
    ("timestamp text", {"steps": [{"tool": "lookup", "timestamp": f"t{S}"}]}),
    ("execution_error", {"execution_error": f"err{S}"}),
    ("skills_activated", {"skills_activated": [f"s{S}"]}),
    ("metadata", {"metadata": {f"m{S}": f"v{S}", "n": [S]}}),
    ("run_id", {"run_id": f"run{S}"}),
    ("conversation_id", {"conversation_id": f"c{S}"}),
]


def _call(sf: Skillflow, kwargs: dict[str, Any]) -> Any:
    args: dict[str, Any] = {"query": "q", "user_id": "u1", "steps": STEPS, **kwargs}
    return sf.record_run(args.pop("query"), args.pop("user_id"), args.pop("steps"), **args)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_a_lone_surrogate_in_any_field_is_stored(
    sqlite_engine: Engine, tmp_path: Path, name: str, kwargs: dict[str, Any]
) -> None:
    _assert_stored(sqlite_engine, tmp_path, name, kwargs)


def test_lone_surrogates_in_every_field_at_once_are_stored(engine: Engine, tmp_path: Path) -> None:
    everything: dict[str, Any] = {}
    for _, kwargs in CASES:
        if "steps" in kwargs:
            everything.setdefault("steps", []).extend(kwargs["steps"])
        else:
            everything.update(kwargs)
    _assert_stored(engine, tmp_path, "all", everything)


def _assert_stored(engine: Engine, tmp_path: Path, name: str, kwargs: dict[str, Any]) -> None:
    sf = Skillflow(agent_id="agent", engine=engine, spool_dir=tmp_path / "spool")
    result = _call(sf, kwargs)
    assert result.stored, (name, result.error)
    row = _row(engine, result.run_id)
    assert row is not None and row["agent_id"] == "agent"
    text = json.dumps({k: v for k, v in row.items() if k != "created_at"}, default=str, ensure_ascii=False)
    text.encode("utf-8")  # nothing unencodable was stored
    if name not in ("execution_error", "skills_activated"):  # neither is a column of the run itself
        assert "\ufffd" in text, name
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_a_lone_surrogate_while_the_database_is_down_is_spooled_then_replayed(
    sqlite_engine: Engine, tmp_path: Path, name: str, kwargs: dict[str, Any]
) -> None:
    spool = tmp_path / "spool"
    down = Skillflow(agent_id="agent", engine=_down(tmp_path), spool_dir=spool)
    bad = _call(down, kwargs)  # never raises
    good = down.record_run("a good run", "u1", STEPS, run_id="good-run")
    assert bad.spooled and good.spooled, (name, bad.error)
    files = list(spool.glob("*.json"))
    assert len(files) == 2 and all(f.stat().st_size > 0 for f in files)
    assert [p.name for p in spool.iterdir() if p.is_file() and p.suffix != ".json"] == []  # no temp file left
    up = Skillflow(agent_id="agent", engine=sqlite_engine, spool_dir=spool)
    assert up.replay_spool() == 2
    assert _row(sqlite_engine, bad.run_id) is not None and _row(sqlite_engine, "good-run") is not None
    assert list(spool.glob("*.json")) == []


def test_replay_quarantines_unreadable_files_and_replays_the_good_ones(sqlite_engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    down = Skillflow(agent_id="agent", engine=_down(tmp_path), spool_dir=spool)
    ids = [down.record_run(f"run {i}", "u1", STEPS, run_id=f"good-{i}").run_id for i in range(3)]
    assert len(list(spool.glob("*.json"))) == 3
    broken = {
        "empty.json": b"",
        "half.json": b'{"query": "q", "agent_id": "agent", "us',
        "list.json": b"[1, 2, 3]",
        "not-utf8.json": b'{"query": "\xff\xfe"}',
        "bad-time.json": json.dumps({"agent_id": "agent", "created_at": "yesterday", "query": "q"}).encode(),
        "no-user.json": json.dumps({"agent_id": "agent", "query": "q", "steps": []}).encode(),
        "surrogate.json": b'{"agent_id": "agent", "user_id": "u1", "run_id": "sur", "query": "\\ud800", "steps": []}',
        "no-run-id.json": json.dumps({"agent_id": "agent", "user_id": "u1", "query": "q", "steps": []}).encode(),
    }
    for name, data in broken.items():
        (spool / name).write_bytes(data)
    up = Skillflow(agent_id="agent", engine=sqlite_engine, spool_dir=spool)
    assert up.replay_spool() == 4  # the three good runs and the escaped surrogate (now U+FFFD)
    assert all(_row(sqlite_engine, i) is not None for i in ids)
    assert _row(sqlite_engine, "sur")["query"] == "\ufffd"  # type: ignore[index]
    assert list(spool.glob("*.json")) == []
    quarantined = sorted(p.name for p in (spool / "bad").iterdir())
    assert quarantined == sorted(set(broken) - {"surrogate.json"})
    assert up.replay_spool() == 0  # quarantined files are not read again


def test_replay_keeps_the_spool_while_the_database_is_still_down(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    down = Skillflow(agent_id="agent", engine=_down(tmp_path), spool_dir=spool)
    for i in range(3):
        assert down.record_run(f"run {i}", "u1", STEPS, run_id=f"r-{i}").spooled
    assert down.replay_spool() == 0
    assert len(list(spool.glob("*.json"))) == 3 and not (spool / "bad").exists()


HOSTILE_IDS = ["../x", "../../escape", "/ABS", "a/b/c", "..", ".", "bad\\name", "run:1*?", " ", "ĉ" * 40]


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_a_hostile_run_id_stays_in_the_spool_and_replays_with_its_id(
    sqlite_engine: Engine, tmp_path: Path, run_id: str
) -> None:
    work = tmp_path / "work"
    spool = work / "spool"
    if run_id == "/ABS":
        run_id = f"/tmp/evil-{uuid.uuid4().hex[:8]}"  # an absolute path outside the spool
    down = Skillflow(agent_id="agent", engine=_down(tmp_path), spool_dir=spool)
    result = down.record_run("q", "u1", STEPS, run_id=run_id)
    assert result.spooled and result.run_id == run_id
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("skillflow.db")]
    assert [p.parent for p in written] == [spool], written  # nothing outside the spool folder
    if run_id.startswith("/tmp/evil-"):
        assert not Path(f"{run_id}.json").exists() and not Path(run_id).exists()
    up = Skillflow(agent_id="agent", engine=sqlite_engine, spool_dir=spool)
    assert up.replay_spool() == 1
    row = _row(sqlite_engine, run_id)
    assert row is not None and row["query"] == "q"


def test_two_agents_spooling_the_same_run_id_keep_both_files(sqlite_engine: Engine, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    for agent in ("a1", "a2"):
        assert Skillflow(agent_id=agent, engine=_down(tmp_path), spool_dir=spool).record_run("q", "u", STEPS).spooled
        Skillflow(agent_id=agent, engine=_down(tmp_path), spool_dir=spool).record_run("q", "u", STEPS, run_id="same")
    assert len(list(spool.glob("*.json"))) == 4


# -- property: any text in every field -------------------------------------------------------------

TEXT = st.text(alphabet=st.characters() | st.sampled_from([S, "\udfff", "\x00", "/", ".", "\\", "\n"]), max_size=12)


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Skillflow, Skillflow]]:
    """(the database, an agent on it, the same agent while its database is down), sharing one spool."""
    root = tmp_path_factory.mktemp("hostile-text")
    up = make_engine(f"sqlite:///{root / 'up.db'}")
    migrate(up)
    (root / "down.db").mkdir()
    down = make_engine(f"sqlite:///{root / 'down.db'}")
    spool = root / "spool"
    yield (
        up,
        Skillflow(agent_id="agent", engine=up, spool_dir=spool),
        Skillflow(agent_id="agent", engine=down, spool_dir=spool),
    )
    up.dispose()
    down.dispose()


@settings(
    deadline=None, suppress_health_check=list(HealthCheck), database=None
)  # examples: the profile (tests/conftest.py)
@given(
    query=TEXT,
    user=TEXT.map(lambda t: re.sub("[\ud800-\udfff\x00-\x1f\x7f]", "", t)),  # refused in an id (test_hostile_callers)
    tool=TEXT.map(lambda t: "t" + "".join(c for c in t if ord(c) >= 32)),
    key=TEXT,
    value=TEXT,
    error=TEXT,
    meta=st.dictionaries(TEXT, TEXT, max_size=3),
    skills=st.lists(TEXT, max_size=3),
    run_prefix=TEXT,
    conversation=TEXT.map(lambda t: "".join(c for c in t if ord(c) >= 32)),
)
def test_any_text_in_every_field_is_stored_or_spooled_and_replayed(
    agents: tuple[Engine, Skillflow, Skillflow],
    query: str,
    user: str,
    tool: str,
    key: str,
    value: str,
    error: str,
    meta: dict[str, str],
    skills: list[str],
    run_prefix: str,
    conversation: str,
) -> None:
    up_engine, up, down = agents
    kwargs: dict[str, Any] = {
        "skills_activated": skills,
        "execution_error": error,
        "metadata": meta,
        "conversation_id": conversation,
    }
    steps = [{"tool": tool, "arguments": {key: value}, "result": value, "error": error}]
    user_id = "u" + user
    for db_up in (True, False):
        run_id = run_prefix + uuid.uuid4().hex[:16]
        result = (up if db_up else down).record_run(query, user_id, steps, run_id=run_id, **kwargs)
        assert result.run_id == _clean(run_id)
        if db_up:
            assert result.stored, result.error
        else:
            assert result.spooled, result.error
            assert up.replay_spool() == 1
        row = _row(up_engine, result.run_id)
        assert row is not None and row["step_count"] == 1 and row["user_id"] == _clean(user_id)
        assert row["query"] == _clean(query)


def _clean(text: str) -> str:
    return re.sub("[\ud800-\udfff\x00]", "\ufffd", text)
