"""Advisory shadow readiness (docs/design.md, Shadow and drift): numbers and reasons; never changes a status."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from skillflow.kernel.config import PromotionConfig
from skillflow.lifecycle.shadow import empty_shadow_stats, shadow_aggregates
from skillflow.storage.schema import skillbox


def readiness_from_counts(figures: dict[str, Any], config: PromotionConfig) -> dict[str, Any]:
    """The advisory dict from ``stats["shadow"]``-shaped counters (pure).

    Success and failure only count when the observed trajectory matched the skill's source trajectory:
    a different successful path may be a valid alternative procedure, not a failure of this one. The
    observation floor counts observations whose outcome is known (``unknown_outcomes`` are left out).
    """
    observations = int(figures.get("observations", 0))
    # An unknown outcome is no evidence (drift's grace counts known outcomes too).
    known = observations - int(figures.get("unknown_outcomes", 0))
    matches = int(figures.get("trajectory_matches", 0))
    successes = int(figures.get("matched_successes", 0))
    failures = int(figures.get("matched_failures", 0))
    match_rate = matches / observations if observations else 0.0
    judged = successes + failures
    success_rate = successes / judged if judged else 0.0
    reasons: list[str] = []
    if known < config.shadow_readiness_min_observations:
        counted = (
            f"observations {observations}" if known == observations else f"observations with a known outcome {known}"
        )
        reasons.append(f"{counted} < {config.shadow_readiness_min_observations}")
    if match_rate < config.shadow_readiness_min_trajectory_match_rate:
        reasons.append(
            f"trajectory match rate {match_rate:.2f} < {config.shadow_readiness_min_trajectory_match_rate:.2f}"
        )
    if success_rate < config.shadow_readiness_min_matched_success_rate:
        reasons.append(
            f"matched success rate {success_rate:.2f} < {config.shadow_readiness_min_matched_success_rate:.2f}"
        )
    return {
        "ready": not reasons,
        "observations": observations,
        "trajectory_match_rate": match_rate,
        "matched_success_rate": success_rate,
        "reasons": reasons,
    }


def get_shadow_readiness(conn: Connection, skill_id: str, config: PromotionConfig) -> dict[str, Any]:
    """Readiness of one skill from its indexed shadow observations (always current, one GROUP BY)."""
    exists = conn.execute(select(skillbox.c.id).where(skillbox.c.id == skill_id)).first()
    if exists is None:
        return {
            "ready": False,
            "observations": 0,
            "trajectory_match_rate": 0.0,
            "matched_success_rate": 0.0,
            "reasons": ["skill not found"],
        }
    figures = shadow_aggregates(conn, [skill_id]).get(skill_id) or empty_shadow_stats()
    return readiness_from_counts(figures, config)
