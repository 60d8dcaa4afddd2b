"""Redaction: literal values of source runs become shapes before anything reaches an LLM, a log or a skill.

``source_literals`` is also the leak check's list: every scalar argument value (nested too) of the
successful and the failed sample runs, plus every literal the detectors find in their queries. Keys and
error classes are mapped to a closed vocabulary or a shape (docs/SECURITY.md, "What is redacted where").
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from skillflow.kernel.canonical import ERROR_KINDS
from skillflow.kernel.models import EvidenceRun
from skillflow.kernel.textnorm import fold_map, strip_controls
from skillflow.promotion import detectors
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.hijack import hijack_findings

MIN_LITERAL_CHARS = 3
# A plain lowercase word is only treated as sensitive from this length on ("cash" no, "economy" yes) —
# except under a credential-like argument key, where every value is a literal.
MIN_PLAIN_WORD_CHARS = 6
MIN_NUMBER_DIGITS = 3
MAX_SHAPE_DEPTH = 4
MAX_SHAPE_KEYS = 24
MAX_KEY_WORDS = 3
MAX_KEY_CHARS = 32
MAX_ERROR_CLASS_WORDS = 4
WITHHELD = "<withheld query>"
WITHHELD_REASON = "<withheld reason>"
MAX_REASON_CHARS = 500
_VERSION_REF = re.compile(r"(?<![\w.])(v\d{1,3}(?:\.\d{1,3})?)(?![\w.])")

_STOP_WORDS_TEXT = (
    "true false none null nil yes no ok okay n/a na unknown default empty other all any both each every "
    "the and for with from into onto this that these those there here what when where which while who why "
    "how not but are was were will would should could can may might must have has had does did done doing "
    "about above after again against before below between during under over through until upon within "
    "without user users agent assistant customer please thanks thank hello help want need like just also "
    "only very more most less some such same than then them they their your yours mine ours ourselves "
    "itself one two three four five six seven eight nine ten first second third last next new old "
    # The offline skill template's own prose: a run value equal to one of these words is not a copy.
    "system policy request result results procedure facts current intent intents partial match known "
    "conversation earlier outcome confirm precondition arguments different "
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_CREDENTIAL_WORDS_TEXT = (
    "username login password passwd passcode passphrase pwd pin token secret otp cvv cvc ssn credential "
    "credentials apikey authorization bearer "
)
_CREDENTIAL_WORDS = frozenset(_CREDENTIAL_WORDS_TEXT.split())
_PLAIN_WORD = re.compile(r"[a-z]+")
_KEY_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_PLACEHOLDER = re.compile(r"<[a-z ]+>")
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+[A-Z][a-z]+)*\b")
# Capitalized words that are not names (sentence openers, pronouns, calendar words).
_NOT_NAMES_TEXT = (
    "i i'm i'd i'll i've hi hello hey dear please thanks thank can could would will may might should my "
    "our the a an this that these those what when where which who why how is are was were do does did "
    "yes no ok okay also and but or so if then there here it its we you your they he she his her them me "
    "us sir madam monday tuesday wednesday thursday friday saturday sunday january february march april "
    "june july august september october november december "
)
_NOT_NAMES = frozenset(_NOT_NAMES_TEXT.split())
_NAME_ENDS = (
    _NOT_NAMES
    | STOP_WORDS
    | frozenset(["at", "on", "in", "to", "of", "by", "as", "not", "now", "today", "tomorrow", "back"])
)
# "my name is jose garcia", "name: ava li", "last name is o'neil-smith": up to three words of letters after the
# cue are the name whatever their case, up to a clause's end or a word that is not one (``and``, ``on`` …).
_NAME_CUE = re.compile(
    r"(?i)\b(?:(?:my|his|her|their|the|your)\s+(?:full\s+|first\s+|last\s+|sur|given\s+)?name\s+(?:is|was)"
    r"|(?:full\s+|first\s+|last\s+|sur)?name\s*[:=])[ \t]+"
    r"(?P<name>[^\W\d_](?:[^\W\d_]|['’-])*(?!\w)(?:[ \t]+[^\W\d_](?:[^\W\d_]|['’-])*(?!\w)){0,2})"
)


# "function name: login", "file name: report": the name of a thing a program has, not a person's.
_THING_NAMES_TEXT = (
    "function tool method file folder directory field column table host key param parameter variable class module "
    "package api endpoint event queue bucket project repo repository branch domain server service model command "
    "attribute property index schema database"
)
_THING_NAMES = frozenset(_THING_NAMES_TEXT.split())
_WORD_BEFORE = re.compile(r"([^\W\d_]+)[ \t]*$")


class RedactionError(RuntimeError):
    """A literal would have left the redaction boundary; nothing is sent."""


def shape_of(value: Any) -> str:
    """A value's shape: ``<string>``, ``<int>``, ``<number>``, ``<bool>``, ``<null>``, ``<id>``, ``<email>``,
    ``<date>``, ``<url>``, ``<phone>``, ``<card>``, ``<secret>``, ``<object>``, ``<list of object>`` … — never
    the value itself."""
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
        found = detectors.findings(text) if text else []
        if len(found) == 1 and found[0].start == 0 and found[0].end == len(text):
            return f"<{found[0].kind}>"
        return "<string>"
    if isinstance(value, Mapping):
        return "<object>"
    if isinstance(value, list | tuple):
        inner = {shape_of(v)[1:-1] for v in value}
        if len(inner) == 1:
            return f"<list of {inner.pop()}>"
        return "<list>"
    return "<value>"


def _words(identifier: str) -> list[str]:
    return [w.lower() for part in identifier.split("_") for w in _KEY_WORDS.findall(part)]


def safe_key(key: Any, names: Iterable[str] = ()) -> str:
    """A key as it may be shown: a structural name (tool or parameter name) as is; otherwise a short plain
    identifier (at most three letter-only words, 32 characters, no instruction-like text, no value a detector
    finds: ``sk_AAAA…``, ``XkcdQwrtzPlmnbvcxz``); else ``<key>``."""
    text = str(key)
    if text in names:
        return text
    words = _words(text)
    plain = re.fullmatch(r"[A-Za-z][A-Za-z_]*", text) is not None and not text.isupper()
    if not plain or len(text) > MAX_KEY_CHARS or not 0 < len(words) <= MAX_KEY_WORDS or not detectors.name_ok(text):
        return "<key>"
    return "<key>" if hijack_findings(" ".join(words)) else text


def structure_of(value: Any, depth: int = 0, names: frozenset[str] = frozenset()) -> Any:
    """Nested shape of a value: objects keep safe keys (:func:`safe_key`), scalars become shapes, lists one
    element."""
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
            out.setdefault(safe_key(k, names), structure_of(v, depth + 1, names))
        return out
    if isinstance(value, list | tuple):
        return [structure_of(value[0], depth + 1, names)] if value else []
    return shape_of(value)


def safe_error_class(cls: Any) -> str:
    """An error class as it may be shown: ``Prefix:kind`` with ``kind`` from the closed vocabulary
    (``canonical.ERROR_KINDS``), or an exception-like identifier of at most four plain words in which no
    detector finds a value; else ``ToolError``. Never the free text a tool or a corpus put there."""
    text = str(cls or "").strip()
    prefix, _, kind = text.partition(":")
    if kind:
        ok = kind in ERROR_KINDS and re.fullmatch(r"[A-Z][A-Za-z]{0,19}", prefix) is not None
        return text if ok else "ToolError"
    text = text.rsplit(".", 1)[-1]
    words = _words(text)
    if not re.fullmatch(r"[A-Za-z][A-Za-z_]{0,39}", text) or not 0 < len(words) <= MAX_ERROR_CLASS_WORDS:
        return "ToolError"
    if not detectors.name_ok(text):  # a secret spelled as an identifier (``sk_AAAA…``, random letters)
        return "ToolError"
    return "ToolError" if hijack_findings(" ".join(words)) else text


def error_class_of(step: Mapping[str, Any]) -> str | None:
    """The error class of a stored step (``ToolError`` when only a message was recorded), made safe."""
    error = step.get("error")
    cls = step.get("error_class")
    if error in (None, "") and not cls:
        return None
    return safe_error_class(cls or "ToolError")


def redact_run(run: EvidenceRun | Mapping[str, Any], names: frozenset[str] = frozenset()) -> dict[str, Any]:
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
                "tool": safe_key(step.get("tool", ""), names),
                "arguments": (
                    {safe_key(k, names): structure_of(v, 1, names) for k, v in args.items()}
                    if isinstance(args, Mapping)
                    else shape_of(args)
                ),
                "error_class": error_class_of(step),
                "result": structure_of(step.get("result"), 0, names),
            }
        )
    return {"outcome": outcome, "steps": out}


def _scalars(value: Any, depth: int = 0, key: str = "") -> Iterable[tuple[str, Any]]:
    if depth > 20:
        return
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _scalars(v, depth + 1, str(k))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _scalars(v, depth + 1, key)
    else:
        yield key, value


def literal_text(value: Any, key: str = "") -> str | None:
    """The text a scalar would leak as, or ``None`` when it is too short or too common to be sensitive.

    Under a credential-like key (``password``, ``username``, ``token`` …) every value of two or more
    characters is a literal, however plain."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        text = format(value, "g") if isinstance(value, float) else str(value)
        digits = sum(ch.isdigit() for ch in text)
        return text.lstrip("-") if digits >= MIN_NUMBER_DIGITS else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if key and _is_credential_key(key) and len(text) >= 2:
        return text
    if len(text) < MIN_LITERAL_CHARS or text.casefold() in STOP_WORDS:
        return None
    if re.fullmatch(r"[-+]?[\d,.]+", text):
        return text if sum(ch.isdigit() for ch in text) >= MIN_NUMBER_DIGITS else None
    if _PLAIN_WORD.fullmatch(text) and len(text) < MIN_PLAIN_WORD_CHARS:
        return None
    return text


