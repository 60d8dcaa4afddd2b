"""The validation gate: every machine check of docs/design.md, Promotion, then a fail-closed judge.

Check names (``ValidationResult.checks`` keys) and reason strings are stable; reasons never quote a
source value. Beyond the source-literal leak check, ``no_literal`` refuses ANY literal (email, URL, phone,
card, date, id, secret, number of three or more digits, quoted credential) wherever it came from, and
``no_injection`` refuses a skill that tells the agent to contact an outside party, call a tool outside the
class's sequence, ignore its instructions or change its role, or carries hidden characters, an HTML comment or
markup that renders as nothing (docs/SECURITY.md).
The checks read the canonical text (``skillmd.canonical_skill_md``: frontmatter comments dropped) through
``kernel.textnorm.fold``, and that text is what a passing result hands back to be stored. The judge only
runs when every machine check passed, so a leaking or malformed skill is never sent to an LLM judge.
``TransientLLMError`` from an LLM judge propagates (the task retries it); any other judge error rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from skillflow.kernel.canonical import CLASS_KEY
from skillflow.kernel.textnorm import fold, hidden_kinds, readings, strip_controls
from skillflow.promotion.detectors import Finding, literal_findings
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.hijack import hijack_findings
from skillflow.promotion.judge import Judge
from skillflow.promotion.redact import WITHHELD_REASON, find_literals, shape_of, source_literals, structural_names
from skillflow.promotion.skillmd import (
    PRECONDITION_KEY,
    ParsedSkill,
    SkillMdError,
    canonical_parse,
    shown_name,
    tool_mentions,
)

TOOL_DUMP_RATIO = 0.5
_CALL = re.compile(r"(?<![\w.`])([A-Za-z_][A-Za-z0-9_]*)\((?!s\))")
_BACKTICKED_CALL = re.compile(r"\b(?:call|calls|calling|invoke|invoking|run|use|using)\s+`([^`\s]+)`", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.:-]*)`")
_TOKEN = re.compile(r"[A-Za-z0-9_]+")
_WHEN_NOT = re.compile(r"when\s+not\s+to\s+apply", re.IGNORECASE)
_DIGIT_MARK = re.compile(r"(?<=\d)[*_~`](?=\d)")
# An HTML comment renders as nothing (a review page, an editor's preview, a repository's SKILL.md) while the model
# reads it: text hidden from a reviewer, as hidden characters are (docs/SECURITY.md).
_HTML_COMMENT = re.compile(r"<!--|--!?>")
# Markup that renders as nothing, or folds its text away, while the model reads it (docs/SECURITY.md, "Attacks
# tried"): a link reference definition (``[//]: # (…)``, ``[comment]: <> (…)``; also inside a list item or a block
# quote, and a footnote definition) is never displayed; a processing instruction, declaration or CDATA section is
# a comment to a browser; and the elements below hide or fold their content (``<object>`` bare is the offline
# distiller's shape, only one with attributes counts). Any tag with a ``hidden`` or ``style`` attribute, or an
# attribute with a value (a ``title``, ``alt``, ``data-*`` text is not shown as text), hides what it carries.
# Placeholders (``<reservation_id>``, ``<user id>``, ``<object>``) have neither.
_HIDING_ELEMENTS = (
    "applet|audio|canvas|datalist|details|dialog|iframe|noembed|noframes|noscript|plaintext|script|select|style"
    "|svg|template|textarea|title|video|xmp"
)
_HIDDEN_MARKUP = re.compile(
    # a link reference definition: a destination alone, or before a title ("…", '…', (…), maybe continued on the
    # next lines), or nothing yet (the destination on the next line); "[Step 1]: call the tool" is text
    r"^(?:[ \t]*(?:>|[-+*]|\d{1,9}[.)]))*[ \t]*\[(?:[^\[\]\\]|\\.){1,999}\]:"
    r"[ \t]*(?:(?:<[^<>\n]*>|[^\s<]\S*)[ \t]*(?:[\"'(][^\n]*)?)?$"
    r"|^(?:[ \t]*(?:>|[-+*]|\d{1,9}[.)]))*[ \t]*\[\^[^\]\n]{1,999}\]:"  # a footnote (shown only where referenced)
    r"|<[?]|<![A-Za-z\[]"  # processing instruction, declaration, CDATA
    rf"|</?(?:{_HIDING_ELEMENTS})(?=[\s/>]|$)"  # an HTML block needs no ">" on its first line
    # a tag's attributes (the look-ahead first finds its ">", so a tag that never closes is read once)
    r"|<[A-Za-z][^\s/<>]*(?=[^<>]*>)\s[^<>]*?(?<=\s)(?:hidden|style)(?=[\s=/>])"
    r"|<[A-Za-z][A-Za-z0-9-]*(?=[^<>]*>)\s[^<>]*?(?<=\s)[A-Za-z_:][\w.:-]*\s*=",
    re.IGNORECASE | re.MULTILINE,
)
_JOINED_KINDS = frozenset({"card", "account", "phone"})
CHECKS = (
    "size",
    "frontmatter",
    "required_fields",
    "sections",
    "tools_resolve",
    "no_undeclared_tools",
    "description_intent",
    "no_literal_leak",
    "no_literal",
    "no_injection",
    "judge",
)
# Metadata the pipeline itself stamps (distill.provenance); every other field is model-written text. A
# provenance value is exempt from the literal check only in its stamped format (imported and edited text
# can carry any value under these keys): otherwise it is checked like model-written text.
PROVENANCE_KEYS = frozenset({"source", "version", "canonical-hash", "distiller", "prompt-version"})
_PROVENANCE_FORMAT = {
    "source": re.compile(r"learned|imported"),
    "version": re.compile(r"[1-9][0-9]{0,3}"),
    "canonical-hash": re.compile(CLASS_KEY),
    "distiller": re.compile(r"[a-z][a-z0-9-]{0,31}(?::[A-Za-z0-9][A-Za-z0-9._:/-]{0,79})?"),
}
_STAMPED_LITERAL_KINDS = frozenset({"id", "number"})


@cache
def prompt_versions() -> frozenset[str]:
    """The prompt versions this pipeline stamps: the offline distiller's and each shipped prompt's (its file stem,
    ``_`` read as ``-``). A ``prompt-version`` is stamped only when it is one of them: the open format it had let
    an identifier such as a customer id through as a "version" (docs/SECURITY.md, "Attacks tried")."""
    from importlib import resources

    from skillflow.promotion.distill import OFFLINE_PROMPT_VERSION
    from skillflow.promotion.llm import prompt_version

    shipped = resources.files("skillflow.promotion.prompts").iterdir()  # as the LLM backends read them
    return frozenset(
        {OFFLINE_PROMPT_VERSION, *(prompt_version(p.name[:-3]) for p in shipped if p.name.endswith(".md"))}
    )


def later_prompt_version(value: str) -> bool:
    """Whether ``value`` is another version (1–99) of a prompt this pipeline has (``distill-v7``): what a skill
    exported by a newer release carries. The name is one of the shipped ones and the number at most two digits,
    so the format leaves no room for an identifier, a word or an instruction (docs/SECURITY.md)."""
    names = {v.rsplit("-v", 1)[0] for v in prompt_versions()}
    name, sep, number = value.rpartition("-v")
    return bool(sep) and name in names and re.fullmatch(r"[1-9][0-9]?", number) is not None


MAX_JUDGE_REASON_CHARS = 300


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    reasons: list[str]
    checks: dict[str, bool] = field(default_factory=dict)
    parsed: ParsedSkill | None = None
    content: str | None = None  # the canonical text every check read: the only form that may be stored


_IDENTIFIER_LIKE = re.compile(r"[_\-.\d]|[a-z][A-Z]")


def undeclared_tools(parsed: ParsedSkill, known_tools: set[str]) -> list[str]:
    """Tools the body references but ``allowed-tools`` does not declare.

    A reference is any bare mention of an identifier-like known tool name (``lookup_order``), any backticked
    known tool name, any backticked name after a verb such as "call"/"use", and any ``identifier(`` call. A
    tool named by a plain word (``think``, ``search``) counts only backticked or called: a redacted request
    saying "I think" references no tool.
    """
    declared = set(parsed.allowed_tools)
    bare = {t for t in tool_mentions(parsed.body, known_tools - declared) if _IDENTIFIER_LIKE.search(t)}
    found: set[str] = bare
    found.update(m.group(1) for m in _BACKTICKED_CALL.finditer(parsed.body) if m.group(1) not in declared)
    found.update(m.group(1) for m in _CALL.finditer(parsed.body) if m.group(1) not in declared)
    found.update(m.group(1) for m in _BACKTICKED.finditer(parsed.body) if m.group(1) in known_tools - declared)
    return sorted(found)


def tool_dump_ratio(description: str, tools: set[str]) -> float:
    """Share of the description's word tokens that are tool names."""
    tokens = _TOKEN.findall(description)
    if not tokens:
        return 1.0
    lowered = {t.casefold() for t in tools}
    return sum(tok.casefold() in lowered for tok in tokens) / len(tokens)


def _foreign_fields(parsed: ParsedSkill) -> int:
    """Frontmatter a distilled skill has no business holding: metadata other than its preconditions and
    provenance, a licence or a compatibility note. A model writes them only to claim something (``status: active``,
    ``reviewed-by: security-team``, ``injection-role: developer``), which the reviewer is shown and the agent reads
    with the skill (docs/SECURITY.md)."""
    extra = [k for k in parsed.metadata if k not in PROVENANCE_KEYS and not PRECONDITION_KEY.match(k)]
    return len(extra) + bool(parsed.license) + bool(parsed.compatibility)


def _machine_checks(
    skill_md: str, evidence: Evidence, max_chars: int, learned: bool = False
) -> tuple[dict[str, bool], list[str], ParsedSkill | None, str | None]:
    checks: dict[str, bool] = {}
    reasons: list[str] = []

    def check(name: str, ok: bool, reason: str) -> None:
        checks[name] = ok
        if not ok:
            reasons.append(reason)

    check("size", len(skill_md) <= max_chars, f"content {len(skill_md)} chars > {max_chars}")
    if not checks["size"]:  # parsing a huge text is the cost an oversized input is after
        return checks, reasons, None, None
    try:
        canonical, parsed = canonical_parse(skill_md)
    except SkillMdError as exc:
        check("frontmatter", False, f"frontmatter: {exc}")
        return checks, reasons, None, None
    foreign = _foreign_fields(parsed) if learned else 0
    check(
        "frontmatter",
        not foreign,
        "frontmatter: a distilled skill's metadata holds its preconditions and provenance only "
        f"({foreign} other key{'s' if foreign > 1 else ''})",
    )
    missing = [
        label
        for label, value in (
            ("name", parsed.name),
            ("description", parsed.description),
            ("preconditions", parsed.preconditions),
        )
        if not value
    ]
    check("required_fields", not missing, f"missing {', '.join(missing)}")
    section_problems = [f"section '{s}'" for s in ("When to apply", "Procedure") if not parsed.sections.get(s)]
    if not _WHEN_NOT.search(parsed.body):
        section_problems.append("a 'When NOT to apply' line")
    check("sections", not section_problems, f"missing {', '.join(section_problems)}")
    toolbox = set(evidence.toolbox)
    if not toolbox:
        check("tools_resolve", False, "no toolbox registered for this agent")
    elif not parsed.allowed_tools:
        check("tools_resolve", False, "no tools declared in allowed-tools")
    else:
        unresolved = sorted(set(parsed.allowed_tools) - toolbox)
        shown = ", ".join(sorted({shown_name(t) for t in unresolved}))
        check("tools_resolve", not unresolved, f"declared tools not in toolbox: {shown}")
    known = toolbox | {str(u.get("tool")) for u in evidence.signature}
    undeclared = undeclared_tools(parsed, known)
    shown = ", ".join(sorted({shown_name(t) for t in undeclared})[:10])
    check("no_undeclared_tools", not undeclared, f"undeclared tools referenced: {shown}")
    ratio = tool_dump_ratio(parsed.description, known | set(parsed.allowed_tools))
    check(
        "description_intent",
        ratio <= TOOL_DUMP_RATIO,
        f"description is a tool-name dump ({ratio:.0%} tool-name tokens)",
    )
    literals = source_literals(evidence)
    leaked = set(find_literals(canonical, literals)) | set(find_literals(fold(canonical), literals))
    kinds = ", ".join(sorted({shape_of(v) for v in leaked}))
    check("no_literal_leak", not leaked, f"leaked {len(leaked)} literal value(s) from source runs ({kinds})")
    text = fold(skill_text(parsed, evidence.stats.canonical_hash))
    found = _literals(text, structural_names(evidence))
    found_kinds = ", ".join(sorted({f.kind for f in found}))
    check("no_literal", not found, f"contains {len(found)} literal(s) ({found_kinds}); only shapes are allowed")
    sequence = class_tools(evidence)
    outside = sorted(set(parsed.allowed_tools) - sequence)
    hidden = _hidden(skill_md + canonical)
    hijack = hijack_findings(text, sequence) + (["outside-tool"] if outside else []) + hidden
    check("no_injection", not hijack, f"instruction hijack ({', '.join(sorted(set(hijack)))})")
    return checks, reasons, parsed, canonical


def _hidden(text: str) -> list[str]:
    """``no_injection``'s kinds of text a reader does not see: hidden characters (``hidden-<kind>``), an HTML
    comment (``hidden-comment``), and markup that renders as nothing or folds its text away (``hidden-markup``:
    see ``_HIDDEN_MARKUP``). Read over the whole text, code spans and fences too: nothing a procedure needs."""
    comment = ["hidden-comment"] if _HTML_COMMENT.search(text) else []
    markup = ["hidden-markup"] if _HIDDEN_MARKUP.search(text) else []
    return [f"hidden-{kind}" for kind in hidden_kinds(text)] + comment + markup


def _literals(text: str, names: set[str]) -> list[Finding]:
    """``literal_findings`` of the folded text and of its other readings: spaced out (``4 1 1 1 …``), markup
    inside words or a word broken across lines (``4**1**11``, ``CUST88\n213ZK``); and, with every single mark
    between digits removed (``4*11*1``, ``4_11_1``), the cards, bank accounts and phone numbers only (``25*3``
    and ``1*2*4*8`` stay arithmetic)."""
    out = [f for form in readings(text) for f in literal_findings(form, names)]
    joined = _DIGIT_MARK.sub("", text)
    if joined != text:
        out.extend(f for f in literal_findings(joined, names) if f.kind in _JOINED_KINDS)
    return out


def class_tools(evidence: Evidence) -> set[str]:
    """The tools the class's runs call (signature units and every sampled step, no-op tools included)."""
    tools = {str(u.get("tool", "")) for u in evidence.signature}
    for run in (*evidence.successes, *evidence.failures):
        tools.update(str(step.get("tool", "")) for step in run.steps)
    return {t for t in tools if t}


def stamped(key: str, value: str, canonical_hash: str | None = None) -> bool:
    """Whether a provenance value is in the format the pipeline stamps it (then it is not model text):
    the class's own hash, or a closed format that reads as neither an instruction nor a literal other
    than an identifier."""
    if key == "canonical-hash" and canonical_hash and value == canonical_hash:
        return True
    if key == "prompt-version":
        return value in prompt_versions() or later_prompt_version(value)
    fmt = _PROVENANCE_FORMAT.get(key)
    if fmt is None or not fmt.fullmatch(value):
        return False
    if key in ("source", "version"):  # closed formats: no room for a word or a literal
        return True
    if hijack_findings(re.sub(r"[-_.:/]+", " ", value)):
        return False
    return all(f.kind in _STAMPED_LITERAL_KINDS for f in literal_findings(value))


def landed_base(name: str, canonical_hash: str | None) -> str:
    """``name`` without the suffix landing gives a taken name: ``-`` and the first 6, 12 or 24 characters of the
    skill's own class hash (:func:`skillflow.promotion.landing.unique_name`). That suffix is the pipeline's, never a
    run's value; any other id-shaped part of a name is read as written."""
    if canonical_hash and re.fullmatch(r"[0-9a-f]{64}", canonical_hash):
        for n in (24, 12, 6):
            suffix = "-" + canonical_hash[:n]
            if name.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)]
    return name


