"""Task: gather one class's evidence and ask the configured distiller for a SKILL.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from skillflow import promotion
from skillflow.config import PromotionConfig
from skillflow.evidence import ClassStats, Evidence
from tasks.common import engine_for, retry_transient


@dataclass(frozen=True)
class Draft:
    """A class's evidence and the distiller's answer (a ``DistillOutcome``; INSUFFICIENT is a value)."""

    evidence: Evidence
    outcome: Any

    @property
    def rejection(self) -> list[str] | None:
        return promotion.distill_rejection(self.outcome)


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[2, 10, 30], retry_condition_fn=retry_transient)
def distill_candidate(database_url: str | None, stats: ClassStats, config: PromotionConfig) -> Draft:
    evidence = promotion.gather_evidence(engine_for(database_url), stats, config)
    return Draft(evidence, promotion.distill_evidence(evidence, config))
