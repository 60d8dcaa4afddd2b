"""Redaction: literal values of source runs become shapes before anything reaches an LLM or a skill.

``source_literals`` is also the leak check's list: every scalar argument value (nested too) of the
successful and the failed sample runs, plus id/number/email/date/code literals in their queries.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from skillflow.evidence import Evidence, EvidenceRun

MIN_LITERAL_CHARS = 3
# A plain lowercase word is only treated as sensitive from this length on ("cash" no, "economy" yes).
MIN_PLAIN_WORD_CHARS = 6
MIN_NUMBER_DIGITS = 3
MAX_SHAPE_DEPTH = 4
MAX_SHAPE_KEYS = 24

_STOP_WORDS_TEXT = (
    "true false none null nil yes no ok okay n/a na unknown default empty other all any both each every "
    "the and for with from into onto this that these those there here what when where which while who why "
    "how not but are was were will would should could can may might must have has had does did done doing "
    "about above after again against before below between during under over through until upon within "
    "without user users agent assistant customer please thanks thank hello help want need like just also "
    "only very more most less some such same than then them they their your yours mine ours ourselves "
    "itself one two three four five six seven eight nine ten first second third last next new old "
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?![\w.])")
# Tokens mixing letters and digits (ZFA04Y, mia_li_3668, credit_card_4421486, HAT136) or upper-case codes.
_ID_TOKEN = re.compile(r"(?<![\w<])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{2,}(?![\w>])")
_CODE_TOKEN = re.compile(r"(?<![\w<])[A-Z]{3,}(?![\w>])")
_PLAIN_WORD = re.compile(r"[a-z]+")
_SAFE_KEY = re.compile(r"^[A-Za-z_][A-Za-z_]{0,63}$")
_ERROR_CLASS = re.compile(r"^[A-Za-z_][\w.:-]{0,63}$")
_PLACEHOLDER = re.compile(r"<[a-z ]+>")
_QUERY_CODE_ALLOW = frozenset({"I", "OK", "USA", "FAQ", "ASAP", "PIN"})
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+[A-Z][a-z]+)*\b")
# Capitalized words that are not names (sentence openers, pronouns, calendar words).
_NOT_NAMES = frozenset(
    [
        "i",
        "i'm",
        "i'd",
        "i'll",
        "i've",
        "hi",
        "hello",
        "hey",
        "dear",
        "please",
        "thanks",
        "thank",
        "can",
        "could",
        "would",
        "will",
        "may",
        "might",
        "should",
        "my",
        "our",
        "the",
        "a",
        "an",
        "this",
        "that",
        "these",
        "those",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "how",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "hello",
        "yes",
        "no",
        "ok",
        "okay",
        "also",
        "and",
        "but",
        "or",
        "so",
        "if",
        "then",
        "there",
        "here",
        "it",
        "its",
        "we",
        "you",
        "your",
        "they",
        "he",
        "she",
        "his",
        "her",
        "them",
        "me",
        "us",
        "sir",
        "madam",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)


class RedactionError(RuntimeError):
    """A literal would have left the redaction boundary; nothing is sent."""


def _is_id_like(text: str) -> bool:
    return bool(_ID_TOKEN.fullmatch(text)) or bool(re.fullmatch(r"[0-9a-fA-F-]{16,}", text))


def shape_of(value: Any) -> str:
    """A value's shape: ``<string>``, ``<int>``, ``<number>``, ``<bool>``, ``<null>``, ``<id>``, ``<email>``,
    ``<date>``, ``<object>``, ``<list of object>`` … — never the value itself."""
    if value is None:
        return "<null>"
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int):
        return "<int>"
    if isinstance(value, float):
        return "<number>"
    if isinstance(value, str):
        text = value.strip()
        if _EMAIL.fullmatch(text):
            return "<email>"
        if _DATE.fullmatch(text):
            return "<date>"
        if _NUMBER.fullmatch(text):
            return "<number>"
        if _is_id_like(text) or _CODE_TOKEN.fullmatch(text):
            return "<id>"
        return "<string>"
    if isinstance(value, Mapping):
        return "<object>"
    if isinstance(value, list | tuple):
        inner = {shape_of(v)[1:-1] for v in value}
        if len(inner) == 1:
            return f"<list of {inner.pop()}>"
        return "<list>"
    return "<value>"


def _safe_key(key: Any) -> str:
    text = str(key)
    return text if _SAFE_KEY.match(text) and not text.isupper() else "<key>"


def structure_of(value: Any, depth: int = 0) -> Any:
    """Nested shape of a value: objects keep identifier-like keys, scalars become shapes, lists one element."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except ValueError:
            return "<string>"
    if depth >= MAX_SHAPE_DEPTH:
        return shape_of(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_SHAPE_KEYS:
                out["…"] = f"<{len(value) - MAX_SHAPE_KEYS} more keys>"
                break
            out.setdefault(_safe_key(k), structure_of(v, depth + 1))
        return out
    if isinstance(value, list | tuple):
        return [structure_of(value[0], depth + 1)] if value else []
    return shape_of(value)


def error_class_of(step: Mapping[str, Any]) -> str | None:
    """The error class of a stored step (``ToolError`` when only a message was recorded), sanitized."""
    error = step.get("error")
    cls = step.get("error_class")
    if error in (None, "") and not cls:
        return None
    text = str(cls or "ToolError")
    return text if _ERROR_CLASS.match(text) else "ToolError"


def redact_run(run: EvidenceRun | Mapping[str, Any]) -> dict[str, Any]:
    """Tool, argument shapes, error class and result shape of every step; outcome. Never a value."""
    steps = run.steps if isinstance(run, EvidenceRun) else run.get("steps", [])
    outcome = run.outcome if isinstance(run, EvidenceRun) else run.get("outcome")
    out = []
    for step in steps or []:
        if not isinstance(step, Mapping):
            continue
        args = step.get("arguments")
        out.append(
            {
                "tool": str(step.get("tool", "")),
                "arguments": (
                    {str(k): structure_of(v, 1) for k, v in args.items()}
                    if isinstance(args, Mapping)
                    else shape_of(args)
                ),
                "error_class": error_class_of(step),
                "result": structure_of(step.get("result")),
            }
        )
    return {"outcome": outcome, "steps": out}


def _scalars(value: Any, depth: int = 0) -> Iterable[Any]:
    if depth > 20:
        return
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _scalars(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _scalars(v, depth + 1)
    else:
        yield value


def literal_text(value: Any) -> str | None:
    """The text a scalar would leak as, or ``None`` when it is too short or too common to be sensitive."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        text = format(value, "g") if isinstance(value, float) else str(value)
        digits = sum(ch.isdigit() for ch in text)
        return text.lstrip("-") if digits >= MIN_NUMBER_DIGITS else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if len(text) < MIN_LITERAL_CHARS or text.casefold() in STOP_WORDS:
        return None
    if _NUMBER.fullmatch(text):
        return text if sum(ch.isdigit() for ch in text) >= MIN_NUMBER_DIGITS else None
    if _PLAIN_WORD.fullmatch(text) and len(text) < MIN_PLAIN_WORD_CHARS:
        return None
    return text


def query_literals(query: str) -> set[str]:
    """Emails, dates, numbers (≥ 3 digits), ids and upper-case codes written in a query."""
    found: set[str] = set()
    for pattern in (_EMAIL, _DATE, _ID_TOKEN):
        found.update(m.group(0) for m in pattern.finditer(query))
    found.update(m.group(0) for m in _CODE_TOKEN.finditer(query) if m.group(0) not in _QUERY_CODE_ALLOW)
    for m in _NUMBER.finditer(query):
        if sum(ch.isdigit() for ch in m.group(0)) >= MIN_NUMBER_DIGITS:
            found.add(m.group(0))
    return found


def _structural_names(evidence: Evidence) -> set[str]:
    names = {t.casefold() for t in evidence.toolbox}
    for unit in evidence.signature:
        names.add(str(unit.get("tool", "")).casefold())
        names.update(str(k).casefold() for k in unit.get("arg_keys", []))
    for run in (*evidence.successes, *evidence.failures):
        for step in run.steps:
            names.add(str(step.get("tool", "")).casefold())
            if isinstance(step.get("arguments"), Mapping):
                names.update(str(k).casefold() for k in step["arguments"])
    return names


def source_literals(evidence: Evidence) -> set[str]:
    """Every sensitive literal of the evidence: argument scalars (nested) of successes and failures, and
    query literals. Tool names and argument key names are structure, not values, and are left out."""
    structural = _structural_names(evidence)
    found: set[str] = set()
    for run in (*evidence.successes, *evidence.failures):
        for step in run.steps:
            for scalar in _scalars(step.get("arguments")):
                text = literal_text(scalar)
                if text is not None:
                    found.add(text)
        found.update(query_literals(run.query or ""))
    return {lit for lit in found if lit.casefold() not in structural}


def _literal_pattern(literals: Iterable[str]) -> re.Pattern[str] | None:
    ordered = sorted({lit for lit in literals if lit}, key=len, reverse=True)
    if not ordered:
        return None
    alternation = "|".join(re.escape(lit) for lit in ordered)
    return re.compile(rf"(?<![A-Za-z0-9])(?:{alternation})(?![A-Za-z0-9])", re.IGNORECASE)


def find_literals(text: str, literals: Iterable[str]) -> list[str]:
    """The literals that occur in ``text`` (case-insensitive, on alphanumeric boundaries)."""
    pattern = _literal_pattern(literals)
    if pattern is None:
        return []
    return sorted({m.group(0) for m in pattern.finditer(text)})


def _redact_names(text: str) -> str:
    """Replace capitalized runs that look like personal names (``Ava Li``) by ``<name>``.

    A capitalized word opening a sentence is kept unless another capitalized word follows it; known
    openers, pronouns and calendar words are never names.
    """

    def replace(m: re.Match[str]) -> str:
        words = m.group(0).split()
        start = m.start()
        before = text[:start].rstrip()
        opener = not before or before[-1] in ".!?\n\"'(:;"
        if opener and words[0].lower() in _NOT_NAMES:
            rest = m.group(0)[len(words[0]) :]
            return words[0] + (_redact_names_tail(rest) if rest.strip() else rest)
        if all(w.lower() in _NOT_NAMES for w in words):
            return m.group(0)
        if opener and len(words) == 1:
            return m.group(0)
        return "<name>"

    return _CAPITALIZED.sub(replace, text)


def _redact_names_tail(rest: str) -> str:
    lead = rest[: len(rest) - len(rest.lstrip())]
    words = rest.split()
    return lead + ("<name>" if not all(w.lower() in _NOT_NAMES for w in words) else " ".join(words))


def redact_query(query: str, literals: Iterable[str] = (), patterns: bool = True) -> str:
    """The query with known literals and (unless ``patterns`` is False) id/number/email/date/code patterns
    replaced by placeholders."""
    text = query or ""
    pattern = _literal_pattern(literals)
    if pattern is not None:
        text = pattern.sub(lambda m: shape_of(m.group(0)), text)
    if not patterns:
        return text
    text = _EMAIL.sub("<email>", text)
    text = _DATE.sub("<date>", text)
    text = _redact_names(text)
    text = _ID_TOKEN.sub("<id>", text)
    text = _CODE_TOKEN.sub(lambda m: m.group(0) if m.group(0) in _QUERY_CODE_ALLOW else "<id>", text)
    return _NUMBER.sub("<number>", text)


def redacted_evidence(evidence: Evidence) -> dict[str, Any]:
    """The only view of a class that is ever sent to an LLM: statistics, signature, shapes, redacted queries.

    Raises ``RedactionError`` if a source literal would still be present (defence in depth).
    """
    literals = source_literals(evidence)
    stats = evidence.stats

    def run_view(run: EvidenceRun) -> dict[str, Any]:
        return {"query": redact_query(run.query, literals), **redact_run(run)}

    payload = {
        "class": {
            "canonical_hash": stats.canonical_hash,
            "executions": stats.executions,
            "successes": stats.successes,
            "failures": stats.failures,
            "success_rate": round(stats.success_rate, 4),
            "distinct_queries": stats.distinct_queries,
        },
        "signature": [
            {
                "tool": str(u.get("tool", "")),
                "arg_keys": [str(k) for k in u.get("arg_keys", [])],
                "errored": bool(u.get("errored")),
                **({"error_class": error_class_of({"error": "x", **u})} if u.get("errored") else {}),
            }
            for u in evidence.signature
        ],
        "toolbox": sorted(evidence.toolbox),
        "successes": [run_view(r) for r in evidence.successes],
        "failures": [run_view(r) for r in evidence.failures],
        "version": evidence.version,
        "previous_demotion_reason": (
            redact_query(evidence.previous_demotion_reason, literals, patterns=False)
            if evidence.previous_demotion_reason
            else None
        ),
    }
    leaked = find_literals(json.dumps(payload, ensure_ascii=False), literals)
    if leaked:
        raise RedactionError(f"{len(leaked)} literal value(s) survived redaction")
    return payload


def placeholders(text: str) -> list[str]:
    """The ``<shape>`` placeholders in a text, in order."""
    return _PLACEHOLDER.findall(text)
