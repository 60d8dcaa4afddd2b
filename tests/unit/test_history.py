"""Stored runs as the rule's examples: each at its probe moment, in the form of a live request."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.capture.segments import segment_conversation
from skillflow.injection.calibration import UNSUCCESSFUL, Budget, fit, taught
from skillflow.injection.conversation import LAST, RECENT, Conversation, view_text
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.history import HistoryRun, call_points, examples, requests
from skillflow.injection.rule import LiveSkill, decide
from skillflow.injection.views import VIEWS, vectors
from skillflow.kernel.messages import message_text
from skillflow.kernel.state import changes_state

EMB = HashingEmbedder(32)


def run(rid: str, query: str, seq: str, conv: str | None = None, index: int | None = None) -> HistoryRun:
    return HistoryRun(rid, query, seq, "h-" + rid, conv, index)


def test_a_segment_is_judged_on_its_own_messages_or_the_latest_earlier_request() -> None:
    runs = [
        run("b", "", "get_reservation > cancel_reservation", "c1", 1),  # a second write with no new message
        run("x", "what is my balance", "get_balance"),
        run("a", "hi\ncancel H1 and H2\nyes, proceed", "get_user > get_reservation > cancel_reservation", "c1", 0),
        run("c", "thanks, bye", "get_user", "c1", 2),
    ]
    judged = requests(runs)
    assert judged[2] == ("hi", "cancel H1 and H2", "yes, proceed")
    assert judged[0] == judged[2]  # the consecutive write is judged on the request it belongs to, not on nothing
    assert judged[3] == ("thanks, bye",)  # after a write, prepare reads the messages since that write
    assert judged[1] == ("what is my balance",)


def test_examples_keep_every_run_with_a_request_and_a_call_in_the_live_form() -> None:
    runs = [
        run("a", "cancel H1 and H2\nyes", "get_user > cancel_reservation", "c1", 0),
        run("b", "", "cancel_reservation", "c1", 1),
        run("e", "", "get_user"),  # no request at all: left out
        run("n", "hello", ""),  # no call: left out
    ]
    out = examples(runs, EMB, VIEWS, lambda t: t)
    assert {e.group for e in out} == {"c1"}
    assert [(e.intent, e.prefix) for e in out] == [
        ("cancel_reservation", ()),  # after "cancel H1 and H2"
        ("cancel_reservation", ()),  # after "yes" (= before get_user)
        ("cancel_reservation", ("get_user",)),  # before the write
        ("cancel_reservation", ()),  # before the second write, made without a new message
    ]
    # An opening: one user message and no call made since the last write (the form of a single-turn request).
    assert [e.opening for e in out] == [True, False, False, False]
    live = ("cancel H1 and H2", "yes")  # what prepare() sees before the second write
    for view in VIEWS:
        np.testing.assert_array_equal(out[3].vectors[view], vectors([live], view, EMB)[0])
        np.testing.assert_array_equal(out[0].vectors[view], vectors([live[:1]], view, EMB)[0])


def test_declared_tools_decide_the_intent() -> None:
    runs = [run("a", "check it", "check_in", None, None)]
    assert examples(runs, EMB, VIEWS, lambda t: t)[0].intent == "read-only"  # "check" is a read verb
    assert examples(runs, EMB, VIEWS, lambda t: t, {"check_in": True})[0].intent == "check_in"


def test_every_model_call_of_a_stored_conversation_is_a_point_labelled_with_the_write_that_follows() -> None:
    runs = [
        run("w", "hi\ncancel H1\nyes", "get_user > get_reservation > cancel_reservation", "c1", 0),
        run("r", "and my baggage allowance?", "get_user > get_reservation", "c1", 1),  # no write: read-only
        run("s", "book a flight to Oslo", "search > book_reservation"),  # a standalone run: one request
    ]
    points = [(p.run, p.so_far, p.prefix, p.intent) for p in call_points(runs)]
    hi, cancel, yes, bags = "hi", "cancel H1", "yes", "and my baggage allowance?"
    assert points == [
        (0, (hi,), (), "cancel_reservation"),  # after each user message of the span
        (0, (hi, cancel), (), "cancel_reservation"),
        (0, (hi, cancel, yes), (), "cancel_reservation"),  # = before the span's first call
        (0, (hi, cancel, yes), ("get_user",), "cancel_reservation"),
        (0, (hi, cancel, yes), ("get_user", "get_reservation"), "cancel_reservation"),  # just before the write
        (1, (bags,), (), "read-only"),  # no write follows in this span; the request since the write
        (1, (bags,), ("get_user",), "read-only"),
        (2, ("book a flight to Oslo",), (), "book_reservation"),  # a standalone run: its request before any call
        (2, ("book a flight to Oslo",), ("search",), "book_reservation"),  # and before each of its calls
    ]


def test_a_standalone_run_is_fitted_at_the_call_a_single_turn_agent_makes() -> None:
    """A single-turn agent calls ``prepare(query)`` once, before it acts: the request with no call made. A
    standalone run's history must hold that point, an opening (it used to hold only the point before its write,
    where the calls made had already ruled other intents out), and one before each of its calls for an agent
    that asks before every model call; the classifier sees its request alone."""
    runs = [
        run("s", "cancel H1, I'm u1\nthanks", "get_user > get_reservation > cancel_reservation"),
        run("t", "what is on H2?", "get_reservation", "c9", None),  # tagged with a conversation, no segment
    ]
    points = [(p.run, p.so_far, p.prefix, p.intent, p.opening) for p in call_points(runs)]
    request = "cancel H1, I'm u1\nthanks"  # a standalone run's query is one request, whatever its lines
    assert points == [
        (0, (request,), (), "cancel_reservation", True),
        (0, (request,), ("get_user",), "cancel_reservation", False),
        (0, (request,), ("get_user", "get_reservation"), "cancel_reservation", False),
        (1, ("what is on H2?",), (), "read-only", True),
    ]
    out = examples(runs, EMB, VIEWS, lambda t: t)
    assert [e.trains for e in out] == [True] * 4  # one text per run: its weight is its number of points
    assert {e.group for e in out} == {"s", "c9"}


def test_a_failed_run_is_marked_and_an_unknown_one_is_left_out() -> None:
    runs = [
        HistoryRun("ok", "cancel H1", "get_user > cancel_reservation", "h-ok", "c1", 0, "success"),
        HistoryRun("bad", "cancel H2", "get_user > cancel_reservation", "h-bad", "c2", 0, "failure"),
        HistoryRun("unk", "cancel H3", "get_user > cancel_reservation", "h-unk", "c3", 0, "unknown"),
    ]
    points = [(runs[p.run].run_id, p.intent, p.failed) for p in call_points(runs)]
    assert points == [("ok", "cancel_reservation", False)] * 2 + [("bad", "cancel_reservation", True)] * 2
    assert [e.failed for e in examples(runs, EMB, VIEWS, lambda t: t)] == [False, False, True, True]


def test_a_failed_run_is_a_negative_only_where_it_followed_a_live_skills_procedure() -> None:
    """The skill's own procedure followed and failed: its request is a negative. Another procedure of the intent
    failed: the request is still one for the intent, done the wrong way (what the skill is for). An intent
    without a live skill: a request no skill answers, as any run of it."""
    runs = [
        HistoryRun("ok", "cancel H1", "get_user > cancel_reservation", "h-skill", "c1", 0, "success"),
        HistoryRun("same", "cancel H2", "get_user > cancel_reservation", "h-skill", "c2", 0, "failure"),
        HistoryRun("other", "cancel H3", "cancel_reservation", "h-other", "c3", 0, "failure"),
        HistoryRun("book", "book Oslo", "book_reservation", "h-book", "c4", 0, "failure"),  # no live skill
    ]
    skill = LiveSkill("s1", "h-skill", "cancel_reservation", ("get_user", "cancel_reservation"), (1.0, 1))
    exs = taught(examples(runs, EMB, VIEWS, lambda t: t), [skill])
    assert [(e.group, e.intent) for e in exs] == [
        *[("c1", "cancel_reservation")] * 2,
        *[("c2", UNSUCCESSFUL)] * 2,
        ("c3", "cancel_reservation"),  # a request for the intent, done the wrong way: what the skill is for
        ("c4", "book_reservation"),  # a request no skill answers, as any run of that intent: NONE in the fit
    ]


def _tenant_history(n: int = 12) -> list[HistoryRun]:
    words = ["today", "please", "now", "thanks", "asap", "kindly", "soon", "quickly"]
    out = []
    for i in range(n):
        w = f"{words[i % 8]} {words[(i * 3 + 1) % 8]}"
        out.append(run(f"w{i}", f"cancel my reservation {w}\nyes go ahead", "get_reservation > cancel_reservation",
                       f"c{i}", 0))  # fmt: skip
        out.append(run(f"r{i}", f"what is my baggage allowance {w}", "get_user_details > get_reservation", f"c{i}", 1))
    return out


def test_the_fit_counts_every_call_and_abstains_where_no_write_follows() -> None:
    runs = _tenant_history()
    exs = examples(runs, EMB, VIEWS, lambda t: t)
    assert len(exs) == len(call_points(runs)) == 12 * (3 + 2)  # per conversation: 3 call points, then 2
    skill = LiveSkill("s1", "h-w0", "cancel_reservation", ("get_reservation", "cancel_reservation"), (1.0, 12))
    rule = fit(exs, [skill], VIEWS, Budget(min_negatives=3), 0.0)
    assert rule.injects and rule.inner["positives"] + rule.inner["negatives"] == len(exs)  # budgets per call
    assert rule.inner["negatives"] == 12 * 2
    say = ("cancel my reservation kindly now", "yes go ahead")
    q = vectors([say], rule.view or LAST, EMB)[0]
    assert decide(rule, q, ("get_reservation",)).skill_id == "s1"  # just before the write
    bags = vectors([("what is my baggage allowance kindly now",)], rule.view or LAST, EMB)[0]
    for prefix in ((), ("get_user_details",)):  # the read-only span that follows the write: no skill
        assert decide(rule, bags, prefix).skill_id is None


def _call(cid: str, tool: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "tool_calls": [{"id": cid, "function": {"name": tool, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": cid, "content": "{}"},
    ]


def _openings(messages: list[dict[str, Any]]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(the history's opening points, the live openings) of one conversation, as the view texts they embed."""
    stored = [
        HistoryRun(f"r{s.index}", s.query, " > ".join(t.tool for t in s.steps), f"h{s.index}", "c", s.index)
        for s in segment_conversation(messages)
    ]
    history = [p.so_far for p in call_points(stored) if p.opening]
    writes = functools.partial(changes_state, declared=None)
    live = []
    for k, m in enumerate(messages):  # before every model call: every assistant message
        if m["role"] != "assistant":
            continue
        conv = Conversation.from_messages(messages[:k])
        users = [x for x in messages[:k] if x["role"] == "user"]
        request = conv.request(message_text(users[-1]["content"]), writes)
        if len(request) == 1 and not conv.prefix(writes):
            live.append(request)
    return history, live


