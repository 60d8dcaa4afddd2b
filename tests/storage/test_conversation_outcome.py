"""A conversation's business outcome is the outcome of each of its procedures (docs/guide/runtime.md).

A failed conversation never stores a procedure as a success, whether the caller gives the outcome or the
tenant's evaluator judges the whole conversation; an evaluator that raises gives ``unknown``, never success.
"""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.capture.outcome import Workflow
from skillflow.kernel.models import WorkflowOutcome
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory


def call(cid: str, tool: str, result: str, **arguments: Any) -> list[dict[str, Any]]:
    fn = {"name": tool, "arguments": json.dumps(arguments)}
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": cid, "content": result},
    ]


# Two procedures that both execute fine, then a third whose write fails for good.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "cancel my reservation R1 please"},
    *call("c1", "get_reservation_details", '{"id": "R1"}', reservation_id="R1"),
    {"role": "user", "content": "yes, proceed"},
    *call("c2", "cancel_reservation", '{"status": "cancelled"}', reservation_id="R1"),
    {"role": "user", "content": "now book the 9am flight instead"},
    *call("c3", "search_flights", '[{"flight": "F9"}]', origin="JFK"),
    *call("c4", "book_reservation", '{"status": "booked"}', flight="F9"),
    {"role": "user", "content": "and upgrade it"},
    *call("c5", "update_reservation", "Error: cabin not available", reservation_id="R2"),
]


def _rows(engine: Engine) -> list[dict[str, Any]]:
    c = workflow_memory.c
    q = select(c.segment_index, c.outcome, c.execution_outcome, c.outcome_source, c.learning_error)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q.order_by(c.segment_index)).mappings()]


def _outcomes(engine: Engine) -> list[tuple[str, str, str]]:
    return [(r["outcome"], r["execution_outcome"], r["outcome_source"]) for r in _rows(engine)]


@pytest.mark.parametrize("failure", [False, "failure", WorkflowOutcome.FAILURE])
def test_a_failed_conversation_fails_every_procedure(engine: Engine, failure: Any) -> None:
    sf = Skillflow(agent_id="airline", engine=engine, workflow_outcome_evaluator=lambda w: True)
    results = sf.record_conversation(CONVERSATION, "alice", conversation_id="c", outcome=failure)
    assert [r.outcome for r in results] == ["failure"] * 3
    assert _outcomes(engine) == [
        ("failure", "success", "given"),  # executed fine, yet the conversation failed
        ("failure", "success", "given"),
        ("failure", "failure", "execution"),
    ]


def test_a_successful_conversation_never_upgrades_a_failed_execution(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine)
    sf.record_conversation(CONVERSATION, "alice", conversation_id="c", outcome=True)
    assert _outcomes(engine) == [
        ("success", "success", "given"),
        ("success", "success", "given"),
        ("failure", "failure", "execution"),
    ]


def test_the_evaluator_judges_the_whole_conversation(engine: Engine) -> None:
    seen: list[Workflow] = []

    def evaluator(workflow: Workflow) -> bool:
        seen.append(workflow)
        return not any(step["error"] for step in workflow.steps.values())  # the upgrade failed: the task did

    sf = Skillflow(agent_id="airline", engine=engine, workflow_outcome_evaluator=evaluator)
    sf.record_conversation(CONVERSATION, "alice", conversation_id="c", metadata={"ticket": 7})
    assert _outcomes(engine) == [
        ("failure", "success", "evaluator"),
        ("failure", "success", "evaluator"),
        ("failure", "failure", "execution"),
    ]
    [whole] = seen  # one verdict over every call and every user message, not one per procedure
    assert [key.split(": ", 1)[1] for key in whole.steps] == [
        "get_reservation_details", "cancel_reservation", "search_flights", "book_reservation", "update_reservation",
    ]  # fmt: skip
    assert whole.query.split("\n") == [m["content"] for m in CONVERSATION if m["role"] == "user"]
    assert (whole.id, whole.outcome, whole.metadata) == ("c", WorkflowOutcome.FAILURE, {"ticket": 7})


