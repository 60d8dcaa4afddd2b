"""Done means done: once a procedure's write succeeded, its skill is not injected again until a new user
request the fitted rule assigns to that intent (docs/guide/runtime.md, "Which skill, or none")."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from skillflow.injection.conversation import Conversation
from skillflow.injection.selection import DONE
from skillflow.runtime import Skillflow
from tests.storage.test_applicability import U, fit_now, setup

REQUEST = "please cancel my reservation"
_ids = iter(range(1_000_000))


def called(tool: str, reply: str = "{}") -> list[dict[str, Any]]:
    cid = f"t{next(_ids)}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": tool, "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": cid, "content": reply},
    ]


def skills(sf: Skillflow, messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """What ``prepare`` injects before the next model call (the latest user message is the request)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    conv = Conversation.from_messages(messages)
    return sf.prepare(messages[last]["content"], U, conversation=conv, history=messages[:last]).skill_ids


CANCELLED = [
    {"role": "user", "content": REQUEST},
    *called("get_user_details"),
    *called("get_reservation_details"),
    *called("cancel_reservation", '{"status": "cancelled"}'),
]


def test_a_completed_write_is_not_injected_again_until_a_new_request(sqlite_engine: Engine) -> None:
    """On SQLite only: the fit takes most of the time, and the rule's SQL on PostgreSQL is test_applicability's."""
    engine = sqlite_engine
    sf, ids = setup(engine)
    fit_now(engine, sf)
    cancel = {ids["cancel-a"], ids["cancel-b"]}
    assert set(skills(sf, CANCELLED[:1])) <= cancel and skills(sf, CANCELLED[:1])  # before the write: injected
    assert skills(sf, CANCELLED[:5]) == (ids["cancel-a"],)  # the reads of cancel-a's procedure, before the write
    assert sf.prepare(REQUEST, U, conversation=Conversation.from_messages(CANCELLED[:5])).reason == "injected"
    # Right after the successful cancel, with no new user message: the intent is done.
    assert skills(sf, CANCELLED) == ()
    assert sf.select_skills(REQUEST, U, Conversation.from_messages(CANCELLED)).reason == DONE
    assert sf.prepare(REQUEST, U, conversation=Conversation.from_messages(CANCELLED)).reason == DONE  # told the agent
    # A new user message asking for the same thing again: the rule assigns it to cancel from that message.
    again = [*CANCELLED, {"role": "user", "content": "cancel my booking please"}]
    assert set(skills(sf, again)) <= cancel and skills(sf, again)
    # An unrelated new message: the earlier cancel request's text does not re-trigger the skill by itself.
    other = [*CANCELLED, {"role": "user", "content": "what is the baggage allowance"}]
    assert skills(sf, other) == ()
    assert sf.select_skills(other[-1]["content"], U, Conversation.from_messages(other)).reason != DONE


def test_done_before_the_first_fit_too_and_a_failed_write_is_not_done(engine: Engine) -> None:
    sf, ids = setup(engine)  # no fit yet: the fixed threshold over the skills' own vectors
    cancel = {ids["cancel-a"], ids["cancel-b"]}
    assert cancel & set(skills(sf, CANCELLED[:1]))
    assert not cancel & set(skills(sf, CANCELLED))
    assert sf.select_skills(REQUEST, U, Conversation.from_messages(CANCELLED)).reason == DONE
    failed = [*CANCELLED[:5], *called("cancel_reservation", "Error: reservation not found")]
    assert ids["cancel-a"] in skills(sf, failed)  # the agent may still retry: the skill stays
    assert cancel & set(skills(sf, [*CANCELLED, {"role": "user", "content": "cancel my booking please"}]))


def test_the_request_starts_after_the_last_completed_write() -> None:
    """The view the rule embeds: only the messages after the write, so the old request cannot choose alone."""
    from skillflow.kernel.state import changes_state

    conv = Conversation.from_messages(CANCELLED)
    assert conv.request(REQUEST, changes_state) == (REQUEST,)  # no message after the write: the request so far
    assert conv.done("cancel_reservation", REQUEST, changes_state)
    assert not conv.done("book_reservation", REQUEST, changes_state)
    # A new message passed as the query, or already in the messages: the request is that message alone.
    assert conv.request("what is the baggage allowance", changes_state) == ("what is the baggage allowance",)
    assert not conv.done("cancel_reservation", "what is the baggage allowance", changes_state)
    later = Conversation.from_messages([*CANCELLED, {"role": "user", "content": "and one more"}])
    assert later.request("and one more", changes_state) == ("and one more",)
    assert not later.done("cancel_reservation", "and one more", changes_state)
    failed = Conversation.from_messages([*CANCELLED[:5], *called("cancel_reservation", "Error: not found")])
    assert not failed.done("cancel_reservation", REQUEST, changes_state)
    assert failed.request(REQUEST, changes_state) == (REQUEST,)
