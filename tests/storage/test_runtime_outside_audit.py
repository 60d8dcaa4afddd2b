"""What an outside reliability audit (2026-12-05) found in the agent runtime, each case failing on the code before.

- A tool name the database refuses (over 255 characters or a NUL on PostgreSQL, a lone surrogate on both, not
  text) raised out of ``register_tools``, and the refused registration stayed on the handle: every later capture
  wrote it first and failed, so every run was lost (neither stored nor spooled) and ``replay_spool`` raised.
- A pooled connection the server had closed (a restart, a failover, an idle cut-off) was retried by a capture
  only: the first ``prepare``, ``skill_tool`` or ``register_tools`` after it failed and opened the breaker, so for
  its window every run spooled and every ``prepare`` went without skills while the database answered.
- A ``str`` subclass is stored as its plain text, its own methods never called (docs/guide/runtime.md): one whose
  ``__len__`` or ``replace`` raised got the whole run refused, or a whole ``arguments`` mapping unreadable.
- ``skill_tool`` with a name that is not text raised ``TypeError`` (documented: only ``ValueError``), and the audit
  API ``retrieve_workflows_by_query`` an ``AttributeError`` on a query that is not text.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import agent_tools, workflow_memory
from tests.conftest import POSTGRES_DSN

STEPS = [{"tool": "get_order", "arguments": {"id": 1}, "result": "ok"}]
CONVERSATION = [
    {"role": "user", "content": "cancel it"},
    {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "cancel_order", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
]


def _runs(engine: Engine, agent: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(workflow_memory.c.agent_id == agent)).scalar_one())


@pytest.mark.parametrize(
    "name",
    ["lookup_" + "x" * 300, "cancel\x00order", 7, b"get_order", None, "", "  ", "get\norder"],
    ids=["over-255", "nul", "int", "bytes", "none", "empty", "blank", "newline"],
)
def test_a_tool_name_capture_refuses_is_a_value_error_and_later_runs_are_stored(
    db_url: str, engine: Engine, tmp_path: Path, name: Any
) -> None:
    sf = Skillflow(agent_id="audit-1", database_url=db_url, spool_dir=tmp_path / "spool")
    with pytest.raises(ValueError, match=r"names\[1\]"):
        sf.register_tools(["get_order", name])
    results = [sf.record_run(f"where is order {i}", "alice", STEPS) for i in range(3)]
    results += sf.record_conversation(CONVERSATION, "alice", conversation_id="c-1")
    assert [(r.stored, r.error) for r in results] == [(True, None)] * 4
    assert sf.replay_spool() == 0
    assert _runs(engine, "audit-1") == 4
    with engine.connect() as conn:  # nothing of the refused registration was written
        assert conn.execute(select(agent_tools).where(agent_tools.c.agent_id == "audit-1")).first() is None
    assert sf.register_tools(["get_order", "cancel_order"]) is True  # a good registration afterwards lands


def test_a_tool_name_with_a_lone_surrogate_is_registered_as_capture_stores_it(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    """Capture stores a step's tool with a lone surrogate as U+FFFD; the registration reads the name alike (before:
    ``UnicodeEncodeError`` on both backends, and every later run lost)."""
    sf = Skillflow(agent_id="audit-1s", database_url=db_url, spool_dir=tmp_path / "spool")
    assert sf.register_tools(["get_order", "cancel\ud800"], state_changing={"cancel\ud800": True}) is True
    result = sf.record_run("cancel it", "alice", [{"tool": "cancel\ud800", "arguments": {}}])
    assert result.stored, result.error
    with engine.connect() as conn:
        names = conn.execute(
            select(agent_tools.c.tool_name, agent_tools.c.changes_state).where(agent_tools.c.agent_id == "audit-1s")
        ).all()
        steps = conn.execute(select(workflow_memory.c.steps).where(workflow_memory.c.id == result.run_id)).scalar()
    assert sorted(tuple(r) for r in names) == [("cancel\ufffd", 1), ("get_order", None)]
    assert (json.loads(steps) if isinstance(steps, str) else steps)[0]["tool"] == "cancel\ufffd"


def test_a_registration_the_database_refuses_is_dropped_not_kept_for_every_capture(
    db_url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever slips past the names' check and is refused by the database (not an outage) is dropped with an
    error logged: it is not written first by every later capture."""
    import skillflow.storage.skills as skills

    sf = Skillflow(agent_id="audit-1b", database_url=db_url, spool_dir=tmp_path / "spool")

    def refused(*_: Any, **__: Any) -> None:
        raise ValueError("the database refused a value")

    monkeypatch.setattr(skills, "replace_tools", refused)
    assert sf.register_tools(["get_order", "cancel_order"]) is False
    monkeypatch.undo()
    results = [sf.record_run(f"where is order {i}", "alice", STEPS) for i in range(3)]
    assert [(r.stored, r.error) for r in results] == [(True, None)] * 3
    assert sf.replay_spool() == 0


def _close_pooled_sessions(dsn: str, engine: Engine) -> int:
    """Have the server end the sessions ``engine``'s pool holds (as a restart, a failover or an idle cut-off does)."""
    with engine.connect() as conn:  # the pooled connection itself: its server process id
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    admin = make_engine(dsn)
    with admin.connect() as conn:
        closed = conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    admin.dispose()
    return int(bool(closed))