def test_an_evaluator_that_raises_gives_unknown_never_success(engine: Engine) -> None:
    def broken(workflow: Workflow) -> bool:
        raise RuntimeError("the order service is down")

    sf = Skillflow(agent_id="airline", engine=engine, workflow_outcome_evaluator=broken)
    sf.record_conversation(CONVERSATION, "alice", conversation_id="c")
    rows = _rows(engine)
    assert [(r["outcome"], r["outcome_source"]) for r in rows] == [
        ("unknown", "learning_failure"),
        ("unknown", "learning_failure"),
        ("failure", "execution"),
    ]
    assert rows[0]["learning_error"] == "evaluator failed: RuntimeError"  # the class, never the message


def test_an_incomplete_conversation_waits_for_its_outcome(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine, workflow_outcome_evaluator=lambda w: False)
    assert sf.record_conversation(CONVERSATION[:8], "alice", conversation_id="c", complete=False) == []
    assert _rows(engine) == []  # nothing is stored with an outcome the rest of the conversation may change
    sf.record_conversation(CONVERSATION, "alice", conversation_id="c")
    assert [r[0] for r in _outcomes(engine)] == ["failure"] * 3


def test_an_unreadable_outcome_is_refused_naming_the_parameter(engine: Engine) -> None:
    sf = Skillflow(agent_id="airline", engine=engine)
    [result] = sf.record_conversation(CONVERSATION, "alice", conversation_id="c", outcome="maybe")
    assert not result.stored and result.error is not None and "outcome" in result.error
    assert "maybe" not in result.error and _rows(engine) == []
    with pytest.raises(ValueError, match="outcome"):
        sf.record_conversation(CONVERSATION, "alice", conversation_id="c", outcome=0.5, strict=True)


def test_a_spooled_conversation_replays_with_its_outcome(tmp_path: Path) -> None:
    down = tmp_path / "down.db"
    down.mkdir()  # a directory where the database file belongs: every write fails, every run spools
    spool = tmp_path / "spool"
    evaluator = lambda w: True  # noqa: E731 - the replay must not ask it about single procedures
    agent = Skillflow(agent_id="airline", engine=make_engine(f"sqlite:///{down}"), spool_dir=spool)
    agent.workflow_outcome_evaluator = evaluator
    spooled = agent.record_conversation(CONVERSATION, "alice", conversation_id="c", outcome=False)
    assert [r.spooled for r in spooled] == [True] * 3
    back = make_engine(f"sqlite:///{tmp_path / 'back.db'}")
    migrate(back)
    later = Skillflow(agent_id="airline", engine=back, spool_dir=spool, workflow_outcome_evaluator=evaluator)
    assert later.replay_spool() == 3
    assert [r[0] for r in _outcomes(back)] == ["failure"] * 3


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        (None, None),
        ({"outcome": "failure", "source": "given", "learning_error": None}, WorkflowOutcome.FAILURE),
        ({"outcome": "success", "source": "../../etc"}, WorkflowOutcome.UNKNOWN),  # tampered: never a success
        ({"outcome": "great", "source": "given"}, WorkflowOutcome.UNKNOWN),
        (["success"], WorkflowOutcome.UNKNOWN),
    ],
)
def test_a_spooled_outcome_reads_back_or_becomes_unknown(doc: Any, want: WorkflowOutcome | None) -> None:
    from skillflow.capture.outcome import ConversationOutcome

    got = ConversationOutcome.from_dict(doc)
    assert (got.outcome if got is not None else None) == want


def test_an_evaluator_that_returns_an_awaitable_gives_unknown_with_the_reason(engine: Engine) -> None:
    """Run once over the conversation, an evaluator that returns a coroutine is closed, never awaited (no
    RuntimeWarning), and every procedure that executed is ``unknown`` with the reason on its result."""

    async def judged(workflow: Workflow) -> bool:
        return True

    sf = Skillflow(agent_id="airline", engine=engine)
    sf.workflow_outcome_evaluator = judged  # set after construction, which refuses an async def evaluator
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = sf.record_conversation(CONVERSATION, "alice", conversation_id="c")
        gc.collect()
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []
    reason = "evaluator failed: it returned an awaitable (workflow_outcome_evaluator must be a sync function)"
    assert [(r.outcome, r.learning_error) for r in results] == [("unknown", reason)] * 2 + [("failure", None)]
    assert [(r["outcome"], r["learning_error"]) for r in _rows(engine)] == [("unknown", reason)] * 2 + [
        ("failure", None)
    ]
