"""What an adversarial audit of the runtime found, one regression test each (each failed on the code before it).

The promises (docs/guide/runtime.md): capture and ``prepare`` never raise into the agent, for any value of
any parameter; an error names a field or a position, never a value; every read and write is scoped by
exactly ``(agent_id, user_id)``; recording a conversation again converges on its run ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select

from skillflow.capture.segments import segment_run_id
from skillflow.injection import conversation as live
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory

SECRET = "card 4111 1111 1111 1111 of alice@example.com"


def call(cid: str, tool: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "function": {"name": tool}}]}


CANCEL = [{"role": "user", "content": "cancel"}, call("c1", "cancel_order"), {"role": "tool", "tool_call_id": "c1"}]


class NoFormat(str):
    def __format__(self, spec: str) -> str:
        raise RuntimeError("no format")


class NoEq(str):
    def __eq__(self, other: object) -> bool:
        raise TypeError("no eq")

    __hash__ = str.__hash__


class NoEncode(str):
    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # type: ignore[override]
        raise RuntimeError("no encode")


class Secretive:
    """An object whose conversions raise with a value in the message."""

    def __str__(self) -> str:
        raise ValueError(SECRET)

    __repr__ = __str__


def _runs(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(workflow_memory)).scalar_one())


@pytest.fixture
def sf(engine: Engine, tmp_path: Path) -> Skillflow:
    return Skillflow(agent_id="a", engine=engine, spool_dir=tmp_path / "spool")


def test_a_flag_of_any_type_is_never_asked_for_its_truth(sf: Skillflow) -> None:
    (refused,) = sf.record_conversation(CANCEL, "u", conversation_id="c", complete=np.array([1, 2]))  # type: ignore[arg-type]
    assert not refused.stored and refused.error == "complete must be True or False"
    assert sf.record_run("q", "u", [{"tool": "t"}], strict=np.array([1, 2])).stored  # type: ignore[arg-type]
    assert [r.stored for r in sf.record_conversation(CANCEL, "u", conversation_id="c", strict=np.array([1]))] == [True]  # type: ignore[arg-type]
    assert [r.stored for r in sf.record_conversation(CANCEL, "u", conversation_id="d", complete=np.True_)] == [True]  # type: ignore[arg-type]


def test_a_str_subclass_is_read_as_its_text(engine: Engine, sf: Skillflow) -> None:
    results = sf.record_conversation(CANCEL, NoFormat("u"), conversation_id=NoEq("c"))
    assert [r.stored for r in results] == [True], [r.error for r in results]
    assert results[0].run_id == segment_run_id("a", "u", "c", 0)
    for kwargs in ({"provider": NoEq("openai")}, {"system_prompt": NoEncode("s")}):
        prepared = sf.prepare("refund my order", "u", **kwargs)
        assert prepared.request["messages"]
    assert sf.prepare(NoEncode("refund my order"), NoEncode("u")).request["messages"][-1]["content"]


def test_an_error_quotes_only_the_project_s_own_refusals(sf: Skillflow) -> None:
    document = sf.record_run("q", "u", {"Step 1: lookup": {"arguments": {}, "error": Secretive()}})
    messages = [{"role": "user", "content": Secretive()}, *CANCEL[1:]]
    conversation = sf.record_conversation(messages, "u", conversation_id="c")
    outcome = sf.record_conversation(CANCEL, "u", conversation_id="d", outcome=NoEq("success"))
    errors = [document.error, *(r.error for r in conversation), *(r.error for r in outcome)]
    assert "4111" not in json.dumps(errors) and "alice" not in json.dumps(errors)
    assert outcome[0].error == "outcome must be a bool, 'success', 'failure' or a WorkflowOutcome"


@pytest.mark.parametrize("bad", ["bob\x00", "bob\ud800", "bob\udfff"])
def test_an_id_that_could_only_be_coerced_is_refused_so_no_two_tenants_become_one(
    engine: Engine, tmp_path: Path, sf: Skillflow, bad: str
) -> None:
    assert sf.record_run("refund", "bob\ufffd", [{"tool": "refund"}]).stored  # the user whose name it would take
    run = sf.record_run("refund", bad, [{"tool": "refund"}])
    (conversation,) = sf.record_conversation(CANCEL, bad, conversation_id="c")
    other = Skillflow(agent_id="a" + bad, engine=engine, spool_dir=tmp_path / "spool")
    (agent,) = other.record_conversation(CANCEL, "u", conversation_id="c")
    assert run.error == conversation.error == "user_id must not contain NUL or lone surrogate characters"
    assert agent.error == "agent_id must not contain NUL or lone surrogate characters"
    assert not other.record_run("q", "u", [{"tool": "t"}]).spooled  # refused, never spooled for a replay
    assert _runs(engine) == 1
    prepared = sf.prepare("refund my order", bad)
    assert prepared.skill_ids == () and "user_id must not contain" in (prepared.error or "")


def test_a_conversation_s_run_ids_are_its_own(engine: Engine, sf: Skillflow) -> None:
    squatter = sf.record_run("x", "mallory", [{"tool": "t"}], run_id=segment_run_id("a", "alice", "chat-1", 0))
    assert not squatter.stored and "reserved for record_conversation" in (squatter.error or "")
    assert [r.stored for r in sf.record_conversation(CANCEL, "alice", conversation_id="chat-1")] == [True]


def test_values_the_docs_coerce_are_coerced_not_refused(engine: Engine, sf: Skillflow) -> None:
    assert sf.record_run("q", "u", [{"tool": "lookup", "error": np.array([1.0, 2.0])}]).stored
    assert sf.record_run("q", "u", [{"tool": "lookup"}], execution_error=np.array([1, 2])).stored  # type: ignore[arg-type]
    assert sf.record_run("q", "u", [{"tool": "lookup", "error": NoEq("boom")}]).stored
    messages = [
        *CANCEL,
        {"role": "user", "content": "now refund B"},
        call("c2", "refund_order"),
        {"role": "tool", "tool_call_id": "c2", "content": Secretive()},
    ]
    results = sf.record_conversation(messages, "u", conversation_id="c")
    assert [r.stored for r in results] == [True, True], [r.error for r in results]


def test_a_view_redacts_a_bounded_prefix_of_each_message() -> None:
    """Every model call redacts what the view reads; a message of any length costs at most MAX_VIEW_CHARS."""
    seen: list[int] = []

    def form(text: str) -> str:
        seen.append(len(text))
        return text

    bound = getattr(live, "MAX_VIEW_CHARS", 20_000)
    huge = "1-2-3-4-" * 10_000
    assert len(live.view_text((huge, "a" * 50_000, huge), "recent", form)) <= 3 * (bound + 3)
    assert seen and max(seen) <= bound <= 2_000
    conv = live.Conversation((huge,))
    assert len(live.view_text(conv.with_request(""), "last", form)) <= bound


@pytest.mark.parametrize("bad", ["ag\x1fu", "a\nb", "a\x7f"])
def test_a_tenant_id_with_a_control_character_is_refused(engine: Engine, tmp_path: Path, bad: str) -> None:
    """A live key joins a tenant's ids with ``\\x1f``: ("ag\\x1fu", "v") and ("ag", "u\\x1fv") were one tenant's
    keys, so one's rollback demoted the other's skill and one's cycle returned the other's report."""
    sf = Skillflow(agent_id="ag", engine=engine, spool_dir=tmp_path / "spool")
    other = Skillflow(agent_id=bad, engine=engine, spool_dir=tmp_path / "spool")
    assert sf.record_run("q", bad, [{"tool": "t"}]).error == "user_id must not contain control characters"
    assert other.record_run("q", "v", [{"tool": "t"}]).error == "agent_id must not contain control characters"
    assert "user_id must not contain control characters" in (sf.prepare("refund", bad).error or "")
    assert _runs(engine) == 0


def test_partitions_spelled_alike_hold_their_own_leases(engine: Engine) -> None:
    """("acme:eu", "bob") and ("acme", "eu:bob") are two partitions: one's cycle never holds the other's."""
    from skillflow.promotion.cycle import lease_name
    from skillflow.storage.leases import acquire

    assert acquire(engine, lease_name("acme:eu", "bob"), "cycle-x", 600)
    assert acquire(engine, lease_name("acme", "eu:bob"), "cycle-y", 600)


# A second audit (2026-12-05), one regression test each; each failed on the code before it.


def test_a_spool_folder_given_as_text_keeps_a_run_made_while_the_database_is_down(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    """``spool_dir="…"`` (a str): the run was neither stored nor spooled, and ``replay_spool`` raised."""
    down = tmp_path / "down.db"
    down.mkdir()  # a folder where the database file belongs: SQLite cannot open it
    spool = str(tmp_path / "spool")
    result = Skillflow(agent_id="a", database_url=f"sqlite:///{down}", spool_dir=spool).record_run(  # type: ignore[arg-type]
        "refund", "u", [{"tool": "refund"}]
    )
    assert result.spooled and not result.stored
    assert Skillflow(agent_id="a", engine=sqlite_engine, spool_dir=spool).replay_spool() == 1  # type: ignore[arg-type]
    assert _runs(sqlite_engine) == 1
    with pytest.raises(TypeError, match="spool_dir"):
        Skillflow(agent_id="a", engine=sqlite_engine, spool_dir=3)  # type: ignore[arg-type]


def test_an_sqlite_folder_that_cannot_be_made_is_a_database_that_is_down(tmp_path: Path) -> None:
    """The constructor made the SQLite file's folder and raised when it could not; a database it cannot open is
    otherwise one that is down: runs spool."""
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the database's folder belongs
    sf = Skillflow(agent_id="a", database_url=f"sqlite:///{blocked}/sub/x.db", spool_dir=tmp_path / "spool")
    assert sf.record_run("refund", "u", [{"tool": "refund"}]).spooled


class HostileKey:
    """A key whose hash collides with segment 0's and whose comparison raises."""

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("hostile __eq__")