def skill_text(parsed: ParsedSkill, canonical_hash: str | None = None) -> str:
    """Every model-written field of a skill, one per line: name, description, license, compatibility,
    metadata keys and values (preconditions included; provenance values in their stamped format
    excluded, see :func:`stamped`) and the body. The name is read without its landing suffix
    (:func:`landed_base`), wherever the text repeats it."""
    meta = [
        v if re.fullmatch(r"precondition-\d+", k) else f"{k}: {v}"
        for k, v in parsed.metadata.items()
        if not (k in PROVENANCE_KEYS and stamped(k, v, canonical_hash))
    ]
    fields = [parsed.name, parsed.description, parsed.license or "", parsed.compatibility or "", *meta, parsed.body]
    text = "\n".join(f for f in fields if f)
    base = landed_base(parsed.name, canonical_hash)
    return text if base == parsed.name else text.replace(parsed.name, base)


def validate_skill(
    skill_md: str, evidence: Evidence, judge: Judge, max_chars: int, *, learned: bool = False
) -> ValidationResult:
    """Run every mandatory check; the judge runs (and must approve) only when all machine checks pass.

    ``learned``: a distiller's answer, whose frontmatter may hold nothing but the skill's name, description, tools,
    preconditions and provenance (an imported or edited skill is a person's, and may carry other metadata)."""
    checks, reasons, parsed, canonical = _machine_checks(skill_md, evidence, max_chars, learned)
    if reasons or canonical is None:
        return ValidationResult(False, reasons, checks, parsed)
    from skillflow.promotion.llm import TransientLLMError

    try:
        verdict = judge.judge(canonical, evidence)
    except TransientLLMError:
        raise
    except Exception as exc:  # noqa: BLE001 - fail-closed: any judge error is a rejection with its type
        checks["judge"] = False
        return ValidationResult(False, [f"judge: error ({type(exc).__name__})"], checks, parsed)
    checks["judge"] = verdict.approve
    if not verdict.approve:
        names = structural_names(evidence)
        shown = [judge_reason(r, names) for r in verdict.reasons]
        return ValidationResult(False, shown or ["judge: rejected"], checks, parsed)
    return ValidationResult(True, [], checks, parsed, canonical)


