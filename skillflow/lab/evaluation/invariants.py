"""The harness's built-in assertions; each returns a :class:`Check`, and a failed one raises in strict mode.

1. both skill arms retrieve (and render) zero raw workflows;
2. only the developer arm carries a developer message (inspected in the provider request itself), and it
   does in every developer-arm case where a skill was injected (the fitted rule may inject none);
3. the skill bodies stored in the two skill arms' databases are byte-identical (read back from each);
4. every arm sees the same requests (same case ids, repeats and request text);
5. every arm that holds training runs holds the same training state (independently ingested).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillflow.lab.evaluation.metrics import CaseResult

SKILL_ARMS = ("skill_user", "skill_developer")
DEVELOPER_ARM = "skill_developer"


class EvaluationInvariantError(AssertionError):
    """A harness invariant does not hold: the comparison would not be a fair one."""

    def __init__(self, failed: Sequence[Check]) -> None:
        super().__init__("; ".join(f"{c.name}: {c.detail}" for c in failed))
        self.failed = list(failed)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def has_developer_message(request: Mapping[str, Any]) -> bool:
    """A developer-role message, or developer-authority skill text hoisted into a system slot (Anthropic's
    top-level ``system``, system messages of OpenAI-compatible servers)."""
    for message in request.get("messages", []):
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "developer" or (role == "system" and 'authority="developer"' in content):
            return True
    return 'authority="developer"' in str(request.get("system", ""))


def skill_arms_without_raw_workflows(results: Sequence[CaseResult]) -> Check:
    bad = [r for r in results if r.arm in SKILL_ARMS and (r.retrieved_workflows or r.raw_workflows_in_prompt)]
    seen = {r.arm for r in results if r.arm in SKILL_ARMS}
    if seen != set(SKILL_ARMS):
        return Check("skill_arms_zero_raw_workflows", False, f"skill arms missing: {sorted(set(SKILL_ARMS) - seen)}")
    detail = f"{len(bad)} skill-arm case(s) retrieved or rendered raw workflows" if bad else "0 raw workflows"
    return Check("skill_arms_zero_raw_workflows", not bad, detail)


def only_developer_arm_has_developer_message(results: Sequence[CaseResult]) -> Check:
    leaked = sorted({r.arm for r in results if r.developer_message and r.arm != DEVELOPER_ARM})
    dev = [r for r in results if r.arm == DEVELOPER_ARM]
    missing = [r.case_id for r in dev if r.skills_in_prompt and not r.developer_message]
    problems = []
    if leaked:
        problems.append(f"developer message in arm(s) {', '.join(leaked)}")
    if missing:
        problems.append(f"developer arm rendered a skill without a developer message in {len(missing)} case(s)")
    rendered = sum(1 for r in dev if r.skills_in_prompt)
    detail = "; ".join(problems) or f"developer message in {sum(r.developer_message for r in dev)}/{len(dev)} cases"
    if not problems and not rendered:
        detail += " (no skill was injected in the developer arm: the fitted rule abstained on every request)"
    return Check("only_developer_arm_has_developer_message", not problems, detail)


def digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def skill_bodies_identical(bodies: Mapping[str, Mapping[str, str]]) -> Check:
    """``bodies``: arm -> {class hash -> SKILL.md as stored}; byte equality per class across the skill arms."""
    arms = [bodies.get(a, {}) for a in SKILL_ARMS]
    if not all(arms):
        return Check("skill_bodies_byte_identical", False, "a skill arm stores no skill")
    if set(arms[0]) != set(arms[1]):
        return Check("skill_bodies_byte_identical", False, "the skill arms store skills of different classes")
    differ = [h[:12] for h in arms[0] if arms[0][h].encode("utf-8") != arms[1][h].encode("utf-8")]
    detail = f"differ for class(es) {', '.join(differ)}" if differ else f"{len(arms[0])} skill(s), identical bytes"
    return Check("skill_bodies_byte_identical", not differ, detail)


def same_requests(results: Sequence[CaseResult]) -> Check:
    by_arm: dict[str, set[tuple[str, int, str]]] = {}
    for r in results:
        by_arm.setdefault(r.arm, set()).add((r.case_id, r.repeat, r.request))
    distinct = {frozenset(v) for v in by_arm.values()}
    ok = len(by_arm) >= 2 and len(distinct) == 1
    n = len(next(iter(by_arm.values()))) if by_arm else 0
    detail = f"{len(by_arm)} arms x {n} requests" if ok else "arms saw different requests"
    return Check("every_arm_same_requests", ok, detail)


def same_training_state(states: Mapping[str, Any]) -> Check:
    """``states``: arm -> a comparable summary of its ingested runs (count and per-class counts)."""
    distinct = {repr(v) for v in states.values()}
    ok = len(states) >= 1 and len(distinct) == 1
    detail = f"{len(states)} databases, identical training state" if ok else "training state differs between arms"
    return Check("same_training_state", ok, detail)


def enforce(checks: Sequence[Check]) -> None:
    failed = [c for c in checks if not c.passed]
    if failed:
        raise EvaluationInvariantError(failed)
