"""Conversation segmentation: procedures anchored on state-changing calls, across user turns."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from skillflow.capture import segments
from skillflow.capture.segments import (
    NO_RESULT,
    READ_ONLY,
    READ_VERBS,
    ConversationError,
    Segment,
    changes_state,
    segment_conversation,
    segment_run_id,
)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


_ids = iter(range(10_000))


def call(tool: str, result: Any = "ok", **arguments: Any) -> list[dict[str, Any]]:
    """An assistant tool call and its tool message (``result`` None: no tool message)."""
    cid = f"call_{next(_ids)}"
    msgs: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}
            ],
        }
    ]
    if result is not None:
        msgs.append(
            {"role": "tool", "tool_call_id": cid, "content": result if isinstance(result, str) else json.dumps(result)}
        )
    return msgs


def tools(seg: Segment) -> list[str]:
    return [s.tool + ("!" if s.errored else "") for s in seg.steps]


def test_the_verb_rule_and_declared_overrides() -> None:
    assert "get" in READ_VERBS and "book" not in READ_VERBS
    assert not changes_state("get_user_details") and not changes_state("searchFlights")
    assert not changes_state("list-orders") and not changes_state("lookup.customer") and not changes_state("think")
    assert changes_state("book_reservation") and changes_state("cancelOrder") and changes_state("transfer_to_human")
    assert changes_state("frobnicate_widget")  # an unknown verb changes state (fail safe)
    assert changes_state("get_token", {"get_token": True})  # declared beats the verb
    assert not changes_state("send_preview", {"send_preview": False})
    assert changes_state("cancel_order", {"other_tool": False})


def test_a_write_after_a_confirmation_turn_is_one_procedure_with_both_requests() -> None:
    """The confirmation turn ("yes, please proceed") does not split the procedure: the write closes it."""
    messages = [
        {"role": "system", "content": "You are an airline agent."},
        user("I want to cancel my reservation ABC123."),
        *call("get_user_details", {"name": "x"}, user_id="mia"),
        *call("get_reservation_details", {"id": "ABC123"}, reservation_id="ABC123"),
        say("Reservation ABC123 can be cancelled for a full refund. Shall I proceed?"),
        user("yes, please proceed"),
        *call("cancel_reservation", {"status": "cancelled"}, reservation_id="ABC123"),
        say("Done."),
        user("thanks, bye"),
    ]
    [segment] = segment_conversation(messages)
    assert segment.intent == "cancel_reservation" and segment.index == 0
    assert segment.query == "I want to cancel my reservation ABC123.\nyes, please proceed"
    assert tools(segment) == ["get_user_details", "get_reservation_details", "cancel_reservation"]
    assert segment.steps[1].arguments == {"reservation_id": "ABC123"}
    assert segment.steps[2].result == {"status": "cancelled"}  # JSON tool results are decoded


def test_two_procedures_split_at_each_write_and_trailing_reads_form_one_read_only_segment() -> None:
    messages = [
        user("book me a flight to SFO"),
        *call("search_direct_flight", [], origin="JFK"),
        *call("book_reservation", "ok", flight="HAT1"),
        user("and add a bag"),
        *call("update_reservation_baggages", "ok", bags=1),
        user("what is my balance?"),
        *call("get_user_details", {"balance": 3}),
        *call("think", "ok", thought="x"),
        say("Your balance is 3."),
        user("ok thanks"),
    ]
    segs = segment_conversation(messages)
    assert [(s.index, s.intent) for s in segs] == [
        (0, "book_reservation"),
        (1, "update_reservation_baggages"),
        (2, READ_ONLY),
    ]
    assert [s.query for s in segs] == ["book me a flight to SFO", "and add a bag", "what is my balance?"]
    assert tools(segs[1]) == ["update_reservation_baggages"]
    assert tools(segs[2]) == ["get_user_details", "think"]
    # A conversation still going on leaves the open read-only tail out (it may end in a write).
    assert [s.intent for s in segment_conversation(messages, complete=False)] == [
        "book_reservation",
        "update_reservation_baggages",
    ]


def test_a_failed_write_retried_with_the_same_tool_does_not_close_the_segment() -> None:
    messages = [
        user("change my flight"),
        *call("get_reservation_details", {"id": 1}),
        *call("update_reservation_flights", "Error: payment amount does not add up", cabin="economy"),
        *call("think", "ok", thought="recompute"),  # a no-op between the failure and its retry
        *call("update_reservation_flights", {"ok": True}, cabin="economy"),
        user("now cancel the other one"),
        *call("cancel_reservation", "Error: reservation cannot be cancelled", reservation_id="Z"),
        *call("transfer_to_human_agents", "ok", summary="s"),
    ]
    segs = segment_conversation(messages)
    assert [tools(s) for s in segs] == [
        ["get_reservation_details", "update_reservation_flights!", "think", "update_reservation_flights"],
        ["cancel_reservation!"],  # failed and not retried: the attempt closes its own segment
        ["transfer_to_human_agents"],
    ]
    assert segs[0].steps[1].error == "Error: payment amount does not add up"
    assert [s.query for s in segs] == ["change my flight", "now cancel the other one", ""]
    # Mid-conversation, a failed last write may still be retried: it is not recorded yet.
    open_tail = messages[:-2] + call("cancel_reservation", "Error: x", reservation_id="Z")
    assert [s.intent for s in segment_conversation(open_tail, complete=False)] == ["update_reservation_flights"]


def test_declared_flags_override_the_verb_rule() -> None:
    messages = [
        user("send me a preview"),
        *call("send_preview", "ok"),
        *call("get_token", "t"),
        *call("lookup_order", "o"),
    ]
    assert [s.intent for s in segment_conversation(messages)] == ["send_preview", READ_ONLY]
    declared = {"send_preview": False, "get_token": True}
    segs = segment_conversation(messages, declared)
    assert [(s.intent, tools(s)) for s in segs] == [
        ("get_token", ["send_preview", "get_token"]),
        (READ_ONLY, ["lookup_order"]),
    ]


def test_reads_only_and_no_calls() -> None:
    only_reads = [user("where is my order?"), *call("get_order", {"s": 1}), say("It ships today."), user("great")]
    [seg] = segment_conversation(only_reads)
    assert (seg.intent, seg.query, tools(seg)) == (READ_ONLY, "where is my order?", ["get_order"])
    assert segment_conversation([user("hello"), say("hi")]) == []
    assert segment_conversation([]) == []


def test_tool_results_pair_by_call_id_then_by_position_and_a_missing_result_is_an_error() -> None:
    parallel = [
        user("two lookups and a booking"),
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "function": {"name": "get_a", "arguments": "{}"}},
                {"id": "b", "function": {"name": "get_b", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "book_it", "arguments": "{bad json"}}]},
    ]
    [seg] = segment_conversation(parallel)
    assert [(s.tool, s.result) for s in seg.steps[:2]] == [("get_a", "A"), ("get_b", "B")]
    assert seg.steps[2].arguments == {"_raw": "{bad json"} and seg.steps[2].error == NO_RESULT
    assert seg.steps[2].error_class == "Error:no_result"
    content_parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]}]
    assert segment_conversation([*content_parts, *call("get_x")])[0].query == "hi"


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        ("not a list", "messages must be a list"),
        ([user("x"), 42], "messages[1] must be a mapping"),
        ([{"role": "assistant", "tool_calls": "get_x"}], "messages[0].tool_calls must be a list"),
        ([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}], "tool_calls[0] has no function"),
    ],
)
def test_unreadable_conversations_raise_a_clear_error(messages: Any, needle: str) -> None:
    with pytest.raises(ConversationError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        segment_conversation(messages)


def _turns(n: int) -> list[dict[str, Any]]:
    """``n`` turns of four messages: a request, its write, the write's result, the answer (one procedure each)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        fn = {"name": "cancel_order", "arguments": json.dumps({"order_id": i})}
        out += [
            user(f"cancel order {i}"),
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"t{i}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": '{"ok": true}'},
            say("done"),
        ]
    return out


