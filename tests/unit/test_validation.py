"""The validation gate: every mandatory check rejects what it must, with stable reasons; the judge is fail-closed."""

from __future__ import annotations

import pytest

from skillflow.promotion.distill import OfflineDistiller
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.judge import OfflineJudge, Verdict, parse_verdict
from skillflow.promotion.llm import TransientLLMError
from skillflow.promotion.validation import validate_skill
from tests.support.llm import cancel_evidence, errored_failure

EVIDENCE = cancel_evidence(failures=[*cancel_evidence().failures, errored_failure()])
SKILL = OfflineDistiller().distill(EVIDENCE, 4000).skill_md or ""
STEP3 = "3. Call `cancel_reservation` with `reason`: <object>, `reservation_id`: <id>."


class RecordingJudge:
    name = "recording"
    prompt_version = "test"

    def __init__(self, verdict: Verdict | Exception) -> None:
        self.verdict = verdict
        self.calls = 0

    def judge(self, skill_md: str, evidence: Evidence) -> Verdict:
        self.calls += 1
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict


def _check(skill_md: str, evidence: Evidence = EVIDENCE, max_chars: int = 4000) -> tuple[list[str], dict[str, bool]]:
    judge = RecordingJudge(Verdict(True))
    result = validate_skill(skill_md, evidence, judge, max_chars)
    assert result.ok is (not result.reasons)
    if result.reasons:
        assert judge.calls == 0  # nothing failing a machine check is shown to a judge
    return result.reasons, result.checks


def test_the_offline_skill_passes_every_check() -> None:
    reasons, checks = _check(SKILL)
    assert reasons == []
    assert set(checks) == {
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
    }


@pytest.mark.parametrize(
    ("planted", "kind"),
    [
        ("credit_card_4421486", "<id>"),  # nested argument value of a successful run
        ("1231", "<number>"),  # nested numeric argument value
        ("weather_delay_9911", "<id>"),  # nested argument value of the failed run only
        ("XK39PL", "<id>"),  # failed run's argument
        ("sofia.kim7287@example.com", "<email>"),  # literal from a query only
        ("airline_cancelled_flight", "<string>"),  # enum-like argument value
        ("Check The Cancellation Policy", "<string>"),  # no-op tool's argument, different case
    ],
)
def test_leaked_literals_are_rejected(planted: str, kind: str) -> None:
    leaky = SKILL.replace(STEP3, STEP3 + f" For example {planted}.")
    reasons, checks = _check(leaky)
    assert checks["no_literal_leak"] is False
    assert reasons[0] == f"leaked 1 literal value(s) from source runs ({kind})"
    # A literal with a shape (id, number, email) is refused by the structural rule too, source or not.
    assert checks["no_literal"] is (kind == "<string>")
    assert planted not in " ".join(reasons)


def test_leak_in_metadata_is_rejected_too() -> None:
    leaky = SKILL.replace('source: "learned"', 'source: "learned from ZFA04Y"')
    assert _check(leaky)[1]["no_literal_leak"] is False


@pytest.mark.parametrize(
    ("extra", "tool"),
    [
        ("Then call `book_reservation` to rebook.", "book_reservation"),  # backticked toolbox tool
        ("If unsure, transfer_to_human_agents.", "transfer_to_human_agents"),  # bare toolbox tool
        ("Finally refund_payment(amount) the user.", "refund_payment"),  # invented tool called
        ("Then invoke `issue_voucher`.", "issue_voucher"),  # invented tool after a verb
    ],
)
def test_undeclared_tools_are_rejected(extra: str, tool: str) -> None:
    reasons, checks = _check(SKILL.replace(STEP3, STEP3 + "\n4. " + extra))
    assert checks["no_undeclared_tools"] is False
    assert f"undeclared tools referenced: {tool}" in reasons


def test_a_plain_word_tool_counts_only_backticked_or_called() -> None:
    """Regression: a τ-bench skill whose redacted example request said "I think" was refused for `think`."""
    ev = cancel_evidence(toolbox=["get_user_details", "get_reservation_details", "cancel_reservation", "think"])
    reasons, checks = _check(SKILL.replace(STEP3, STEP3 + "\n\nI think the user wants this."), ev)
    assert checks["no_undeclared_tools"] is True, reasons
    reasons, checks = _check(SKILL.replace(STEP3, STEP3 + "\n4. Call `think` first."), ev)
    assert "undeclared tools referenced: think" in reasons


def test_declared_tool_must_resolve_in_the_toolbox() -> None:
    ev = cancel_evidence(toolbox=["get_user_details", "get_reservation_details"])
    reasons, checks = _check(SKILL, ev)
    assert checks["tools_resolve"] is False
    assert "declared tools not in toolbox: cancel_reservation" in reasons


def test_empty_toolbox_is_rejected_with_a_clear_reason() -> None:
    reasons, _ = _check(SKILL, cancel_evidence(toolbox=[]))
    assert "no toolbox registered for this agent" in reasons


