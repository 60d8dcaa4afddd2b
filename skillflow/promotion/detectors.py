"""Literal detectors: which spans of a text are values (email, URL, phone, card, date, secret, id, number).

One list of findings serves both sides of the boundary (docs/SECURITY.md): :func:`scrub` replaces every
finding by its placeholder before a text reaches an LLM, a log or a stored skill, and validation refuses a
skill in which :func:`literal_findings` finds anything at all. Well-kept detectors do the typed work
(``phonenumbers`` for phone numbers, ``python-stdnum`` for Luhn card and IBAN check digits,
``detect-secrets`` for vendor tokens and keyword assignments); the structural rules behind them (no digit,
no mixed letter/digit token, no quoted credential) are the backstop whatever the detectors miss.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]+\s*(?:@|\[at\]|\(at\))\s*[A-Za-z0-9-]+(?:\s*(?:\.|\[dot\]|\(dot\))\s*[A-Za-z0-9-]+)*\s*(?:\.|\[dot\]|\(dot\))\s*[A-Za-z]{2,}"
)
URL = re.compile(r"(?i)\b(?:https?|ftp|file|data|javascript)://[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+")
_TLDS = "com|org|net|io|co|ai|dev|app|info|biz|me|xyz|example|test|invalid|local|gov|edu|us|uk|de|ru|cn|fr|tk|ly"
DOMAIN = re.compile(rf"(?i)\b(?:[a-z0-9-]+\.)+(?:{_TLDS})\b(?:/[^\s<>\"'`]*)?")
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
DATE = re.compile(
    r"(?i)\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b"
    rf"|\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b\.?(?:,?\s+\d{{4}}\b)?"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\s*(?:[ap]\.?m\.?\b)?"
)
CARD_LIKE = re.compile(r"(?<![\w-])\d(?:[ -]?\d){11,18}(?![\w-])")
IBAN_LIKE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
NUMBER = re.compile(r"[-+]?(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?!\w|\.\d)|(?<![\w.])\.\d+(?!\w)")
ID_TOKEN = re.compile(r"(?<![\w<])(?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])[A-Za-z0-9][\w.-]*[A-Za-z0-9](?![\w>])")
HEX_TOKEN = re.compile(r"\b[0-9a-fA-F-]{16,}\b")
CODE_TOKEN = re.compile(r"(?<![\w<])[A-Z]{3,}(?![\w>])")
QUOTED = re.compile(r"(?<!\w)[\"“'‘]([^\"“”'‘’\n]{1,64})[\"”'’](?!\w)")
_CRED_WORDS = (
    r"user\s?name|login|password|pass\s?code|pass\s?phrase|passwd|pwd|pin|token|api[\s_-]?key|secret|otp"
    r"|cvv|cvc|ssn|security\s+code|verification\s+code|credentials?"
)
_CRED_VALUE = r"(?P<value>[\"“'‘][^\"“”'‘’\n]{1,64}[\"”'’]|[^\s\"'<>`“”‘’]+)"
# Queries: "username admin, password hunter2" (no connector needed). Skills: only "password is x" / "pin: x".
CREDENTIAL = re.compile(rf"(?i)\b(?:{_CRED_WORDS})\b(?:\s+(?:is|was|=|:|of|to)\b|\s*[=:])?\s*{_CRED_VALUE}")
CREDENTIAL_STRICT = re.compile(rf"(?i)\b(?:{_CRED_WORDS})\b(?:\s+(?:is|was)\b|\s*[=:])\s*{_CRED_VALUE}")
PLACEHOLDER = re.compile(r"<[a-z][a-z ]*>")
# Upper-case words that are prose, not codes ("When NOT to apply").
_CODE_ALLOW_TEXT = (
    "I OK USA FAQ ASAP PIN NOT AND THE ONLY NEVER ALWAYS MUST DO API JSON URL HTTP ID IDS YAML SKILL "
    "NOTE NONE UTC ISO SQL CLI LLM PDF CSV TODO "
)
CODE_ALLOW = frozenset(_CODE_ALLOW_TEXT.split())
_PLAIN_VALUES_TEXT = (
    "a an the my your his her their our this that it is was be same new old current one it's its none "
    "null value values here there above below provided given known from for with and or of to in on at "
    "by "
)
PLAIN_VALUES = frozenset(_PLAIN_VALUES_TEXT.split())


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int
    text: str


@cache
def _secret_plugins() -> tuple[Any, ...]:
    """detect-secrets' vendor-token and keyword plugins (the entropy plugins flag ordinary words)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    skip = {"Base64 High Entropy String", "Hex High Entropy String"}
    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    return tuple(cls() for name, cls in mapping.items() if name not in skip)


# A vendor-prefixed key with no digit in it (``sk_AAAA…``) that the entropy plugins score too low to report.
_PREFIXED_KEY = re.compile(r"(?<![A-Za-z0-9])(?:sk|pk|rk|ghp|gho|ghs|tok|key|api|xox[abpr])[-_][A-Za-z0-9_-]{16,}")


def _secret_spans(text: str) -> Iterable[tuple[int, int]]:
    for m in _PREFIXED_KEY.finditer(text):
        yield m.start(), m.end()
    offset = 0
    for line in text.split("\n"):
        for plugin in _secret_plugins():
            try:
                found = list(plugin.analyze_line(filename="run.txt", line=line, line_number=1))
            except Exception:  # noqa: BLE001 - a detector failure must not open the boundary; the backstop runs
                continue
            for secret in found:
                value = str(secret.secret_value or "")
                if len(value) < 6:  # some plugins report only a prefix group; the id/number rules cover it
                    continue
                for m in re.finditer(re.escape(value), line):
                    yield offset + m.start(), offset + m.end()
        offset += len(line) + 1


