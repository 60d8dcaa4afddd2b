"""``record_conversation``: one run per procedure, deterministic ids, idempotent, never raises into the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from skillflow.capture import segments
from skillflow.capture.segments import segment_conversation, segment_run_id
from skillflow.injection.conversation import Conversation
from skillflow.injection.history import HistoryRun, requests
from skillflow.kernel.messages import message_line
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import agent_tools, workflow_memory
from skillflow.storage.skills import declared_state_changes

_n = iter(range(100_000))


def call(tool: str, result: str = "ok", **arguments: Any) -> list[dict[str, Any]]:
    cid = f"c{next(_n)}"
    fn = {"name": tool, "arguments": json.dumps(arguments)}
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": cid, "content": result},
    ]


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "cancel my reservation please"},
    *call("get_reservation_details", '{"id": "R1"}', reservation_id="R1"),
    {"role": "assistant", "content": "It can be cancelled. Proceed?"},
    {"role": "user", "content": "yes, please proceed"},
    *call("cancel_reservation", '{"ok": true}', reservation_id="R1"),
    {"role": "user", "content": "and what is my balance?"},
    *call("get_user_details", '{"balance": 5}', user_id="u"),
]


def _rows(engine: Engine) -> list[dict[str, Any]]:
    cols = workflow_memory.c
    q = select(
        cols.id, cols.agent_id, cols.user_id, cols.query, cols.conversation_id, cols.segment_index, cols.tool_sequence
    ).order_by(cols.segment_index)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def test_one_run_per_segment_with_ids_and_idempotent_rerecord(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine)
    results = sf.record_conversation(CONVERSATION, "alice", conversation_id="conv-1")
    assert [r.stored for r in results] == [True, True] and all(r.error is None for r in results)
    ids = [segment_run_id("airline", "alice", "conv-1", i) for i in range(2)]
    assert [r.run_id for r in results] == ids
    rows = _rows(engine)
    assert [(r["id"], r["conversation_id"], r["segment_index"]) for r in rows] == [
        (ids[0], "conv-1", 0),
        (ids[1], "conv-1", 1),
    ]
    assert rows[0]["query"] == "cancel my reservation please\nyes, please proceed"
    assert rows[0]["tool_sequence"] == "get_reservation_details > cancel_reservation"
    assert (rows[1]["query"], rows[1]["tool_sequence"]) == ("and what is my balance?", "get_user_details")
    again = sf.record_conversation(CONVERSATION, "alice", conversation_id="conv-1")
    assert [(r.run_id, r.stored, r.canonical_hash) for r in again] == [
        (r.run_id, True, r.canonical_hash) for r in results
    ]
    assert len(_rows(engine)) == 2
    # Another tenant and another conversation get their own rows; the tenant's own runs are scoped by user.
    sf.record_conversation(CONVERSATION, "bob", conversation_id="conv-1")
    sf.record_conversation(CONVERSATION[:6], "alice", conversation_id="conv-2")
    rows = _rows(engine)
    assert len(rows) == 5 and {(r["user_id"], r["conversation_id"]) for r in rows} == {
        ("alice", "conv-1"),
        ("bob", "conv-1"),
        ("alice", "conv-2"),
    }


def test_a_stored_query_holds_one_message_a_line_whatever_the_message(engine: Engine) -> None:
    """A message of several lines, or of OpenAI text parts, is one line of the stored query, so the fit reads
    the request's messages as ``prepare`` does (docs/guide/runtime.md, "Conversations")."""
    parts = [{"type": "text", "text": "yes,"}, {"type": "text", "text": "please\nproceed"}]
    messages = [
        {"role": "user", "content": "Hi, I need help.\nPlease cancel my reservation"},
        *call("get_reservation_details", '{"id": "R1"}', reservation_id="R1"),
        {"role": "user", "content": parts},
        {"role": "user", "content": " \n "},  # a blank message is no message, here as live
        *call("cancel_reservation", '{"ok": true}', reservation_id="R1"),
    ]
    sf = Skillflow(agent_id="airline", engine=engine)
    assert [r.stored for r in sf.record_conversation(messages, "alice", conversation_id="c")] == [True]
    (row,) = _rows(engine)
    assert row["query"] == "Hi, I need help. Please cancel my reservation\nyes, please proceed"
    stored = HistoryRun(row["id"], row["query"], row["tool_sequence"], "h", row["conversation_id"], 0)
    live = Conversation.from_messages(messages).user_messages
    assert [message_line(m) for m in live] == list(requests([stored])[0])


