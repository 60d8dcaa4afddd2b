"""Digit-free random letter tokens are values, not names or prose (docs/SECURITY.md, "Fixed 2026-12-04").

A secret made only of letters (``QwErTyUiOpAsDfGhJk``) has no digit for the backstop to catch and no vendor
prefix for the prefixed-key rule: before this change it stayed in a redacted query, reached the LLM request
and the offline skill's worked example, and as an argument key it counted as a parameter name. These tests
plant such tokens in every channel (argument key, argument value, result key and value, query), hold the
detector to a measured rate on uniformly random letters, and hold it to no finding on identifiers, prose and
the real corpora (``/work/shared/corpora``, skipped with the reason when absent).
"""

from __future__ import annotations

import contextlib
import json
import random
import string
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from skillflow.kernel.config import Settings
from skillflow.kernel.models import EvidenceRun, utcnow
from skillflow.kernel.textnorm import fold
from skillflow.promotion import detectors
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.redact import (
    redact_query,
    redact_run,
    redacted_evidence,
    safe_error_class,
    safe_key,
    source_literals,
    structural_names,
)
from skillflow.runtime import Skillflow
from skillflow.storage.schema import skillbox
from tests.conftest import CORPORA
from tests.security.test_property import CONTEXTS, letter_tokens
from tests.support.fake_llm_server import FakeLLMServer, Reply
from tests.support.llm import cancel_evidence, evidence_with_key, llm_settings
from tests.support.promotion import config

# The miss docs/SECURITY.md named, the same with two more letters, and a random token of three camel "words"
# (a key of at most three words was shown to the distiller as is).
NAMED = ["QwErTyUiOpAsDfGhJk", "QwErTyUiOpAsDfGhJkLz", "XkcdQwrtzPlmnbvcxz"]
IDENTIFIERS = [
    "departureAirportCode",
    "getUserDetails",
    "getReservationDetailsForUser",
    "reservation_id",
    "XMLHttpRequest",
    "XMLHttpRequestUpload",
    "IOError",
    "HTTPConnectionPool",
    "SQLNumResultRowsIfKnown",
    "skipCUDAIfNotMiopenSuggestNHWC",
    "internationalization",
    "Internationalization",
    "INTERNATIONALIZATION",
    "transfer_to_human_agents",
    "advisedMinimumAudienceAge",
    "normalizeCityNameSrc",
    "postCodeOrZipCode",
    "SigepClienteException",
    "AppointmentRegistration",
    "McDonaldsRestaurantFranchiseOwner",
    "iPhoneScreenReplacementQuote",
    "getMovieDetails_for_IMDb_API",
    "Llanfairpwllgwyngyll",
]
PROSE = [
    "Hi! I'm Mia Li and I'd like to change my reservation from New York to Seattle, internationalization aside.",
    "The counterrevolutionaries' uncharacteristically incomprehensible responsibilities were overwhelming.",
    "Please use the XMLHttpRequest and getUserDetails endpoints for departureAirportCode lookups.",
    "NOTE: the IOError came from HTTPConnectionPool; retry with reservation_id only.",
]


@settings(deadline=None)
@given(secret=letter_tokens(), context=st.sampled_from(CONTEXTS))
@example(secret="QwErTyUiOpAsDfGhJkLz", context="{s}")  # docs/SECURITY.md's miss, as a value in free text
@example(secret="XkcdQwrtzPlmnbvcxz", context="value: {s}")
def test_a_letter_secret_in_a_query_is_redacted(secret: str, context: str) -> None:
    out = redact_query("Hello, " + context.format(s=secret))
    assert secret.casefold() not in out.casefold(), (secret, out)
    assert literal_findings(out) == [], out


@pytest.mark.parametrize(
    "query", ["my token is QwErTyUiOpAsDfGhJkLz", "use QwErTyUiOpAsDfGhJkLz for it", "key=QwErTyUiOpAsDfGhJkLz."]
)
def test_the_named_value_is_redacted_whole(query: str) -> None:
    out = redact_query(query)
    assert "QwErTy" not in out and "<secret>" in out, out