def _texts(points: list[tuple[str, ...]]) -> list[tuple[str, str]]:
    return [(view_text(p, LAST), view_text(p, RECENT)) for p in points]


def test_a_message_of_several_lines_or_content_parts_is_one_message_in_history_and_live() -> None:
    """An opening is one user *message*: the stored query keeps where each message starts, so the history's
    openings are the live ones — not the first line of a message that spans lines."""
    messages = [
        {"role": "user", "content": "Hi, I need help.\nPlease cancel reservation ABC123"},
        *_call("1", "get_reservation_details"),
        *_call("2", "cancel_reservation"),
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}, {"type": "text", "text": "Book one."}]},
        *_call("3", "search_direct_flight"),
        *_call("4", "book_reservation"),
    ]
    history, live = _openings(messages)
    assert _texts(live) == [
        ("Hi, I need help. Please cancel reservation ABC123",) * 2,
        ("Thanks. Book one.",) * 2,
    ]
    assert _texts(history) == _texts(live)
    points = call_points(
        [
            HistoryRun(f"r{s.index}", s.query, "x > cancel_reservation", "h", "c", s.index)
            for s in segment_conversation(messages)
        ]
    )
    assert all(view_text(p.so_far, LAST) != "Hi, I need help." for p in points)  # no first-line-only point