def test_a_growing_conversation_recorded_each_turn_converges(engine: Engine) -> None:
    """Recorded with ``complete=False`` after every message, then once complete: the rows of a single record."""
    sf = Skillflow(agent_id="airline", engine=engine)
    for end in range(1, len(CONVERSATION) + 1):
        for r in sf.record_conversation(CONVERSATION[:end], "alice", conversation_id="c", complete=False):
            assert r.stored, r.error
    assert [r["segment_index"] for r in _rows(engine)] == [0]
    sf.record_conversation(CONVERSATION, "alice", conversation_id="c")
    rows = _rows(engine)
    assert [(r["segment_index"], r["tool_sequence"]) for r in rows] == [
        (0, "get_reservation_details > cancel_reservation"),
        (1, "get_user_details"),
    ]


def test_a_conversation_over_the_limit_stores_the_procedures_within_it_and_names_the_rest(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a conversation over ``MAX_MESSAGES`` (5 000) was refused whole (``a conversation holds at most 5000
    messages``): a long support chat lost every procedure. Now the procedures closed within the limit are stored
    and one more result names what was not read; recorded again (the limit raised), the rows converge."""
    messages: list[dict[str, Any]] = []
    for i in range(12):  # 12 turns of 4 messages: one procedure each
        messages += [{"role": "user", "content": f"cancel order {i}"}, *call("cancel_order", '{"ok": true}', n=i)]
        messages.append({"role": "assistant", "content": "done"})
    monkeypatch.setattr(segments, "MAX_MESSAGES", 40)
    sf = Skillflow(agent_id="airline", engine=engine)
    *stored, refused = sf.record_conversation(messages, "alice", conversation_id="long")
    assert [(r.run_id, r.stored) for r in stored] == [
        (segment_run_id("airline", "alice", "long", i), True) for i in range(10)
    ]
    assert (refused.stored, refused.spooled, refused.run_id) == (False, False, "")
    assert refused.error == (
        "a conversation is read up to its first 40 messages: the procedures not closed within them were not stored"
    )
    assert [r["segment_index"] for r in _rows(engine)] == list(range(10))
    with pytest.raises(ValueError, match="read up to its first 40 messages"):
        sf.record_conversation(messages, "alice", conversation_id="strict", strict=True)
    assert _rows(engine)[-1]["conversation_id"] == "strict"  # strict raises after storing what it read
    monkeypatch.setattr(segments, "MAX_MESSAGES", 5000)
    again = sf.record_conversation(messages, "alice", conversation_id="long")
    assert [r.already_stored for r in again] == [True] * 10 + [False] * 2 and all(r.stored for r in again)


def test_declared_tools_drive_segmentation_and_are_stored(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine)
    names = ["get_reservation_details", "cancel_reservation", "get_user_details"]
    with pytest.raises(ValueError, match="not registered"):
        sf.register_tools(names, state_changing={"no_such_tool": True})
    sf.register_tools(names, state_changing={"cancel_reservation": False, "get_user_details": True})
    with engine.connect() as conn:
        assert declared_state_changes(conn, "airline") == {"cancel_reservation": False, "get_user_details": True}
        flags = dict(conn.execute(select(agent_tools.c.tool_name, agent_tools.c.changes_state)).all())
    assert flags == {"get_reservation_details": None, "cancel_reservation": 0, "get_user_details": 1}
    [only] = sf.record_conversation(CONVERSATION, "alice", conversation_id="declared")
    assert only.stored
    [row] = _rows(engine)
    assert row["tool_sequence"] == "get_reservation_details > cancel_reservation > get_user_details"


def test_record_run_carries_a_conversation_id(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine)
    assert sf.record_run("hi", "alice", [{"tool": "get_x"}], conversation_id="c9").stored
    bad = sf.record_run("hi", "alice", [{"tool": "get_x"}], conversation_id="x" * 300)
    assert not bad.stored and bad.error is not None and "conversation_id" in bad.error
    [row] = _rows(engine)
    assert (row["conversation_id"], row["segment_index"]) == ("c9", None)


@pytest.mark.parametrize(
    ("messages", "conversation_id", "needle"),
    [
        ([{"role": "user", "content": "x"}, 7], "c", "messages[1] must be a mapping"),
        ("not a list", "c", "messages must be a list"),
        (CONVERSATION, "", "conversation_id must be"),
        (CONVERSATION, 12, "conversation_id must be"),
    ],
)
def test_unreadable_input_is_one_clear_error_and_strict_raises(
    sqlite_engine: Engine, messages: Any, conversation_id: Any, needle: str
) -> None:
    sf = Skillflow(agent_id="airline", engine=sqlite_engine)
    [result] = sf.record_conversation(messages, "alice", conversation_id=conversation_id)
    assert not result.stored and result.error is not None and needle in result.error
    with pytest.raises(ValueError):
        sf.record_conversation(messages, "alice", conversation_id=conversation_id, strict=True)
    assert _rows(sqlite_engine) == []


class Hostile:
    def __getitem__(self, key: Any) -> Any:
        raise RuntimeError("boom")

    def get(self, key: Any, default: Any = None) -> Any:
        raise RuntimeError("boom")


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
call_shapes = st.fixed_dictionaries(
    {"id": st.one_of(st.none(), st.text(max_size=4)), "function": st.one_of(values, st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["get_a", "book_b", "think", " "]), values), "arguments": values}
    ))}
)  # fmt: skip
anthropic_blocks = st.one_of(
    st.builds(
        lambda i, n, x: {"type": "tool_use", "id": i, "name": n, "input": x},
        st.sampled_from(["t1", "t2"]) | values, st.sampled_from(["get_a", "book_b"]) | values, values,
    ),
    st.builds(
        lambda i, c, e: {"type": "tool_result", "tool_use_id": i, "content": c, "is_error": e},
        st.sampled_from(["t1", "t2"]) | values, values, values,
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["text", "server_tool_use", "image"]) | values, "text": values}),
    values,
)  # fmt: skip
messages_st = st.lists(
    st.one_of(
        values,
        st.just(Hostile()),
        st.builds(lambda t, c: call(t, c), st.sampled_from(["get_a", "book_b", "think"]), st.text(max_size=6)).map(
            lambda pair: pair[0]
        ),
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "system", "other"]), "content": values},
            optional={"tool_calls": st.one_of(values, st.lists(call_shapes, max_size=3)), "tool_call_id": values},
        ),
        st.fixed_dictionaries(  # Anthropic content blocks, well-formed or not
            {"role": st.sampled_from(["user", "assistant"]), "content": st.lists(anthropic_blocks, max_size=3)}
        ),
    ),
    max_size=12,
)


@pytest.fixture(scope="module")
def hypothesis_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    eng = make_engine(f"sqlite:///{tmp_path_factory.mktemp('conv') / 'h.db'}")
    migrate(eng)
    return eng


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.one_of(messages_st, values), user=st.one_of(st.text(max_size=5), values), cid=values)
def test_record_conversation_never_raises(hypothesis_engine: Engine, messages: Any, user: Any, cid: Any) -> None:
    sf = Skillflow(agent_id="fuzz", engine=hypothesis_engine, spool_dir=Path("/nonexistent/never"))
    cid = cid if not isinstance(cid, str) else f"h-{cid}"
    results = sf.record_conversation(messages, user, conversation_id=cid)
    assert isinstance(results, list)
    if not results:  # only a readable conversation without a tool call has no segment
        assert segment_conversation(messages) == []
    for r in results:
        assert r.stored or r.error  # stored, or refused with a reason: never silently dropped
    stored = [r.run_id for r in results if r.stored]
    if stored:
        with hypothesis_engine.connect() as conn:
            found = conn.execute(select(func.count()).where(workflow_memory.c.id.in_(stored))).scalar()
        assert found == len(set(stored))
