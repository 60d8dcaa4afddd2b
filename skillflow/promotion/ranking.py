"""Ranking of eligible classes (docs/design.md, Promotion): a score orders, it never rescues a gate failure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import ClassStats
from skillflow.promotion.gates import days_since


def score(stats: ClassStats, config: PromotionConfig, now: datetime) -> float:
    """``success_rate * log1p(executions) * 0.5 ** (days_since_last_seen / recency_halflife_days)``."""
    decay = 0.5 ** (days_since(stats.last_seen, now) / config.recency_halflife_days)
    return float(stats.success_rate * math.log1p(stats.executions) * decay)


def by_score(eligible: Sequence[ClassStats], config: PromotionConfig, now: datetime) -> list[ClassStats]:
    """Every class by descending score (ties: more executions, then hash, so the order is stable)."""
    return sorted(eligible, key=lambda s: (-score(s, config, now), -s.executions, s.canonical_hash))


def rank(eligible: Sequence[ClassStats], config: PromotionConfig, now: datetime) -> list[ClassStats]:
    """The top ``max_promotions_per_cycle`` classes by score. Callers pass only classes that passed every gate."""
    return by_score(eligible, config, now)[: config.max_promotions_per_cycle]
