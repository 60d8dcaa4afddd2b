"""Unit tests of the eligibility gates: inclusive thresholds, first failure wins, every check computed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.promotion.gates import COVERED, TOO_LONG, evaluate_gates

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def stats(executions: int = 5, successes: int | None = None, distinct: int = 2, days: float = 0, stamped: int = 0):
    successes = executions if successes is None else successes
    return ClassStats(
        agent_id="a",
        user_id="u",
        canonical_hash="h" * 64,
        executions=executions,
        successes=successes,
        failures=executions - successes,
        unknown=0,
        success_rate=successes / executions if executions else 0.0,
        distinct_queries=distinct,
        first_seen=NOW - timedelta(days=days + 1),
        last_seen=NOW - timedelta(days=days),
        tool_sequence="a>b",
        stamped=stamped,
    )


CFG = PromotionConfig()


def test_exactly_at_every_threshold_is_eligible() -> None:
    result = evaluate_gates(stats(executions=5, successes=4, distinct=2, days=30), CFG, NOW, live_skill=False)
    assert result.eligible and result.reasons == []
    assert result.checks == {
        "not_covered": True,
        "length": True,
        "not_trivial": True,
        "read_only": True,
        "handoff": True,
        "executions": True,
        "success_rate": True,
        "unknown_share": True,
        "distinct_queries": True,
        "recency": True,
    }


@pytest.mark.parametrize(
    ("kwargs", "reason", "failed"),
    [
        ({"executions": 4}, "executions 4 < 5", "executions"),
        ({"executions": 10, "successes": 7}, "success_rate 0.70 < 0.8", "success_rate"),
        ({"distinct": 1}, "distinct_queries 1 < 2", "distinct_queries"),
        ({"days": 31}, "stale: last seen 31d ago", "recency"),
        ({"days": 30.9}, None, None),  # whole days: 30 days and some hours is still inside a 30-day window
    ],
)
def test_each_gate_reason_is_stable(kwargs: dict, reason: str | None, failed: str | None) -> None:
    result = evaluate_gates(stats(**kwargs), CFG, NOW, live_skill=False)
    assert result.reasons == ([reason] if reason else [])
    assert [k for k, v in result.checks.items() if not v] == ([failed] if failed else [])


def test_first_failure_wins_but_every_check_is_computed() -> None:
    result = evaluate_gates(stats(executions=3, successes=1, distinct=1, days=40), CFG, NOW, live_skill=False)
    assert result.reasons == ["executions 3 < 5"]
    assert result.checks == {
        "not_covered": True,
        "length": True,
        "not_trivial": True,
        "read_only": True,
        "handoff": True,
        "executions": False,
        "success_rate": False,
        "unknown_share": True,
        "distinct_queries": False,
        "recency": False,
    }


def test_live_skill_or_stamped_runs_cover_the_class_first() -> None:
    assert evaluate_gates(stats(), CFG, NOW, live_skill=True).reasons == [COVERED]
    covered = evaluate_gates(stats(executions=1, stamped=1), CFG, NOW, live_skill=False)
    assert covered.reasons == [COVERED] and covered.checks["executions"] is False


def test_a_frequent_low_success_class_is_a_bug_report_not_a_skill() -> None:
    result = evaluate_gates(stats(executions=50, successes=30, distinct=40), CFG, NOW, live_skill=False)
    assert not result.eligible and result.reasons == ["success_rate 0.60 < 0.8"]


def test_thresholds_follow_the_config() -> None:
    cfg = PromotionConfig(min_executions=2, min_success_rate=0.5, min_distinct_queries=1, max_days_since_last_seen=3)
    assert evaluate_gates(stats(executions=2, successes=1, distinct=1, days=3), cfg, NOW, live_skill=False).eligible
    assert evaluate_gates(stats(days=4), cfg, NOW, live_skill=False).reasons == ["stale: last seen 4d ago"]


def test_unknown_share_gate_is_inclusive_and_reported() -> None:
    from dataclasses import replace

    at = replace(stats(executions=8), unknown=2)  # 2 of 10 runs unknown: exactly the 0.2 default
    assert evaluate_gates(at, CFG, NOW, live_skill=False).eligible
    over = replace(stats(executions=8), unknown=3)  # 3 of 11
    result = evaluate_gates(over, CFG, NOW, live_skill=False)
    assert result.reasons == ["unknown_share 0.27 > 0.2"]
    assert [k for k, v in result.checks.items() if not v] == ["unknown_share"]


def test_a_single_read_only_call_is_trivial_unless_allowed_or_declared() -> None:
    from dataclasses import replace

    from skillflow.promotion.gates import TRIVIAL

    lookup = replace(stats(), tool_sequence="get_user_details")
    result = evaluate_gates(lookup, CFG, NOW, live_skill=False)
    assert result.reasons == [TRIVIAL] == ["trivial: a single read-only call"]
    assert [k for k, v in result.checks.items() if not v] == ["not_trivial"]
    assert evaluate_gates(replace(lookup, tool_sequence="get_user_details!"), CFG, NOW, live_skill=False).reasons == [
        TRIVIAL
    ]
    allowed = PromotionConfig(promote_trivial_classes=True)
    assert evaluate_gates(lookup, allowed, NOW, live_skill=False).eligible
    # A declared flag beats the verb: a "get" tool that writes is a procedure, a "send" tool that reads is not.
    assert evaluate_gates(lookup, CFG, NOW, live_skill=False, declared={"get_user_details": True}).eligible
    preview = replace(stats(), tool_sequence="send_preview")
    assert evaluate_gates(preview, CFG, NOW, live_skill=False).eligible
    assert evaluate_gates(preview, CFG, NOW, False, {"send_preview": False}).reasons == [TRIVIAL]
    # One write, or a lookup followed by anything, is a procedure.
    for sequence in ("cancel_reservation", "get_user_details > get_reservation_details", "get_a > think"):
        assert evaluate_gates(replace(stats(), tool_sequence=sequence), CFG, NOW, live_skill=False).eligible


def test_read_only_gate_applies_when_the_tenant_changes_state() -> None:
    from dataclasses import replace

    from skillflow.promotion.gates import READ_ONLY_CLASS

    reads = replace(stats(), tool_sequence="get_user_details > get_reservation_details!")
    write = replace(reads, tool_sequence="get_user_details > cancel_reservation")
    declared = {"cancel_reservation": True}
    assert evaluate_gates(reads, CFG, NOW, False, declared).reasons == [READ_ONLY_CLASS]
    assert evaluate_gates(write, CFG, NOW, False, declared).eligible
    assert evaluate_gates(reads, CFG, NOW, False, None).eligible  # nothing declared, no tool of the tenant writes
    # Nothing declared: a tool the tenant registered or calls that writes by its name makes it a tenant that writes.
    assert evaluate_gates(reads, CFG, NOW, False, None, tools=["cancel_reservation"]).reasons == [READ_ONLY_CLASS]
    assert evaluate_gates(reads, CFG, NOW, False, {"cancel_reservation": False}, tools=["cancel_reservation"]).eligible
    assert evaluate_gates(reads, CFG, NOW, False, {"cancel_reservation": False}).eligible  # declared no write
    # A tool the agent declared state-changing makes a class with a read verb a procedure with a write.
    assert evaluate_gates(reads, CFG, NOW, False, {"get_reservation_details": True}).eligible
    allowed = PromotionConfig(promote_read_only_classes=True)
    assert evaluate_gates(reads, allowed, NOW, False, declared).eligible


def test_handoff_gate_holds_back_a_class_calling_a_declared_handoff_tool() -> None:
    from dataclasses import replace

    from skillflow.promotion.gates import HANDOFF_CLASS

    handoff = replace(stats(), tool_sequence="get_user_details > transfer_to_human_agents")
    write = replace(stats(), tool_sequence="get_user_details > cancel_reservation")
    hands = frozenset({"transfer_to_human_agents"})
    declared = {"transfer_to_human_agents": True, "cancel_reservation": True}
    result = evaluate_gates(handoff, CFG, NOW, False, declared, hands)
    assert (result.eligible, result.reasons, result.checks["handoff"]) == (False, [HANDOFF_CLASS], False)
    assert evaluate_gates(write, CFG, NOW, False, declared, hands).eligible
    # A failed hand-off call ("!") is the same tool; nothing declared a hand-off: eligible (a transfer is a write).
    assert evaluate_gates(replace(handoff, tool_sequence=handoff.tool_sequence + "!"), CFG, NOW, False, declared,
                          hands).reasons == [HANDOFF_CLASS]  # fmt: skip
    assert evaluate_gates(handoff, CFG, NOW, False, declared).eligible
    assert evaluate_gates(handoff, PromotionConfig(promote_handoff_classes=True), NOW, False, declared, hands).eligible
    # A gate earlier in the order is reported first.
    lookup = replace(stats(), tool_sequence="get_user_details")
    assert evaluate_gates(lookup, CFG, NOW, False, declared, hands).reasons != [HANDOFF_CLASS]


def test_a_procedure_cut_at_capture_is_not_read() -> None:
    """A gate-integrity audit (2026-12-06): capture cuts a class's tool sequence at 4000 characters, and the gates
    read the cut text: a declared hand-off call past the cut passed the hand-off gate (and the only write past it
    would have read as read-only)."""
    from skillflow.kernel.canonical import MAX_TOOL_SEQUENCE

    long = " > ".join(["update_ticket", *["get_flight_status"] * 220, "transfer_to_human_agents"])[:MAX_TOOL_SEQUENCE]
    base = stats(executions=10, successes=10, distinct=5, days=1)
    result = evaluate_gates(
        replace(base, tool_sequence=long), CFG, NOW, live_skill=False, handoffs=["transfer_to_human_agents"]
    )
    assert not result.eligible and result.reasons == [TOO_LONG] and result.checks["length"] is False
    short = " > ".join(["update_ticket", *["get_flight_status"] * 3])
    assert evaluate_gates(replace(base, tool_sequence=short), CFG, NOW, live_skill=False).eligible