def _is_credential_key(key: str) -> bool:
    words = _words(key)
    joined = "".join(words)
    return any(w in _CREDENTIAL_WORDS for w in words) or any(c in joined for c in ("username", "password", "apikey"))


def query_literals(query: str) -> set[str]:
    """Every literal the detectors find in a query (emails, URLs, phones, cards, dates, secrets, ids, numbers
    of three or more digits)."""
    return {
        f.text
        for f in detectors.findings(query or "")
        if f.kind != "number" or sum(ch.isdigit() for ch in f.text) >= MIN_NUMBER_DIGITS
    }


def structural_names(evidence: Evidence) -> set[str]:
    """Tool names and top-level argument key names of the class: structure, not values."""
    names = set(evidence.toolbox)
    for unit in evidence.signature:
        names.add(str(unit.get("tool", "")))
        names.update(str(k) for k in unit.get("arg_keys", []))
    for run in (*evidence.successes, *evidence.failures):
        for step in run.steps:
            names.add(str(step.get("tool", "")))
            if isinstance(step.get("arguments"), Mapping):
                names.update(str(k) for k in step["arguments"])
    return {n for n in names if n in evidence.toolbox or _structural_ok(n)}


def _structural_ok(name: str) -> bool:
    """A run-supplied tool or parameter name counts as structure only when it is identifier-shaped, holds no
    value (:func:`detectors.name_ok`: a secret, card or long number used as a key is still a value) and does
    not read as an instruction (a key is attacker-reachable data too)."""
    ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", name) is not None
    return ok and detectors.name_ok(name) and not hijack_findings(" ".join(_words(name)))