def judge_reason(reason: str, names: set[str]) -> str:
    """A judge's reason as it may be stored: one line, capped, withheld when it quotes a literal or an
    instruction (an LLM judge has read the skill and may repeat it)."""
    text = strip_controls(reason)
    if hijack_findings(text) or literal_findings(text.removeprefix("judge:"), names):
        return f"judge: {WITHHELD_REASON}"
    return text if len(text) <= MAX_JUDGE_REASON_CHARS else text[: MAX_JUDGE_REASON_CHARS - 1] + "…"


def text_problems(content: str, tools: set[str], names: set[str], canonical_hash: str | None = None) -> list[str]:
    """The literal and injection checks alone over a stored text (a version a rollback would reinstate):
    reasons, empty when it passes. Never quotes the text."""
    try:
        canonical, parsed = canonical_parse(content)
    except SkillMdError as exc:
        return [f"frontmatter: {exc}"]
    text = fold(skill_text(parsed, canonical_hash))
    problems: list[str] = []
    if canonical != content:  # frontmatter comments, tags or escapes: text no check has read
        problems.append("frontmatter not in canonical form")
    found = _literals(text, names)
    if found:
        problems.append(f"contains {len(found)} literal(s) ({', '.join(sorted({f.kind for f in found}))})")
    hijack = hijack_findings(text, tools) + _hidden(content)
    if hijack:
        problems.append(f"instruction hijack ({', '.join(sorted(set(hijack)))})")
    return problems