@pytest.mark.postgres
@pytest.mark.parametrize("call", ["prepare", "skill_tool", "register_tools", "declared_tools"])
def test_a_connection_the_server_closed_is_retried_by_every_runtime_call(
    pg_schema_url: str, tmp_path: Path, call: str
) -> None:
    from skillflow.storage.migrations import migrate

    assert POSTGRES_DSN
    url = pg_schema_url
    setup = make_engine(pg_schema_url)
    migrate(setup)
    sf = Skillflow(agent_id="audit-4", database_url=url, spool_dir=tmp_path / "spool", continual_learning=True)
    assert sf.register_tools(["get_order", "cancel_order"], state_changing={"cancel_order": True})
    assert sf.record_run("warm up", "alice", STEPS).stored  # the pool now holds an idle connection
    assert sf.engine is not None
    assert _close_pooled_sessions(POSTGRES_DSN, sf.engine) == 1
    time.sleep(0.2)
    if call == "prepare":
        assert sf.prepare("cancel my order", "alice").error is None
    elif call == "skill_tool":
        answer = sf.skill_tool("list_skills", {}, "alice")
        assert "error" not in answer, answer
    elif call == "register_tools":
        assert sf.register_tools(["get_order", "cancel_order", "refund"]) is True
    else:  # the declared flags read before a conversation's skills
        from skillflow.injection.conversation import Conversation

        prepared = sf.prepare("cancel it", "alice", conversation=Conversation.from_messages(CONVERSATION))
        assert prepared.error is None
    results = [sf.record_run(f"run {i}", "alice", STEPS) for i in range(3)]
    assert [(r.stored, r.spooled, r.error) for r in results] == [(True, False, None)] * 3
    assert _runs(setup, "audit-4") == 4
    sf.engine.dispose()
    setup.dispose()


class Text(str):
    """A str subclass whose own methods must never be called."""

    def __len__(self) -> int:
        raise RuntimeError("never call me")

    def replace(self, *_: Any) -> str:  # type: ignore[override]
        raise RuntimeError("never call me")

    def strip(self, *_: Any) -> str:  # type: ignore[override]
        raise RuntimeError("never call me")


@pytest.mark.parametrize("where", ["query", "result", "error", "execution_error", "metadata", "argument", "tool"])
def test_a_str_subclass_is_stored_as_its_plain_text(engine: Engine, db_url: str, tmp_path: Path, where: str) -> None:
    sf = Skillflow(agent_id="audit-6", database_url=db_url, spool_dir=tmp_path / "spool")
    value = Text("fine text")
    step: dict[str, Any] = {"tool": "get_order", "arguments": {"id": 1}, "result": "ok"}
    kwargs: dict[str, Any] = {}
    query: Any = "where is my order"
    if where == "query":
        query = value
    elif where in ("result", "error"):
        step[where] = value
    elif where == "execution_error":
        kwargs["execution_error"] = value
    elif where == "metadata":
        kwargs["metadata"] = {"k": value}
    elif where == "argument":
        step["arguments"] = {"id": 1, "note": value}
    else:
        step["tool"] = Text("get_order")
    result = sf.record_run(query, "alice", [step], **kwargs)
    assert result.stored, result.error
    with engine.connect() as conn:
        row = conn.execute(select(workflow_memory).where(workflow_memory.c.id == result.run_id)).mappings().one()
    stored = json.dumps(dict(row), default=str)
    assert "unreadable" not in stored and "unprintable" not in stored, stored
    assert ("fine text" in stored) == (where not in ("tool", "execution_error")), stored  # the error is not stored


@pytest.mark.parametrize("name", [{"name": "read_skill"}, ["read_skill"], None, 3])
def test_skill_tool_with_a_name_that_is_not_text_is_a_value_error(
    db_url: str, engine: Engine, tmp_path: Path, name: Any
) -> None:
    sf = Skillflow(agent_id="audit-7", database_url=db_url, spool_dir=tmp_path / "spool")
    with pytest.raises(ValueError, match="skill tool"):
        sf.skill_tool(name, {}, "alice")


@pytest.mark.parametrize("query", [None, b"where is my order", 42])
def test_the_audit_api_names_a_query_that_is_not_text(db_url: str, engine: Engine, tmp_path: Path, query: Any) -> None:
    sf = Skillflow(agent_id="audit-7", database_url=db_url, spool_dir=tmp_path / "spool")
    sf.record_run("where is my order", "alice", STEPS)
    with pytest.raises(TypeError, match="query must be a string"):
        sf.retrieve_workflows_by_query(query, "alice")


def test_a_step_in_the_anthropic_tool_use_shape_keeps_its_arguments_and_result(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    """Found by an outside audit: a step written ``{"name", "input", "output"}`` (``name``/``input`` are an Anthropic
    ``tool_use`` block's fields) was stored as a success with its arguments and result dropped without a word, so
    it landed in another class than the same call written ``{"tool", "arguments", "result"}``."""
    sf = Skillflow(agent_id="audit-8", database_url=db_url, spool_dir=tmp_path / "spool")
    plain = sf.record_run("refund order 7", "alice", [{"tool": "issue_refund", "arguments": {"order_id": 7},
                                                       "result": {"ok": True}}])  # fmt: skip
    aliased = sf.record_run("refund order 7", "alice", [{"name": "issue_refund", "input": {"order_id": 7},
                                                         "output": {"ok": True}}])  # fmt: skip
    assert plain.stored and aliased.stored
    assert aliased.canonical_hash == plain.canonical_hash
    with engine.connect() as conn:
        steps = conn.execute(select(workflow_memory.c.steps).where(workflow_memory.c.id == aliased.run_id)).scalar()
    step = (json.loads(steps) if isinstance(steps, str) else steps)[0]
    assert (step["arguments"], step["result"]) == ({"order_id": 7}, {"ok": True})