def _phone_spans(text: str) -> Iterable[tuple[int, int]]:
    if not any(ch.isdigit() for ch in text):
        return
    import phonenumbers

    for match in phonenumbers.PhoneNumberMatcher(text, "US"):
        yield match.start, match.end


def _card_kind(digits: str) -> str | None:
    from stdnum import luhn

    return "card" if 13 <= len(digits) <= 19 and luhn.is_valid(digits) else None


def _raw_findings(text: str, strict: bool) -> list[Finding]:
    """Every detector's spans, most specific kind first (overlaps are resolved by :func:`findings`)."""
    from stdnum import iban

    out: list[Finding] = []

    def add(kind: str, spans: Iterable[tuple[int, int]]) -> None:
        out.extend(Finding(kind, s, e, text[s:e]) for s, e in spans if e > s)

    def strip_tail(m: re.Match[str]) -> tuple[int, int]:
        end = m.end()
        while end > m.start() and text[end - 1] in ".,;:!?)]}'\"":
            end -= 1
        return m.start(), end

    add("url", (strip_tail(m) for m in URL.finditer(text)))
    add("email", (m.span() for m in EMAIL.finditer(text)))
    add("url", (strip_tail(m) for m in DOMAIN.finditer(text)))
    add("secret", _secret_spans(text))
    credential = CREDENTIAL_STRICT if strict else CREDENTIAL
    add(
        "secret",
        (_trim(text, *m.span("value")) for m in credential.finditer(text) if not _plain_value(m.group("value"))),
    )
    if not strict:  # a quoted single token in run text is a value ("JohnDoe", 'Tr0ub4dor&3')
        add("string", (m.span(1) for m in QUOTED.finditer(text) if _quoted_value(m.group(1))))
    add("card", (m.span() for m in CARD_LIKE.finditer(text) if _card_kind(re.sub(r"\D", "", m.group(0)))))
    add("account", (m.span() for m in IBAN_LIKE.finditer(text) if iban.is_valid(m.group(0))))
    add("date", (m.span() for m in DATE.finditer(text)))
    add("phone", _phone_spans(text))
    add("id", (m.span() for m in ID_TOKEN.finditer(text)))
    add("id", (m.span() for m in HEX_TOKEN.finditer(text) if any(c.isdigit() for c in m.group(0))))
    add("id", (m.span() for m in CODE_TOKEN.finditer(text) if m.group(0) not in CODE_ALLOW))
    add("number", (m.span() for m in NUMBER.finditer(text)))
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """An unquoted value without the sentence punctuation that follows it ("is hunter2." → "hunter2")."""
    if text[start : start + 1] in "\"“'‘":
        return start, end
    while end > start and text[end - 1] in ".,;:!?)]}":
        end -= 1
    return start, end


def _plain_value(value: str) -> bool:
    inner = value.strip("\"“”'‘’").strip().rstrip(".,;:!?)]}")
    return not inner or inner in PLAIN_VALUES or bool(PLACEHOLDER.fullmatch(inner))


def findings(text: str, strict: bool = False) -> list[Finding]:
    """Non-overlapping findings in text order; an earlier (more specific) detector wins an overlap.

    ``strict`` (the skill check) reads a credential only after "is"/"="/":"; run text is read loosely.
    """
    taken: list[Finding] = []
    for f in _raw_findings(text or "", strict):
        if any(f.start < t.end and t.start < f.end for t in taken):
            continue
        taken.append(f)
    return sorted(taken, key=lambda f: f.start)


def scrub(text: str) -> str:
    """``text`` with every finding replaced by its placeholder (``<email>``, ``<card>``, ``<number>`` …)."""
    out, last = [], 0
    for f in findings(text):
        out.append(text[last : f.start])
        out.append(f"<{f.kind}>")
        last = f.end
    out.append(text[last:])
    return "".join(out)


def _quoted_value(inner: str) -> bool:
    inner = inner.strip()
    return bool(inner) and " " not in inner and not _plain_value(inner) and not re.fullmatch(r"[a-z_-]+", inner)


def quoted_literals(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """Quoted single tokens that are not a placeholder, an allowed (structural) name or a plain value."""
    names = {a.casefold() for a in allowed}
    found = []
    for m in QUOTED.finditer(text):
        inner = m.group(1).strip()
        if _quoted_value(inner) and inner.casefold() not in names:
            found.append(inner)
    return found


def literal_findings(text: str, allowed: Iterable[str] = ()) -> list[Finding]:
    """What a skill may not contain: every finding except placeholders, allowed names (tool and parameter
    names) and numbers of at most two digits (step numbers, "retry 2 times")."""
    names = {a.casefold() for a in allowed}
    masked = PLACEHOLDER.sub(lambda m: " " * len(m.group(0)), text or "")
    out = []
    for f in findings(masked, strict=True):
        if f.text.strip("`").casefold() in names:
            continue
        if f.kind == "number" and (sum(ch.isdigit() for ch in f.text) <= 2 or re.fullmatch(r"[01]?\.\d{1,2}", f.text)):
            continue
        out.append(f)
    out.extend(Finding("quoted", 0, 0, q) for q in quoted_literals(masked, names))
    return out