def test_tool_dump_description_is_rejected() -> None:
    start = SKILL.index("description: ")
    end = SKILL.index("\n", start)
    dump = SKILL[:start] + 'description: "get_user_details then cancel_reservation"' + SKILL[end:]
    reasons, checks = _check(dump)
    assert checks["description_intent"] is False
    assert reasons == ["description is a tool-name dump (67% tool-name tokens)"]


def test_size_cap() -> None:
    reasons, checks = _check(SKILL, max_chars=1000)
    assert checks["size"] is False and reasons == [f"content {len(SKILL)} chars > 1000"]


def test_missing_preconditions_and_when_not_line() -> None:
    lines = [ln for ln in SKILL.splitlines() if "precondition-" not in ln and "When NOT" not in ln]
    reasons, checks = _check("\n".join(lines))
    assert checks["required_fields"] is False and checks["sections"] is False
    assert "missing preconditions" in reasons
    assert "missing a 'When NOT to apply' line" in reasons


def test_unparsable_frontmatter() -> None:
    reasons, checks = _check(SKILL.replace("allowed-tools: ", "tools: "))
    assert checks == {"size": True, "frontmatter": False}
    assert reasons == ["frontmatter: unexpected frontmatter key: tools"]


def test_judge_decides_last_and_fails_closed() -> None:
    rejecting = RecordingJudge(Verdict(False, ["judge: misses the refund step"]))
    result = validate_skill(SKILL, EVIDENCE, rejecting, 4000)
    assert not result.ok and result.reasons == ["judge: misses the refund step"] and result.checks["judge"] is False
    broken = validate_skill(SKILL, EVIDENCE, RecordingJudge(ValueError("boom")), 4000)
    assert not broken.ok and broken.reasons == ["judge: error (ValueError)"]
    with pytest.raises(TransientLLMError):  # left to the task's retry policy
        validate_skill(SKILL, EVIDENCE, RecordingJudge(TransientLLMError("429")), 4000)


def test_offline_judge_rejects_a_reordered_procedure() -> None:
    swapped = SKILL.replace("1. Call `get_user_details`", "1. Call `get_reservation_details`", 1).replace(
        "2. Call `get_reservation_details`", "2. Call `get_user_details`", 1
    )
    verdict = OfflineJudge().judge(swapped, EVIDENCE)
    assert not verdict.approve
    assert verdict.reasons == [
        "judge: procedure tool order get_reservation_details > get_user_details > cancel_reservation does not "
        "reproduce the success signature get_user_details > get_reservation_details > cancel_reservation"
    ]


def test_offline_judge_requires_failures_to_be_handled() -> None:
    unhandled = SKILL.replace("failed with `ReservationNotFound`", "failed")
    verdict = OfflineJudge().judge(unhandled, EVIDENCE)
    assert verdict.reasons == ["judge: failure error class ReservationNotFound is neither avoided nor handled"]
    clean = OfflineDistiller().distill(cancel_evidence(failures=[]), 4000).skill_md or ""
    verdict = OfflineJudge().judge(clean, EVIDENCE)  # says "None observed" but failures exist
    assert not verdict.approve
    assert "judge: failed runs exist but 'Failure modes observed' does not describe them" in verdict.reasons


@pytest.mark.parametrize(
    ("text", "approve", "reasons"),
    [
        ('{"verdict": "approve", "reasons": []}', True, []),
        ('```json\n{"verdict": "approve", "reasons": ["fine"]}\n```', True, ["judge: fine"]),
        ('{"verdict": "reject", "reasons": ["wrong order"]}', False, ["judge: wrong order"]),
        ('{"verdict": "reject", "reasons": []}', False, ["judge: rejected without reasons"]),
        ("YES, this skill is good", False, ["judge: unparsable verdict"]),
        ('{"verdict": "yes", "reasons": []}', False, ["judge: unparsable verdict"]),
        ('{"verdict": "approve"}', False, ["judge: unparsable verdict"]),
        ('{"verdict": "approve", "reasons": "ok"}', False, ["judge: unparsable verdict"]),
        ('{"verdict": "approve", "reasons": [], "confidence": 0.9}', False, ["judge: unparsable verdict"]),
        ('Sure! {"verdict": "approve", "reasons": []}', False, ["judge: unparsable verdict"]),
        ("", False, ["judge: unparsable verdict"]),
        # Two verdicts in one object (found by an outside audit: the last key won, so a reject became an approval).
        (
            '{"verdict": "reject", "reasons": ["skips the check"], "verdict": "approve"}',
            False,
            ["judge: unparsable verdict"],
        ),
        ('{"verdict": "approve", "reasons": [], "reasons": ["x"]}', False, ["judge: unparsable verdict"]),
    ],
)
def test_parse_verdict_is_strict(text: str, approve: bool, reasons: list[str]) -> None:
    verdict = parse_verdict(text)
    assert (verdict.approve, verdict.reasons, verdict.raw) == (approve, reasons, text)
