"""Redaction: shapes, literal extraction (nested, failed runs, queries), redacted evidence never carries a value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillflow.kernel.models import EvidenceRun
from skillflow.promotion import redact
from skillflow.promotion.redact import (
    RedactionError,
    find_literals,
    redact_query,
    redact_run,
    redacted_evidence,
    shape_of,
    source_literals,
)
from tests.support.llm import T0, cancel_evidence, errored_failure

PLANTED = [
    "ZFA04Y",  # success argument
    "mia_li_3668",  # success argument, also in the query
    "credit_card_4421486",  # nested two levels deep in a success argument
    "1231",  # nested number
    "weather_delay_9911",  # only in the failed run's nested argument
    "XK39PL",  # only in the failed run
    "sofia.kim7287@example.com",  # only in a query
    "QQ77RT",  # errored failure
]


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("ZFA04Y", "<id>"),
        ("mia_li_3668", "<id>"),
        ("JFK", "<id>"),
        ("someone@example.com", "<email>"),
        ("2024-05-20", "<date>"),
        ("2024-05-14T09:00:00", "<date>"),
        ("1231", "<number>"),
        ("change of plan", "<string>"),
        (3, "<int>"),
        (2.5, "<number>"),
        (True, "<bool>"),
        (None, "<null>"),
        ({"a": 1}, "<object>"),
        ([{"a": 1}, {"b": 2}], "<list of object>"),
        (["x y", "z w"], "<list of string>"),
        ([1, "a b"], "<list>"),
    ],
)
def test_shape_of(value: object, shape: str) -> None:
    assert shape_of(value) == shape


def test_source_literals_cover_nested_failed_and_query_values() -> None:
    ev = cancel_evidence(failures=[*cancel_evidence().failures, errored_failure()])
    literals = source_literals(ev)
    for lit in PLANTED:
        assert lit in literals, lit
    # Structure and common words are not literals.
    for not_lit in ("cancel_reservation", "reservation_id", "true", "yes", "visa", "cancelled"):
        assert not_lit not in {x.casefold() for x in literals}


def test_value_equal_to_a_tool_name_is_structure_not_a_literal() -> None:
    ev = cancel_evidence()
    steps = [{**ev.successes[0].steps[0], "arguments": {"user_id": "get_reservation_details"}}]
    run = EvidenceRun("x", "q", steps, "success", T0)
    ev2 = cancel_evidence(successes=[run, *ev.successes[1:]])
    assert "get_reservation_details" not in source_literals(ev2)


def test_redact_query_replaces_literals_and_patterns() -> None:
    query = "Cancel ZFA04Y for mia_li_3668, mail mia@x.io, flight on 2024-05-20, refund 1231 dollars"
    out = redact_query(query, {"ZFA04Y"})
    assert out == "Cancel <id> for <id>, mail <email>, flight on <date>, refund <number> dollars"
    assert redact_query("cancel my trip", set()) == "cancel my trip"


def test_redact_run_keeps_tools_keys_and_error_class_only() -> None:
    run = errored_failure()
    out = redact_run(run)
    text = json.dumps(out)
    assert [s["tool"] for s in out["steps"]] == [s["tool"] for s in run.steps]
    assert out["steps"][-1]["error_class"] == "ReservationNotFound"
    assert out["steps"][-1]["arguments"] == {
        "reservation_id": "<id>",
        "reason": {"code": "<string>", "refund": {"amount": "<int>", "to": "<id>"}},
    }
    assert "not found" not in text  # the error message is a value too
    assert find_literals(text, PLANTED) == []


def test_redacted_evidence_has_no_literal_and_keeps_the_shape_of_the_class() -> None:
    ev = cancel_evidence(
        failures=[*cancel_evidence().failures, errored_failure()],
        previous_demotion_reason=("drift: rolling 0.40 vs baseline 0.90 after XK39PL"),
    )
    payload = redacted_evidence(ev)
    text = json.dumps(payload, ensure_ascii=False)
    assert find_literals(text, source_literals(ev)) == []
    for lit in PLANTED:
        assert lit.casefold() not in text.casefold()
    assert payload["previous_demotion_reason"] == "drift: rolling 0.40 vs baseline 0.90 after <id>"
    assert [u["tool"] for u in payload["signature"]] == [
        "get_user_details",
        "get_reservation_details",
        "cancel_reservation",
    ]
    assert len(payload["successes"]) == 5 and len(payload["failures"]) == 2
    assert payload["successes"][0]["query"] == "Hi, I want to cancel my reservation <id>. My user id is <id>."


def test_redacted_evidence_refuses_to_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "redact_query", lambda q, literals=(), patterns=True: q)
    with pytest.raises(RedactionError):
        redacted_evidence(cancel_evidence())


@settings(max_examples=60, deadline=None)
@given(
    lit=st.from_regex(r"[A-Za-z]{1,5}[0-9]{1,4}[A-Za-z0-9_]{0,6}", fullmatch=True),
    prefix=st.sampled_from(["cancel ", "my id is ", "please look up (", ""]),
    suffix=st.sampled_from(["", " now", ").", ", thanks"]),
)
def test_redact_query_never_keeps_an_id_like_literal(lit: str, prefix: str, suffix: str) -> None:
    out = redact_query(prefix + lit + suffix, {lit})
    assert find_literals(out, {lit}) == []


def test_personal_names_in_queries_are_redacted() -> None:
    from skillflow.promotion.redact import redact_query

    assert (
        redact_query("Hi, this is Ava Li (ava_li_1234). I'd like to cancel.")
        == "Hi, this is <name> (<id>). I'd like to cancel."
    )
    assert redact_query("Can you cancel it? I'm Emma Muller.") == "Can you cancel it? I'm <name>."
    assert (
        redact_query("Please cancel my reservation now. My plans changed.")
        == "Please cancel my reservation now. My plans changed."
    )
