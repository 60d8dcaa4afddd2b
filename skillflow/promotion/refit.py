"""Refit a tenant's applicability rule right after its live skills change (activation, retirement, rollback).

A stored rule is keyed by the fingerprint of the tenant's ACTIVE skills; a rule fitted for another set
fails safe (injects nothing). So that a skill a reviewer activates is injected at once rather than after
the next cycle, every lifecycle transition calls :func:`refresh_rule` *after* its own transaction has
committed. The refresh never raises and never undoes the transition: on any failure it logs counts and
error classes only and leaves the stale rule, which fails safe until the next cycle refits. A tenant no
cycle has calibrated yet (no stored rule) is left uncalibrated: it keeps the configured threshold until
its first cycle (docs/guide/runtime.md, "Which skill, or none").
"""

from __future__ import annotations

import logging
from typing import Literal

from sqlalchemy import Engine, select

from skillflow.injection.applicability import fingerprint
from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.kernel.config import PromotionConfig, get_settings, load_promotion_config
from skillflow.promotion.calibrate import calibrate
from skillflow.storage.schema import applicability_rules

log = logging.getLogger("skillflow.promotion.refit")

Outcome = Literal["refit", "current", "uncalibrated", "failed"]


def refresh_rule(
    engine: Engine,
    agent_id: str,
    user_id: str,
    *,
    embedder: Embedder | None = None,
    config: PromotionConfig | None = None,
) -> Outcome:
    """Refit and store the tenant's rule when it no longer matches the live skills; never raises.

    ``current``: the stored rule already matches (nothing to do); ``uncalibrated``: no rule stored yet;
    ``refit``: a new rule was fitted and stored (same cycle number as the one it replaces); ``failed``: the
    refit could not run — the stale rule stays and fails safe.
    """
    try:
        embedder = embedder or get_embedder(get_settings().embedder)
        with engine.connect() as conn:
            row = conn.execute(
                select(
                    applicability_rules.c.fingerprint, applicability_rules.c.model_id, applicability_rules.c.cycle
                ).where(applicability_rules.c.agent_id == agent_id, applicability_rules.c.user_id == user_id)
            ).first()
            if row is None:
                return "uncalibrated"
            now = fingerprint(conn, agent_id, user_id, embedder.model_id)
        if row[0] == now and row[1] == embedder.model_id:
            return "current"
        summary = calibrate(
            engine, agent_id, user_id, config or load_promotion_config(), int(row[2] or 0), embedder=embedder
        )
    except Exception as exc:  # noqa: BLE001 - the transition has committed; the stale rule fails safe
        log.warning(
            "applicability refit failed (%s); the stale rule injects nothing until the next cycle", type(exc).__name__
        )
        return "failed"
    log.info("applicability refit: injects=%s live_skills=%d", summary["injects"], summary["live_skills"])
    return "refit"