@settings(deadline=None)
@given(key=letter_tokens())
@example(key="QwErTyUiOpAsDfGhJk")  # docs/SECURITY.md's miss: it counted as a parameter name
@example(key="XkcdQwrtzPlmnbvcxz")
def test_a_letter_secret_as_an_argument_key_is_not_a_parameter_name(key: str) -> None:
    ev = evidence_with_key(key)
    names = structural_names(ev)
    assert key not in names
    assert not detectors.name_ok(key)
    assert safe_key(key, names) == "<key>"
    assert safe_error_class(key) == "ToolError"
    assert key not in json.dumps(redacted_evidence(ev))
    assert literal_findings(f"a <string> for `{key}` is known", {key}), key  # a name never excuses a secret
    assert "reservation_id" in names  # ordinary parameter names stay structure


@settings(deadline=None)
@given(secret=letter_tokens())
@example(secret="XkcdQwrtzPlmnbvcxz")
def test_a_letter_secret_in_tool_arguments_and_results_never_reaches_the_llm(secret: str) -> None:
    ev = cancel_evidence()
    runs = []
    for run in ev.successes:
        steps = [dict(s) for s in run.steps]
        steps[0] = {
            **steps[0],
            "arguments": {**steps[0]["arguments"], "note": secret, "inner": {"deep": f"code {secret}"}},
            "result": {"status": "ok", secret: 1, "message": f"your code is {secret}", "raw": json.dumps({secret: 2})},
            "error_class": secret,
        }
        runs.append(EvidenceRun(run.id, f"{run.query} {secret}", steps, run.outcome, run.created_at))
    ev = cancel_evidence(successes=runs)
    assert secret in source_literals(ev)  # a copy in a skill fails no_literal_leak
    payload = json.dumps(redacted_evidence(ev))
    assert secret.casefold() not in payload.casefold(), payload
    assert secret not in json.dumps(redact_run(runs[0], frozenset(structural_names(ev))))


# end to end: the stored skill row, its trigger queries and the LLM request -----------------------------------
def _record(sf: Skillflow, user: str, secret: str, key: bool) -> None:
    queries = ["refund my order please", "I want a refund for my order", "refund the order, it arrived broken"]
    for i, query in enumerate(queries * 2):
        refund: dict[str, Any] = {"order_id": f"A{i}9"}
        if key:
            refund[secret] = "x"
        else:
            refund["note"] = f"ref {secret}"
            query = f"{query}, my code is {secret}"
        steps = [
            {
                "tool": "get_order_details",
                "arguments": {"order_id": f"A{i}9"},
                "result": {"ok": True, secret: "x", "message": f"see {secret}"},
            },
            {"tool": "issue_refund", "arguments": refund, "result": {"ok": True}},
        ]
        stored = sf.record_run(query, user, steps, created_at=utcnow() - timedelta(minutes=30 - i))
        assert stored.stored, stored.error


@pytest.mark.parametrize("secret", NAMED)
@pytest.mark.parametrize("key", [True, False], ids=["argument key", "values"])
def test_a_planted_letter_secret_reaches_no_skill_trigger_or_llm_request(
    sqlite_engine: Engine, offline_providers: None, secret: str, key: bool
) -> None:
    cfg = config()
    sf = Skillflow(agent_id="shop", engine=sqlite_engine, config=cfg)
    sf.register_tools(["get_order_details", "issue_refund"], state_changing={"issue_refund": True})
    for user in ("offline", "llm"):
        _record(sf, user, secret, key)
    report = run_partition(sqlite_engine, "shop", "offline", cfg, settings=Settings(embedder="hashing"))
    assert bool(report.promoted) is not key, report.rejected  # a procedure whose own key is a value is refused
    with FakeLLMServer() as srv:
        srv.script(Reply("INSUFFICIENT"))
        run_partition(sqlite_engine, "shop", "llm", cfg, settings=llm_settings(srv))
        bodies = [json.dumps(r.body, ensure_ascii=False) for r in srv.received]
    with sqlite_engine.connect() as conn:
        rows = conn.execute(select(skillbox.c.content, skillbox.c.trigger_queries)).all()
    texts = [row.content for row in rows] + [json.dumps(row.trigger_queries) for row in rows] + bodies
    assert bodies
    for text in texts:
        assert secret.casefold() not in fold(text).casefold()