user_text = st.text(st.sampled_from("ab \n\r\t"), max_size=8)
content = user_text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": user_text}), max_size=3)


def _conversation(first: list[Any], second: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": c} for c in first]
    messages += [*_call("1", "get_user_details"), *_call("2", "cancel_reservation")]
    messages += [{"role": "user", "content": c} for c in second]
    return [*messages, *_call("3", "get_user_details"), *_call("4", "update_reservation_flights")]


@settings(deadline=None, max_examples=200)
@given(content, content, st.booleans())
def test_the_history_s_openings_are_the_live_openings_whatever_the_message(
    first: Any, second: Any, blank: bool
) -> None:
    """A model call after each message: the history's openings are exactly the live ones (a blank message,
    empty text parts or a bare line break included)."""
    history, live = _openings(_conversation([first], ["\n \r\n", second] if blank else [second]))
    assert _texts(history) == _texts(live)


@settings(deadline=None, max_examples=200)
@given(st.lists(content, min_size=1, max_size=3), st.lists(content, min_size=1, max_size=3))
def test_every_live_opening_is_one_of_the_history_s_whatever_the_messages(first: list[Any], second: list[Any]) -> None:
    """Several messages before a model call: the history also has a point after each of them (it cannot know
    where the agent was called), so the live openings are among the history's."""
    history, live = _openings(_conversation(first, second))
    assert set(_texts(live)) <= set(_texts(history))


def test_repeated_reads_cost_the_fit_nothing_and_change_nothing_it_chooses() -> None:
    """An agent that reads the same things again and again gives a run many call points with the same messages and
    the same calls made; they decide alike, so they are one example weighted by their number. The rule fitted on
    them is the one fitted on every call point one by one, and the work no longer grows with the repeats."""
    from dataclasses import replace

    loop = " > ".join(["get_user", "get_reservation"] * 10)
    runs = [
        *[run(f"c{i}", f"cancel reservation R{i} please {i % 3}", f"{loop} > cancel_reservation") for i in range(12)],
        *[run(f"b{i}", f"book a flight to city {i} soon", "get_user > search > book_reservation") for i in range(12)],
        *[run(f"n{i}", f"what is on reservation R{i} {i % 4}", loop, f"conv-{i}", 0) for i in range(14)],
    ]
    weighted = examples(runs, EMB, VIEWS, lambda t: t)
    each = [replace(e, weight=1) for e in weighted for _ in range(e.weight)]
    assert len(each) == 12 * 21 + 12 * 3 + 14 * 20 and len(weighted) == 12 * 3 + 12 * 3 + 14 * 3
    skills = [
        LiveSkill("s1", "h-c0", "cancel_reservation", ("get_user", "get_reservation", "cancel_reservation")),
        LiveSkill("s2", "h-b0", "book_reservation", ("get_user", "search", "book_reservation")),
    ]
    for nearest in (None, ()):  # whichever score the fit prefers, and the classifier alone
        a, b = (fit(x, skills, VIEWS, Budget(), 0.0, nearest=nearest) for x in (weighted, each))
        assert (a.view, a.strength, a.margin, a.floors, a.opening_floors, a.inner) == (
            b.view, b.strength, b.margin, b.floors, b.opening_floors, b.inner,
        )  # fmt: skip
        assert a.inner["positives"] == 12 * 21 + 12 * 3 and a.inner["opening_negatives"] == 14
        for x, y in ((a.weights, b.weights), (a.bias, b.bias), (a.exemplars, b.exemplars)):
            np.testing.assert_array_equal(x if x is not None else [], y if y is not None else [])
        np.testing.assert_array_equal(a.exemplar_labels, b.exemplar_labels)
    assert a.weights is not None  # the classifier was compared too


READS = ("get_user", "get_reservation", "search")
KINDS = {  # the requests of each kind of run, and the write it ends in (none: a look-up)
    "cancel_reservation": ("cancel my trip", "please cancel H1", "cancel it now", "cancel H1\nyes"),
    "book_reservation": ("book a flight", "book one to Oslo", "I want to book"),
    "": ("what is on H1", "show my trip", "", "how many bags"),
}
a_run = st.sampled_from(sorted(KINDS)).flatmap(
    lambda kind: st.tuples(
        st.sampled_from(KINDS[kind]),
        st.lists(st.sampled_from(READS), min_size=0 if kind else 1, max_size=10).map(
            lambda reads: [*reads, kind] if kind else reads
        ),
        st.sampled_from([None, None, "c1", "c2", "c3", "c4", "c5"]),
        st.sampled_from([None, 0, 1]),
        st.sampled_from(["success", "success", "success", "failure", "unknown"]),
    )
)


@settings(deadline=None, max_examples=40)
@given(st.lists(a_run, min_size=1, max_size=40))
def test_any_history_fits_weighted_as_it_does_point_by_point(rows: list[tuple[Any, ...]]) -> None:
    """Whatever the runs (standalone or segments, repeated calls, failed or unknown outcomes, no request), the rule
    fitted on the weighted examples is the one fitted on every call point one by one, and the fit never raises."""
    from dataclasses import replace

    runs = [
        HistoryRun(f"r{i}", q, " > ".join(tools), f"h-{tools[-1]}", conv, seg if conv else None, out)
        for i, (q, tools, conv, seg, out) in enumerate(rows)
    ]
    weighted = examples(runs, EMB, VIEWS, lambda t: t)
    each = [replace(e, weight=1) for e in weighted for _ in range(e.weight)]
    assert len(each) == len(call_points_one_by_one(runs))
    skills = [
        LiveSkill("s1", "h-cancel_reservation", "cancel_reservation", ("get_user", "cancel_reservation")),
        LiveSkill("s2", "h-book_reservation", "book_reservation", ("search", "book_reservation")),
    ]
    budget = Budget(min_negatives=1, folds=2)
    a, b = (fit(x, skills, VIEWS, budget, 0.0) for x in (weighted, each))
    assert (a.reason, a.view, a.strength, a.margin, a.floors, a.opening_floors, a.inner) == (
        b.reason, b.view, b.strength, b.margin, b.floors, b.opening_floors, b.inner,
    )  # fmt: skip


def call_points_one_by_one(runs: list[HistoryRun]) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """Every call point of the runs, each once, without merging those with the same calls made (the reference)."""
    out = []
    for p in call_points(runs):
        proc = runs[p.run].tool_sequence.split(" > ")
        same = [proc[:j] for j in range(len(proc)) if set(proc[:j]) == set(p.prefix) and len(proc[:j]) >= len(p.prefix)]
        out += [(p.run, p.so_far, tuple(q)) for q in same]
    return out