def source_literals(evidence: Evidence) -> set[str]:
    """Every sensitive literal of the evidence: argument scalars (nested) of successes and failures, and
    query literals. Tool names and argument key names are structure, not values, and are left out."""
    structural = {n.casefold() for n in structural_names(evidence)}
    found: set[str] = set()
    for run in (*evidence.successes, *evidence.failures):
        for step in run.steps:
            for key, scalar in _scalars(step.get("arguments")):
                text = literal_text(scalar, key)
                if text is not None:
                    found.add(text)
        found.update(query_literals(run.query or ""))
    return {lit for lit in found if lit.casefold() not in structural and lit.casefold() not in STOP_WORDS}


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
    openers, pronouns and calendar words are never names. The runs are found on the folded text (``José
    García``, ``Zoë``, a Cyrillic ``А`` in ``Аva``, fullwidth letters read as the letters they show) and
    replaced in the text itself.
    """
    if text.isascii():
        view, origin = text, None
    else:
        view, origin = fold_map(text)
    out: list[str] = []
    last = 0
    for start, end in _name_spans(view):
        if origin is not None:
            start, end = origin[start], origin[end - 1] + 1
        out.append(text[last:start])
        out.append("<name>")
        last = end
    out.append(text[last:])
    return "".join(out)


def _letter_case(ch: str) -> str:
    if ch < "\x80" or not ch.isalpha():
        return ch
    return "A" if ch.isupper() else "a"


def _cued_names(view: str) -> list[tuple[int, int]]:
    """The name after each cue (``my name is …``), without the words after it that are not a name's."""
    spans = []
    for m in _NAME_CUE.finditer(view):
        before = _WORD_BEFORE.search(view, max(0, m.start() - 40), m.start())
        if before is not None and before.group(1).lower() in _THING_NAMES:
            continue
        words = m.group("name").split()
        kept = list(itertools.takewhile(lambda w: w.lower() not in _NAME_ENDS, words))
        if kept:
            spans.append((m.start("name"), _end_of(view, m.start("name"), kept)))
    return spans


def _end_of(view: str, start: int, words: list[str]) -> int:
    """Where the ``words`` that begin at ``start`` end (they are separated by spaces or tabs)."""
    end = start
    for word in words:
        end = view.index(word, end) + len(word)
    return end


