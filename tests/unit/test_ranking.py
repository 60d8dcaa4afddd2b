"""Unit tests of the ranking score with exact numbers, the cap, and that a score never rescues a gate."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.promotion.gates import evaluate_gates
from skillflow.promotion.ranking import rank, score

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def cls(h: str, executions: int, rate: float, days: float, distinct: int = 3) -> ClassStats:
    successes = round(executions * rate)
    return ClassStats(
        agent_id="a",
        user_id="u",
        canonical_hash=h,
        executions=executions,
        successes=successes,
        failures=executions - successes,
        unknown=0,
        success_rate=rate,
        distinct_queries=distinct,
        first_seen=NOW - timedelta(days=days + 5),
        last_seen=NOW - timedelta(days=days),
        tool_sequence=None,
    )


def test_score_formula_exact() -> None:
    cfg = PromotionConfig(recency_halflife_days=14)
    assert score(cls("a", 10, 0.9, 0), cfg, NOW) == 0.9 * math.log1p(10)
    assert math.isclose(score(cls("b", 10, 0.9, 14), cfg, NOW), 0.9 * math.log(11) * 0.5)
    assert math.isclose(score(cls("c", 20, 1.0, 28), cfg, NOW), math.log(21) * 0.25)
    assert math.isclose(score(cls("d", 7, 0.8, 7), cfg, NOW), 0.8 * math.log(8) * 2**-0.5)


def test_rank_orders_by_score_and_caps() -> None:
    cfg = PromotionConfig(max_promotions_per_cycle=2)
    a, b, c = cls("a", 10, 0.9, 0), cls("b", 50, 1.0, 0), cls("c", 10, 0.9, 20)
    assert [s.canonical_hash for s in rank([a, b, c], cfg, NOW)] == ["b", "a"]
    assert rank([a, b, c], PromotionConfig(max_promotions_per_cycle=0), NOW) == []


def test_ties_are_broken_stably() -> None:
    cfg = PromotionConfig()
    x, y = cls("y", 10, 1.0, 0), cls("x", 10, 1.0, 0)
    assert [s.canonical_hash for s in rank([x, y], cfg, NOW)] == ["x", "y"]


def test_score_never_rescues_a_gate_failure() -> None:
    cfg = PromotionConfig()
    huge = cls("big", 10_000, 0.79, 0, distinct=500)  # the highest score of all, below the success gate
    small = cls("small", 5, 0.8, 0)
    assert score(huge, cfg, NOW) > score(small, cfg, NOW)
    eligible = [s for s in (huge, small) if evaluate_gates(s, cfg, NOW, live_skill=False).eligible]
    assert [s.canonical_hash for s in rank(eligible, cfg, NOW)] == ["small"]
    assert evaluate_gates(replace(huge), cfg, NOW, live_skill=False).reasons == ["success_rate 0.79 < 0.8"]
