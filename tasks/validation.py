"""Task: the validation gate of one drafted SKILL.md (machine checks + the fail-closed judge)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow import promotion
from skillflow.config import PromotionConfig
from tasks.common import retry_transient
from tasks.distillation import Draft


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[2, 10, 30], retry_condition_fn=retry_transient)
def validate_candidate(draft: Draft, config: PromotionConfig) -> Any:
    """A ``ValidationResult``; a rejection is a value with reasons, never an exception."""
    return promotion.validate_draft(draft.outcome.skill_md, draft.evidence, config)
