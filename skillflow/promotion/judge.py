"""The validation judge: a protocol, a strict fail-closed verdict parser and an offline deterministic judge."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from skillflow.promotion.evidence import Evidence
from skillflow.promotion.redact import error_class_of
from skillflow.promotion.skillmd import SkillMdError, parse_skill_md, procedure_tools

if TYPE_CHECKING:
    pass

OFFLINE_JUDGE_VERSION = "offline-judge-v1"
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)
_NONE_OBSERVED = re.compile(r"^\s*none observed", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    approve: bool
    reasons: list[str] = field(default_factory=list)
    raw: str = ""


class Judge(Protocol):
    name: str
    prompt_version: str

    def judge(self, skill_md: str, evidence: Evidence) -> Verdict:
        """Does the skill reproduce the successes while avoiding or handling the failures?"""
        ...


class _VerdictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    verdict: Literal["approve", "reject"]
    reasons: list[str]


MAX_JUDGE_REASONS = 10  # a verdict's reasons kept (an answer of 10 000 held its partition for 40 s)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are unique; two of one key (``"verdict": "reject", ..., "verdict": "approve"``) are two
    answers, not the last one (``json.loads`` keeps the last)."""
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key given twice")
    return dict(pairs)


def parse_verdict(text: str) -> Verdict:
    """Strict JSON ``{"verdict": "approve"|"reject", "reasons": [...]}`` (one optional json code fence).

    Anything else rejects: fail-closed, unlike upstream's "first line contains YES".
    """
    raw = text or ""
    body = raw.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        model = _VerdictModel.model_validate(json.loads(body, object_pairs_hook=_unique_keys))
    except (ValueError, ValidationError):
        return Verdict(False, ["judge: unparsable verdict"], raw)
    reasons = [f"judge: {r.strip()}" for r in model.reasons if r.strip()]
    if len(reasons) > MAX_JUDGE_REASONS:  # each is stored, reported and checked for literals: a bounded few
        reasons = [*reasons[:MAX_JUDGE_REASONS], f"judge: {len(reasons) - MAX_JUDGE_REASONS} more reason(s) not kept"]
    if model.verdict == "reject":
        return Verdict(False, reasons or ["judge: rejected without reasons"], raw)
    return Verdict(True, reasons, raw)


def failure_error_classes(evidence: Evidence) -> dict[str, set[str]]:
    """Error class → tools that raised it, over the failed sample runs."""
    found: dict[str, set[str]] = {}
    for run in evidence.failures:
        for step in run.steps:
            cls = error_class_of(step)
            if cls:
                found.setdefault(cls, set()).add(str(step.get("tool", "")))
    return found


def success_tools(evidence: Evidence) -> list[str]:
    """The tool order of the class's success signature (errored units excluded)."""
    return [str(u["tool"]) for u in evidence.signature if not u.get("errored")]


class OfflineJudge:
    """Deterministic judge: approves only when the procedure reproduces the success signature's tool order
    and every failure's error class is avoided (its tool is not called) or handled in "Failure modes
    observed"."""

    name = "offline"
    prompt_version = OFFLINE_JUDGE_VERSION

    def judge(self, skill_md: str, evidence: Evidence) -> Verdict:
        try:
            parsed = parse_skill_md(skill_md)
        except SkillMdError as exc:
            return Verdict(False, [f"judge: unparsable skill ({exc})"], "")
        known = set(evidence.toolbox) | set(parsed.allowed_tools) | {str(u.get("tool")) for u in evidence.signature}
        expected = success_tools(evidence)
        actual = procedure_tools(parsed.sections.get("Procedure", ""), known)
        reasons: list[str] = []
        if actual != expected:
            reasons.append(
                f"judge: procedure tool order {' > '.join(actual) or '(none)'} "
                f"does not reproduce the success signature {' > '.join(expected)}"
            )
        failure_text = parsed.sections.get("Failure modes observed", "")
        for cls, tools in sorted(failure_error_classes(evidence).items()):
            avoided = not (tools & set(actual))
            if not avoided and cls not in failure_text:
                reasons.append(f"judge: failure error class {cls} is neither avoided nor handled")
        if evidence.failures and (not failure_text.strip() or _NONE_OBSERVED.match(failure_text)):
            reasons.append("judge: failed runs exist but 'Failure modes observed' does not describe them")
        raw = json.dumps({"verdict": "reject" if reasons else "approve", "reasons": reasons})
        return Verdict(not reasons, reasons, raw)
