"""Task: rank the eligible classes and cut at ``max_promotions_per_cycle``."""

from __future__ import annotations

from datetime import datetime

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow import promotion
from skillflow.config import PromotionConfig
from skillflow.evidence import ClassStats
from skillflow.promotion import Assessment


@task(cache_policy=NO_CACHE)
def rank_candidates(
    assessments: list[Assessment], config: PromotionConfig, now: datetime
) -> tuple[list[ClassStats], list[tuple[str, str]]]:
    return promotion.choose(assessments, config, now)