@pytest.mark.parametrize("bad", [{HostileKey(): ["s1"]}, ("s1",), {"0": ["s1"]}, {True: ["s1"]}, {0: 5}])
def test_skills_activated_of_a_conversation_is_read_by_segment_index_or_refused(sf: Skillflow, bad: Any) -> None:
    """A hostile key raised out of ``record_conversation``; the ids alone (``record_run``'s form) refused the
    conversation as "could not be read: ValueError", naming nothing."""
    (refused,) = sf.record_conversation(CANCEL, "u", conversation_id="c", skills_activated=bad)
    assert not refused.stored and refused.error and "skills_activated" in refused.error


def test_the_same_conversation_recorded_at_once_by_several_threads_is_stored_for_each(engine: Engine) -> None:
    """Concurrent writes of one run id: the loser's insert hit the winner's row (``IntegrityError``) and the
    agent was told the capture failed. Written again it finds the row: ``already_stored``."""
    import threading

    sf = Skillflow(agent_id="a", engine=engine, spool_dir=Path("/nonexistent"))
    results: list[Any] = []
    for n in range(12):
        barrier = threading.Barrier(4)

        def record(cid: str = f"c{n}", barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            results.extend(sf.record_conversation(CANCEL, "u", conversation_id=cid))

        threads = [threading.Thread(target=record) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 48 and all(r.stored for r in results), {r.error for r in results}
    assert sum(not r.already_stored for r in results) == 12 == _runs(engine)


def test_one_tool_name_is_one_tool(engine: Engine, sf: Skillflow) -> None:
    """``register_tools("cancel_booking")`` registered its letters as tools."""
    from skillflow.storage.schema import agent_tools

    sf.register_tools("cancel_booking")
    with engine.connect() as conn:
        assert conn.execute(select(agent_tools.c.tool_name)).scalars().all() == ["cancel_booking"]


@pytest.mark.parametrize("bad", ["ag\x1fu", "u\x1b[8m"])
def test_a_tenant_id_capture_refuses_is_refused_by_import_and_register_tools(
    engine: Engine, tmp_path: Path, bad: str
) -> None:
    """``import_skills`` and ``register_tools`` took ids with control characters, which capture refuses: the
    ``\\x1f`` that joins a live key let ("ag", "u\\x1fv") and ("ag\\x1fu", "v") collide, an escape reached the
    operator's terminal."""
    from skillflow.kernel.errors import InputError
    from skillflow.lifecycle.transfer import import_skills
    from skillflow.storage.schema import agent_tools, skillbox
    from tests.support.promotion import config

    with pytest.raises(ValueError, match="agent_id must not contain control characters"):
        Skillflow(agent_id=bad, engine=engine, spool_dir=tmp_path / "spool").register_tools(["t"])
    for agent, user in ((bad, "v"), ("ag", bad)):
        with pytest.raises(InputError, match="must not contain control characters"):
            import_skills(engine, tmp_path, agent, user, actor="op", config=config())
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(agent_tools)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(skillbox)).scalar_one() == 0


@pytest.mark.parametrize("when", ["2099-01-01T00:00:00+00:00", "9999-12-31T00:00:00+00:00", "in an hour"])
def test_a_created_at_in_the_future_is_refused(engine: Engine, sf: Skillflow, when: str) -> None:
    """A run dated ahead of the clock was stored as given: dated 2099, ten successes of an active skill filled
    drift's window (ordered by ``created_at``) until 2099, so twenty later failures never demoted it, and runs dated
    after a demotion re-qualified its class with no new evidence. A clock a few minutes ahead is still taken."""
    from datetime import timedelta

    from skillflow.kernel.models import utcnow

    created: Any = utcnow() + timedelta(hours=1) if when == "in an hour" else when
    refused = sf.record_run("cancel my reservation", "u", [{"tool": "t"}], created_at=created)
    assert not refused.stored and refused.error == "created_at is more than 5 minutes ahead of this clock"
    (conv,) = sf.record_conversation(CANCEL, "u", conversation_id="c", created_at=created)
    assert not conv.stored and conv.error == refused.error
    assert _runs(engine) == 0
    skewed = sf.record_run("cancel my reservation", "u", [{"tool": "t"}], created_at=utcnow() + timedelta(minutes=4))
    assert skewed.stored
    assert sf.record_run("q", "u", [{"tool": "t"}], created_at="0001-01-02T00:00:00+00:00").stored  # the past: imports