def test_a_conversation_over_the_limit_keeps_the_procedures_closed_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first ``MAX_MESSAGES`` messages are read (the bound on one call's work), as a conversation still
    going on: the procedures they close are those of the whole conversation, same indexes. Before, a conversation
    one message over the limit was refused whole: every procedure lost."""
    messages = _turns(12)  # 48 messages, 12 procedures
    whole = segment_conversation(messages)
    monkeypatch.setattr(segments, "MAX_MESSAGES", 41)  # the cut falls inside the 11th turn, after its call
    read = segment_conversation(messages)
    assert read == whole[:10] == segment_conversation(messages[:41], complete=False)
    assert segments.too_long(messages) == (
        "a conversation is read up to its first 41 messages: the procedures not closed within them were not stored"
    )
    assert segments.too_long(messages[:41]) is None
    monkeypatch.setattr(segments, "MAX_MESSAGES", 43)  # the 11th write's result read: it closes its procedure
    assert segment_conversation(messages) == whole[:11]


def test_segmentation_is_linear_in_the_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each write looked at every later call, and each call message copied the rest of the conversation: quadratic
    (about 2 s of CPU for 40 000 messages, 0.35 s now). The bound on one call's work is ``MAX_MESSAGES``, not the
    cost of reading them."""
    monkeypatch.setattr(segments, "MAX_MESSAGES", 1_000_000)

    def cpu(turns: int) -> float:  # the fastest of three: a collection or a busy host only ever adds time
        messages = _turns(turns)
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            assert len(segment_conversation(messages)) == turns
            best = min(best, time.process_time() - started)
        return best

    # Sixteen times the conversation: about 19 times the CPU here when linear, about 130 with the rest of the
    # conversation copied at each call (measured with that copy put back). A ratio of two runs in one process, not
    # a bound in seconds (a loaded CI host took 1.6 s of CPU for 10 000 turns where a quiet one takes 0.35).
    assert cpu(16_000) / cpu(1_000) < 40


def test_segment_run_ids_are_deterministic_per_tenant_and_conversation() -> None:
    a = segment_run_id("agent", "u1", "conv-1", 0)
    assert a == segment_run_id("agent", "u1", "conv-1", 0) and len(a) <= 64
    assert len({a, segment_run_id("agent", "u2", "conv-1", 0), segment_run_id("agent", "u1", "conv-2", 0)}) == 3
    assert segment_run_id("agent", "u1", "conv-1", 1) != a


def test_tau_bench_conversations_segment_as_the_prototype_counted(tau_bench_path: Any) -> None:
    """On the τ-bench airline corpus: every segment ends in its write, and reads never close a segment."""
    episodes = json.loads(tau_bench_path.read_text(encoding="utf-8"))
    segs = [s for e in episodes for s in segment_conversation(e["traj"])]
    assert len(segs) == 290
    assert sum(1 for s in segs if s.intent == READ_ONLY) == 35
    for s in segs:
        writes = [i for i, st in enumerate(s.steps) if changes_state(st.tool)]
        if s.intent == READ_ONLY:
            assert writes == []
        else:
            assert s.steps[-1].tool == s.intent and all(s.steps[i].tool == s.intent for i in writes)
