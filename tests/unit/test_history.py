"""Stored runs as the rule's examples: each at its probe moment, in the form of a live request."""

from __future__ import annotations

import numpy as np

from skillflow.injection.calibration import UNSUCCESSFUL, Budget, fit, taught
from skillflow.injection.conversation import LAST
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.history import HistoryRun, call_points, examples, requests
from skillflow.injection.rule import LiveSkill, decide
from skillflow.injection.views import VIEWS, vectors

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
        (2, ("book a flight to Oslo",), ("search",), "book_reservation"),
    ]


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