def _name_spans(view: str) -> list[tuple[int, int]]:
    """The spans of ``view`` (ASCII-folded text) that :func:`_redact_names` replaces."""
    spans: list[tuple[int, int]] = _cued_names(view)
    # Letters folding leaves non-ASCII (Ł, Ż, Ð, Greek and Cyrillic without a Latin look-alike) match as a
    # capital or a small letter by their case; one character each, so the offsets are the view's.
    shape = view if view.isascii() else "".join(_letter_case(ch) for ch in view)
    for m in _CAPITALIZED.finditer(shape):
        run = view[m.start() : m.end()]
        words = run.split()
        k = m.start() - 1
        while k >= 0 and view[k].isspace():  # the character before the run, past whitespace (not a slice)
            k -= 1
        opener = k < 0 or view[k] in ".!?\n\"'(:;"
        if opener and words[0].lower() in _NOT_NAMES:
            if len(words) > 1 and not all(w.lower() in _NOT_NAMES for w in words[1:]):
                spans.append((m.start() + run.index(words[1], len(words[0])), m.end()))  # all but the opener
            continue
        if all(w.lower() in _NOT_NAMES for w in words):
            continue
        if opener and len(words) == 1:
            continue
        spans.append((m.start(), m.end()))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):  # a cued name is often capitalized too: one placeholder for both
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact_query(query: str, literals: Iterable[str] = (), patterns: bool = True) -> str:
    """The query with known literals and (unless ``patterns`` is False) every detector finding (email, URL,
    phone, card, date, credential, id, code, number) and personal name replaced by a placeholder."""
    text = query or ""
    pattern = _literal_pattern(literals)
    if pattern is not None:
        text = pattern.sub(lambda m: shape_of(m.group(0)), text)
    if not patterns:
        return text
    return _redact_names(detectors.scrub(text))


def redact_text(text: str, literals: Iterable[str] = (), patterns: bool = True) -> str:
    """A run-derived text as it may reach an LLM or a log: redacted, and withheld entirely when it reads as
    an instruction to the model (:func:`skillflow.promotion.hijack.hijack_findings`), before or after the
    redaction (which can hide the words that make it one: ``[INST]`` becomes ``[<id>]``, a capitalised noun
    ``<name>``)."""
    redacted = redact_query(text, literals, patterns)
    return WITHHELD if hijack_findings(redacted) or hijack_findings(text or "") else redacted


def clean_reason(text: str | None, max_chars: int = MAX_REASON_CHARS) -> str:
    """An operator's free-text reason (``--reason``, a review note) as it may be stored: NFKC, control and
    invisible characters removed, one line, redacted like a query (withheld whole when it reads as an
    instruction to a model), at most ``max_chars`` characters."""
    # Cut before redacting: the detectors' cost grows with the text, and only max_chars are kept anyway.
    # Version references ("v2", "v1.3") are kept: reasons name them, and the id rule would take them.
    parts = _VERSION_REF.split(strip_controls(text or "")[: 2 * max_chars])
    redacted = "".join(p if i % 2 else redact_query(p) for i, p in enumerate(parts))
    if hijack_findings(redacted):
        return WITHHELD_REASON
    return redacted if len(redacted) <= max_chars else redacted[: max_chars - 1].rstrip() + "…"


def redacted_evidence(evidence: Evidence) -> dict[str, Any]:
    """The only view of a class that is ever sent to an LLM: statistics, signature, shapes, redacted queries.

    Keys are structural names or safe keys, error classes safe classes, queries redacted (or withheld when
    instruction-like). Raises ``RedactionError`` if a source literal would still be present (defence in depth).
    """
    literals = source_literals(evidence)
    names = frozenset(structural_names(evidence))
    stats = evidence.stats

    def run_view(run: EvidenceRun) -> dict[str, Any]:
        return {"query": redact_text(run.query, literals), **redact_run(run, names)}

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
                "tool": safe_key(u.get("tool", ""), names),
                "arg_keys": [safe_key(k, names) for k in u.get("arg_keys", [])],
                "errored": bool(u.get("errored")),
                **({"error_class": error_class_of({"error": "x", **u})} if u.get("errored") else {}),
            }
            for u in evidence.signature
        ],
        "toolbox": sorted(safe_key(t, names) for t in evidence.toolbox),
        "successes": [run_view(r) for r in evidence.successes],
        "failures": [run_view(r) for r in evidence.failures],
        "version": evidence.version,
        "previous_demotion_reason": (
            redact_text(evidence.previous_demotion_reason, literals, patterns=False)
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
