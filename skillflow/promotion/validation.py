"""The validation gate: every machine check of docs/design.md, Promotion, then a fail-closed judge.

Check names (``ValidationResult.checks`` keys) and reason strings are stable; reasons never quote a
source value. Beyond the source-literal leak check, ``no_literal`` refuses ANY literal (email, URL, phone,
card, date, id, secret, number of three or more digits, quoted credential) wherever it came from, and
``no_injection`` refuses a skill that tells the agent to contact an outside party, call a tool outside the
class's sequence, ignore its instructions or change its role (docs/SECURITY.md). The judge only runs when
every machine check passed, so a leaking or malformed skill is never sent to an LLM judge.
``TransientLLMError`` from an LLM judge propagates (the task retries it); any other judge error rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.hijack import hijack_findings
from skillflow.promotion.judge import Judge
from skillflow.promotion.redact import find_literals, shape_of, source_literals, structural_names
from skillflow.promotion.skillmd import ParsedSkill, SkillMdError, parse_skill_md, tool_mentions

TOOL_DUMP_RATIO = 0.5
_CALL = re.compile(r"(?<![\w.`])([A-Za-z_][A-Za-z0-9_]*)\((?!s\))")
_BACKTICKED_CALL = re.compile(r"\b(?:call|calls|calling|invoke|invoking|run|use|using)\s+`([^`\s]+)`", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.:-]*)`")
_TOKEN = re.compile(r"[A-Za-z0-9_]+")
_WHEN_NOT = re.compile(r"when\s+not\s+to\s+apply", re.IGNORECASE)
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
# Metadata the pipeline itself stamps (distill.provenance); every other field is model-written text.
PROVENANCE_KEYS = frozenset({"source", "version", "canonical-hash", "distiller", "prompt-version"})


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    reasons: list[str]
    checks: dict[str, bool] = field(default_factory=dict)
    parsed: ParsedSkill | None = None


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


def _machine_checks(
    skill_md: str, evidence: Evidence, max_chars: int
) -> tuple[dict[str, bool], list[str], ParsedSkill | None]:
    checks: dict[str, bool] = {}
    reasons: list[str] = []

    def check(name: str, ok: bool, reason: str) -> None:
        checks[name] = ok
        if not ok:
            reasons.append(reason)

    check("size", len(skill_md) <= max_chars, f"content {len(skill_md)} chars > {max_chars}")
    try:
        parsed = parse_skill_md(skill_md)
    except SkillMdError as exc:
        check("frontmatter", False, f"frontmatter: {exc}")
        return checks, reasons, None
    checks["frontmatter"] = True
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
        check("tools_resolve", not unresolved, f"declared tools not in toolbox: {', '.join(unresolved)}")
    known = toolbox | {str(u.get("tool")) for u in evidence.signature}
    undeclared = undeclared_tools(parsed, known)
    check("no_undeclared_tools", not undeclared, f"undeclared tools referenced: {', '.join(undeclared[:10])}")
    ratio = tool_dump_ratio(parsed.description, known | set(parsed.allowed_tools))
    check(
        "description_intent",
        ratio <= TOOL_DUMP_RATIO,
        f"description is a tool-name dump ({ratio:.0%} tool-name tokens)",
    )
    leaked = find_literals(skill_md, source_literals(evidence))
    kinds = ", ".join(sorted({shape_of(v) for v in leaked}))
    check("no_literal_leak", not leaked, f"leaked {len(leaked)} literal value(s) from source runs ({kinds})")
    text = skill_text(parsed)
    found = literal_findings(text, structural_names(evidence))
    found_kinds = ", ".join(sorted({f.kind for f in found}))
    check("no_literal", not found, f"contains {len(found)} literal(s) ({found_kinds}); only shapes are allowed")
    sequence = class_tools(evidence)
    outside = sorted(set(parsed.allowed_tools) - sequence)
    hijack = hijack_findings(text, sequence) + (["outside-tool"] if outside else [])
    check("no_injection", not hijack, f"instruction hijack ({', '.join(sorted(set(hijack)))})")
    return checks, reasons, parsed


def class_tools(evidence: Evidence) -> set[str]:
    """The tools the class's runs call (signature units and every sampled step, no-op tools included)."""
    tools = {str(u.get("tool", "")) for u in evidence.signature}
    for run in (*evidence.successes, *evidence.failures):
        tools.update(str(step.get("tool", "")) for step in run.steps)
    return {t for t in tools if t}


def skill_text(parsed: ParsedSkill) -> str:
    """Every model-written field of a skill, one per line: name, description, license, compatibility,
    metadata keys and values (preconditions included; the stamped provenance excluded) and the body."""
    meta = [
        v if re.fullmatch(r"precondition-\d+", k) else f"{k}: {v}"
        for k, v in parsed.metadata.items()
        if k not in PROVENANCE_KEYS
    ]
    fields = [parsed.name, parsed.description, parsed.license or "", parsed.compatibility or "", *meta, parsed.body]
    return "\n".join(f for f in fields if f)


def validate_skill(skill_md: str, evidence: Evidence, judge: Judge, max_chars: int) -> ValidationResult:
    """Run every mandatory check; the judge runs (and must approve) only when all machine checks pass."""
    checks, reasons, parsed = _machine_checks(skill_md, evidence, max_chars)
    if reasons:
        return ValidationResult(False, reasons, checks, parsed)
    from skillflow.promotion.llm import TransientLLMError

    try:
        verdict = judge.judge(skill_md, evidence)
    except TransientLLMError:
        raise
    except Exception as exc:  # noqa: BLE001 - fail-closed: any judge error is a rejection with its type
        checks["judge"] = False
        return ValidationResult(False, [f"judge: error ({type(exc).__name__})"], checks, parsed)
    checks["judge"] = verdict.approve
    if not verdict.approve:
        return ValidationResult(False, verdict.reasons or ["judge: rejected"], checks, parsed)
    return ValidationResult(True, [], checks, parsed)