# how often uniformly random letters are found ---------------------------------------------------------------
# 2 000 tokens of each length, each letter drawn uniformly from a-z and A-Z, on fixed seeds; found there: 97.5 %,
# 98.35 %, 99.55 %, 99.95 % and 100 % (docs/SECURITY.md, "Fixed 2026-12-04").
FOUND_AT_LEAST = {16: 0.97, 20: 0.98, 24: 0.99, 32: 0.999, 48: 1.0}


def _random_tokens(length: int, count: int = 2000) -> Iterator[str]:
    rng = random.Random(20261204 + length)
    for _ in range(count):
        yield "".join(rng.choice(string.ascii_letters) for _ in range(length))


@pytest.mark.parametrize("length", sorted(FOUND_AT_LEAST))
def test_uniformly_random_letter_tokens_are_found(length: int) -> None:
    tokens = list(_random_tokens(length))
    found = sum(any(f.kind == "secret" for f in detectors.findings(t)) for t in tokens) / len(tokens)
    assert found >= FOUND_AT_LEAST[length], (length, found)


# what is not a secret ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDENTIFIERS)
def test_identifiers_and_long_words_are_not_secrets(name: str) -> None:
    assert detectors.name_ok(name), name
    assert detectors.letter_secret_spans(name) == [], name
    assert "<secret>" not in redact_query(f"the {name} field"), name


@pytest.mark.parametrize("text", PROSE)
def test_prose_is_not_a_secret(text: str) -> None:
    assert detectors.letter_secret_spans(text) == []
    assert "<secret>" not in redact_query(text)


# the real corpora: the detector finds nothing in any user message, tool argument or result ------------------
def _walk(value: Any, keys: list[str], values: list[str]) -> None:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, dict):
        for k, v in value.items():
            keys.append(str(k))
            _walk(v, keys, values)
    elif isinstance(value, list):
        for v in value:
            _walk(v, keys, values)
    elif isinstance(value, str):
        values.append(value)


def corpus_texts() -> dict[str, list[str]]:
    """Per corpus: every user message, tool name, argument key and value, result key and value (the texts
    ``redact_query``, ``safe_key`` and the structural-name rule read)."""
    out: dict[str, list[str]] = {}
    tau = CORPORA / "tau-bench" / "gpt-4o-airline.json"
    if tau.exists():
        texts = out.setdefault("tau-bench", [])
        for ep in json.loads(tau.read_text(encoding="utf-8")):
            for m in ep.get("traj") or []:
                if m.get("role") in ("user", "tool"):
                    _walk(str(m.get("content") or ""), texts, texts)
                for call in m.get("tool_calls") or []:
                    texts.append(call["function"]["name"])
                    _walk(call["function"]["arguments"], texts, texts)
    for level in ("level-1-given-desc", "level-2-toolsearcher"):
        for path in sorted((CORPORA / "api-bank" / level).glob("*.jsonl")):
            texts = out.setdefault(f"api-bank {level}", [])
            for line in path.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line) if line.strip() else {}
                if rec.get("role") == "User":
                    texts.append(str(rec.get("text") or ""))
                if rec.get("role") == "API":
                    texts.append(str(rec.get("api_name")))
                    _walk(rec.get("param_dict") or {}, texts, texts)
                    _walk((rec.get("result") or {}).get("output"), texts, texts)
    for path in sorted((CORPORA / "toolbench" / "answer").glob("*/*.json")):
        texts = out.setdefault("toolbench", [])
        rec = json.loads(path.read_text(encoding="utf-8"))
        texts.append(str((rec.get("answer_generation") or {}).get("query") or ""))
        stack = [rec["tree"]["tree"]]
        while stack:
            node = stack.pop()
            stack.extend(node.get("children") or [])
            _walk(node.get("description") or "", texts, texts)
            _walk(node.get("observation") or "", texts, texts)
    return out


@pytest.mark.skipif(not CORPORA.exists(), reason=f"corpora not present at {CORPORA}")
def test_no_corpus_text_holds_a_letter_secret() -> None:
    """The applicability rule's inputs go through ``redact_query``: a finding here would change benchmark
    figures. The detector only adds findings, so none here means every redacted text is unchanged."""
    texts = corpus_texts()
    assert {"tau-bench", "api-bank level-1-given-desc", "api-bank level-2-toolsearcher"} <= set(texts)
    found = {name: [t for t in items if detectors.letter_secret_spans(t)] for name, items in texts.items()}
    assert all(not hits for hits in found.values()), {k: v[:3] for k, v in found.items() if v}
