"""Stored runs as the rule's examples: each at its probe moment, in the form of a live request."""

from __future__ import annotations

import numpy as np

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.history import HistoryRun, conversations_so_far, examples
from skillflow.injection.views import VIEWS, vectors

EMB = HashingEmbedder(32)


def run(rid: str, query: str, seq: str, conv: str | None = None, index: int | None = None) -> HistoryRun:
    return HistoryRun(rid, query, seq, "h-" + rid, conv, index)


def test_a_segment_sees_its_conversations_earlier_messages_in_segment_order() -> None:
    runs = [
        run("b", "", "get_reservation > cancel_reservation", "c1", 1),  # a second write with no new message
        run("x", "what is my balance", "get_balance"),
        run("a", "hi\ncancel H1 and H2\nyes, proceed", "get_user > get_reservation > cancel_reservation", "c1", 0),
        run("c", "thanks, bye", "get_user", "c1", 2),
    ]
    so_far = conversations_so_far(runs)
    assert so_far[2] == ("hi", "cancel H1 and H2", "yes, proceed")
    assert so_far[0] == so_far[2]  # the consecutive write is probed on the conversation so far, not on nothing
    assert so_far[3] == (*so_far[2], "thanks, bye")
    assert so_far[1] == ("what is my balance",)


def test_examples_keep_every_run_with_a_request_and_a_call_in_the_live_form() -> None:
    runs = [
        run("a", "cancel H1 and H2\nyes", "get_user > cancel_reservation", "c1", 0),
        run("b", "", "cancel_reservation", "c1", 1),
        run("e", "", "get_user"),  # no request at all: left out
        run("n", "hello", ""),  # no call: left out
    ]
    out = examples(runs, EMB, VIEWS, lambda t: t)
    assert [e.group for e in out] == ["c1", "c1"]
    assert [(e.intent, e.prefix) for e in out] == [("cancel_reservation", ("get_user",)), ("cancel_reservation", ())]
    live = ("cancel H1 and H2", "yes")  # what prepare() sees before the second write
    for view in VIEWS:
        np.testing.assert_array_equal(out[1].vectors[view], vectors([live], view, EMB)[0])


def test_declared_tools_decide_the_intent() -> None:
    runs = [run("a", "check it", "check_in", None, None)]
    assert examples(runs, EMB, VIEWS, lambda t: t)[0].intent == "read-only"  # "check" is a read verb
    assert examples(runs, EMB, VIEWS, lambda t: t, {"check_in": True})[0].intent == "check_in"
