"""Values that slipped past redaction (docs/SECURITY.md, "Attacks tried (found and fixed)").

One regression test per reproduction, each failing on the code before the fix: dot-separated numbers,
superscript/circled/homoglyph values, a secret used as an argument key, and partly redacted secrets
(percent-encoded e-mail, JWT signature, bearer token, passphrase, spelled-out PIN). Assertions read the
redacted text, the stored skill row and trigger queries, and the LLM request body.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.config import Settings
from skillflow.kernel.models import EvidenceRun, utcnow
from skillflow.kernel.textnorm import fold
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.landing import trigger_queries
from skillflow.promotion.redact import clean_reason, redact_query, redacted_evidence, safe_key, structural_names
from skillflow.runtime import Skillflow
from skillflow.storage.schema import skillbox
from tests.support.fake_llm_server import FakeLLMServer, Reply
from tests.support.llm import T0, cancel_evidence, evidence_with_key, llm_settings
from tests.support.promotion import config
from tests.support.timing import growth

pytestmark = pytest.mark.usefixtures("offline_providers")

DOTTED = ["4539.1488.0343.6467", "192.168.200.17", "123.456.789.012", "1.234.567", "555.123.4567.89"]
UNFOLDED = {
    "superscript card": "⁴⁵³⁹ ¹⁴⁸⁸ ⁰³⁴³ ⁶⁴⁶⁷",
    "circled phone": "④①⑤⑤⑤⑤②⑥⑦①",
    "dingbat digits": "❹❶❺❺❺❺❷❻❼❶",
    "fullwidth card": "４５３９ １４８８ ０３４３ ６４６７",
    "zero-width card": "\u200b".join("4539148803436467"),
}
HOMOGLYPH_EMAIL = "zеldа@hyrulе-bаnk.cоm"  # Cyrillic е/а/о
SECRET_KEYS = ["AKIAQ7RZ5TW3EXAMPLEX", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "ghp_7hK2mN9pQ4rS6tU8vW0xY1zA3bC5dE7fG9hJ"]
# query -> pieces of the secret that must not survive
PARTIAL = {
    "refund my order and mail zelda%40hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda%2540hyrule-bank.com": ["zelda", "hyrule"],
    # HTML character references (a web tool's result, a pasted page): decimal, hex, named, and mixed with %XX
    "refund my order and mail zelda&#64;hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda&#x40;hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda&commat;hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda&#37;40hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order to card 4539&#32;1488&#32;0343&#32;6467": ["4539", "6467"],
    # string-literal escapes (a JSON-encoded tool result quoted in a message), an address spelled in words, "pw"
    "refund my order and mail zelda\\u0040hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda\\x40hyrule-bank.com": ["zelda", "hyrule"],
    "refund my order and mail zelda at hyrule-bank dot com": ["zelda", "hyrule"],
    "refund my order and mail zelda dot fitz at hyrule-bank dot com": ["zelda", "fitz", "hyrule"],
    "refund my order, pw is correcthorsebatterystaple": ["correcthorse"],
    "refund my order, session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.QwErTyUiOpAsDfGhJkLzXcVbNm": ["QwErTy"],
    "refund my order. Authorization: Bearer AbCdEfGhIjKlMnOpQrStUvWxYz": ["AbCdEf"],
    "refund my order, my passphrase is tangerine walrus quietly dances": ["tangerine", "walrus", "dances"],
    "refund my order, my pin is four eight two one": ["four", "eight", "two one"],
}


def _digit_runs(text: str) -> list[str]:
    return re.findall(r"\d{3,}", fold(text))


# D1. dot-separated numbers ----------------------------------------------------------------------
@pytest.mark.parametrize("value", DOTTED)
def test_dot_separated_numbers_are_redacted(value: str) -> None:
    out = redact_query(f"refund my order to {value} please")
    assert out == "refund my order to <card> please" or not re.search(r"\d", out), out
    assert not re.search(r"\d", clean_reason(f"refund sent to {value}")), value
    assert literal_findings(f"Use the account {value}."), value


def test_ordinary_decimals_stay_allowed_in_a_skill() -> None:
    assert literal_findings("Retry 2 times; a 0.95 rate or 2.5 hours is fine.") == []


# D2. superscript, circled, fullwidth, zero-width, homoglyph ------------------------------------
@pytest.mark.parametrize("kind", sorted(UNFOLDED))
def test_unfolded_digits_are_redacted(kind: str) -> None:
    out = redact_query(f"refund my order, my number is {UNFOLDED[kind]} thanks")
    assert _digit_runs(out) == [] and not re.search(r"\d", fold(out)), out
    assert out.startswith("refund my order, my number is <") and out.endswith("> thanks"), out


def test_homoglyph_email_is_redacted() -> None:
    out = redact_query(f"refund my order, mail {HOMOGLYPH_EMAIL}")
    assert out == "refund my order, mail <email>", out


NAMES = {  # a personal name as users write it -> its letters that must not survive
    "accented": ("please rebook for José García tomorrow", ["Jos", "Garc"]),
    "diaeresis and tilde": ("refund for Zoë Saldaña.", ["Zo", "Salda"]),
    "letters without a decomposition": ("My name is Łukasz Żółć", ["ukasz", "Żółć"]),
    "Cyrillic look-alike": ("please cancel for Аva Li today", ["va", "Li"]),
    "Greek look-alike": ("cancel for Αva Lі", ["va", "Lі"]),
    "lower case after a cue": ("my name is jose garcia and I want to cancel", ["jose", "garcia"]),
    "a form's fields (as a τ-bench user wrote them)": (
        "First name: Ivan, Last name: Smith. Cancel it",
        ["Ivan", "Smith"],
    ),
    "hyphen and apostrophe": ("my last name is o'neil-smith.", ["neil"]),
}


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_names_are_redacted_whatever_their_letters_or_case(kind: str) -> None:
    query, pieces = NAMES[kind]
    out = redact_query(query)
    assert "<name>" in out and not any(piece in out for piece in pieces), out


def test_a_cue_takes_only_the_words_of_a_name() -> None:
    assert redact_query("the name is on the ticket; my name is not important") == (
        "the name is on the ticket; my name is not important"
    )
    assert (
        redact_query("No such function name: authenticate_for_news") == "No such function name: authenticate_for_news"
    )


@pytest.mark.parametrize(
    "text",
    ["No such function name: login", "file name: report", "column name: status", "Unknown tool name: refund"],
)
def test_the_name_of_a_function_file_or_column_is_not_a_persons(text: str) -> None:
    assert redact_query(text) == text


def test_a_name_cue_after_another_word_still_takes_the_name() -> None:
    assert redact_query("passenger name: Ivan Smith") == "passenger name: <name>"
    assert redact_query("contact name: ava li, please") == "contact name: <name>, please"


def test_openers_stay_words_whatever_their_script() -> None:
    assert redact_query("Function：Delete the old one") == "Function：Delete the old one"  # a fullwidth colon


def test_trigger_queries_refuse_hidden_characters(sqlite_engine: Engine) -> None:
    ev = cancel_evidence()
    first = ev.successes[0]
    runs = [EvidenceRun(first.id, "Please cancel\u200b my reservation", first.steps, "success", T0)]
    with sqlite_engine.connect() as conn:
        stored = trigger_queries(conn, cancel_evidence(successes=runs), config())
    assert stored == [], stored


# D3. a secret used as an argument key ------------------------------------------------------------
@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_shaped_argument_key_is_not_a_parameter_name(key: str) -> None:
    ev = evidence_with_key(key)
    names = structural_names(ev)
    assert key not in names
    assert safe_key(key, names) == "<key>"
    assert key not in json.dumps(redacted_evidence(ev))
    assert literal_findings(f"a <string> for `{key}` is known", {key}), key  # a name never excuses a secret
    assert "reservation_id" in names  # ordinary parameter names stay structure


# D5. partly redacted secrets ---------------------------------------------------------------------
@pytest.mark.parametrize("query", sorted(PARTIAL))
def test_no_part_of_a_secret_survives(query: str) -> None:
    out = redact_query(query)
    assert out.startswith("refund my order"), out
    for piece in PARTIAL[query]:
        assert piece.casefold() not in out.casefold(), out


def test_prose_after_a_credential_word_is_kept() -> None:
    assert redact_query("I forgot my password and need a reset.") == "I forgot my password and need a reset."
    assert redact_query("my password is hunter2, then cancel my trip") == "my password is <secret>, then cancel my trip"


# end to end: the stored skill row, its trigger queries and the LLM request -----------------------
def _record(sf: Skillflow, user: str, queries: list[str]) -> None:
    for i, q in enumerate(queries):
        steps = [
            {"tool": "get_order_details", "arguments": {"order_id": f"A{i}9"}, "result": {"ok": True}},
            {"tool": "issue_refund", "arguments": {"order_id": f"A{i}9"}, "result": {"ok": True}},
        ]
        assert sf.record_run(q, user, steps, created_at=utcnow() - timedelta(minutes=30 - i)).stored


def test_planted_values_reach_no_skill_trigger_or_llm_request(sqlite_engine: Engine) -> None:
    planted = [*DOTTED, *UNFOLDED.values(), HOMOGLYPH_EMAIL]
    queries = [f"refund my order to {v}" for v in planted] + [q for q in PARTIAL] + ["please refund my order"]
    cfg = config(require_shadow=True, min_executions=3)
    sf = Skillflow(agent_id="shop", engine=sqlite_engine, config=cfg)
    sf.register_tools(["get_order_details", "issue_refund"], state_changing={"issue_refund": True})
    for user in ("offline", "llm"):
        _record(sf, user, queries)
    report = run_partition(sqlite_engine, "shop", "offline", cfg, settings=Settings(embedder="hashing"))
    assert report.promoted, report.rejected
    with sqlite_engine.connect() as conn:
        content, triggers = conn.execute(
            select(skillbox.c.content, skillbox.c.trigger_queries).where(skillbox.c.user_id == "offline")
        ).one()
    assert triggers
    with FakeLLMServer() as srv:
        srv.script(Reply("INSUFFICIENT"))
        run_partition(sqlite_engine, "shop", "llm", cfg, settings=llm_settings(srv))
        evidence = json.loads(srv.received[0].body["messages"][1]["content"])["evidence"]
    sent = [r["query"] for r in evidence["successes"]]
    examples = [line for line in content.splitlines() if line.startswith("Request (redacted)")]
    for label, shown in (("skill", examples), ("triggers", triggers), ("llm", sent)):
        assert shown and all(_digit_runs(q) == [] for q in shown), (label, shown)
    for label, text in (
        ("skill", content),
        ("triggers", json.dumps(triggers, ensure_ascii=False)),
        ("llm", json.dumps(evidence, ensure_ascii=False)),
    ):
        for value in planted:
            assert value not in text and fold(value) not in fold(text), (label, value)
        for pieces in PARTIAL.values():
            for piece in pieces:
                assert piece.casefold() not in fold(text).casefold(), (label, piece)


# performance: no adversarial input makes redaction slow ------------------------------------------
ADVERSARIAL = {
    "digits": "1" * 100_000,
    "dotted digits": "1." * 50_000,
    "spaced digits": "1 " * 50_000,
    "letters": "a" * 100_000,
    "dotted letters": "a." * 50_000,
    "letters and digits": "a1" * 50_000,
    "percent escapes": "%40" * 33_000,
    "character references": "&#64;" * 20_000,
    "named references": "&commat;x" * 11_000,
    "string escapes": "\\u0040" * 16_000,
    "words spelled as an address": "a at b " * 14_000,
    "name cues": "my name is a " * 8_000,
    "capitalized words after blank lines": "Ab.\n\n\n" * 16_000,
    "credential clause": "my password is " + "word " * 20_000,
    "superscripts": "⁴" * 100_000,
    "zero-width digits": "1\u200b" * 50_000,
    "letter-digit words": "a1 " * 33_000,
    "mixed-case letter words": "QwErTyUiOpAsDfGhJkLz " * 4_800,
    "camel-case words": "departureAirportCode " * 4_800,
    "underscored mixed-case words": "QwEr_TyUi-OpAs_DfGh " * 4_800,
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_redaction_of_adversarial_text_grows_linearly(kind: str) -> None:
    """The old patterns grew with the square of such text: 100 000 digits took about 150 s (10 000: 1.5 s)."""
    redact_query("warm up: password is x, card 4111 1111 1111 1111")  # imports the detector libraries
    text = ADVERSARIAL[kind]
    assert growth(redact_query, text) < 30, kind
    assert growth(literal_findings, text) < 30, kind
    assert not re.search(r"\d", fold(redact_query(text)))
