"""A redacted request quoted in a skill is not refused for the words beside its placeholders.

The offline distiller quotes a procedure's redacted request in its worked example; a conversation's request is its
user messages on one line. Validation read the text with each placeholder blanked out, so the words after one were
taken for the value it replaced (``My password is <secret> My email is`` → a password "My email is"; ``My username
is <secret> Yes, …`` → a secret "Yes"), and a two-word quote with a placeholder in it was a one-word quoted literal
(``'My <name>'`` → ``'My'``). API-Bank's register, delete-account and open-account procedures were refused at every
cycle for it, and a request cut at 160 characters inside a placeholder (``'<strin...``) was a quoted literal too."""

from __future__ import annotations

import inspect

import pytest

from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.distill import _example_request
from skillflow.promotion.evidence import EvidenceRun


@pytest.mark.parametrize(
    "text",
    [
        "Can you help me register as a new user? My username is <secret> My password is <secret> My email is <email>",
        "Can you help me delete my account? My username is <secret> Yes, I want to delete my account.",
        "The agenda is 'Meeting with project team', location is '<name> A', and time is '<date>'.",
        "Can you help me open a bank account? Let's name it 'My <name>'. '<string>'. My name is <name>.",
        "My password is <secret>. Thanks!",
        "token: <secret> then call the tool",
    ],
)
def test_words_beside_a_placeholder_are_not_its_value(text: str) -> None:
    assert literal_findings(text) == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("My username is <secret> My password is hunter2x9", "secret"),
        ("password: <secret> and the backup password is Tr0ub4dor&3", "secret"),
        ("Use the code 'XK-2291' for <name>", "quoted"),
        ("email <email> or bob@example.com", "email"),
    ],
)
def test_a_literal_beside_a_placeholder_is_still_found(text: str, kind: str) -> None:
    assert kind in {f.kind for f in literal_findings(text)}


def _run(query: str) -> EvidenceRun:
    fields = {p: None for p in inspect.signature(EvidenceRun).parameters}
    return EvidenceRun(**{**fields, "query": query, "steps": []})


def test_the_worked_example_never_cuts_a_placeholder() -> None:
    query = "Can you also help me open a bank account? " + "Let's use '<string>'. <string>. " * 12
    for extra in range(0, 40):
        text = _example_request(_run("x" * extra + " " + query), set())
        assert len(text) <= 160
        assert text.count("<") == text.count(">"), text
        assert literal_findings(text) == [], text
