"""The calibration stage of a promotion cycle: fit the tenant's applicability rule on its history and store it.

Reads the tenant's newest runs (``applicability_history_runs``), turns each into an example at its probe
moment with :func:`skillflow.injection.history.examples` — the conversation so far in every view (redacted
and vectorised exactly like live requests), its intent (the state-changing call its procedure ends in) and
the calls before it — and fits :func:`skillflow.injection.calibration.fit` against the live skills,
grouped by conversation. The rule is stored with the live skills' fingerprint (one row per tenant,
replaced: a re-run converges).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from skillflow.injection.applicability import fingerprint, live_skills, save_rule
from skillflow.injection.calibration import NEVER, Budget, Example, Rule, fit
from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.injection.history import HistoryRun, examples
from skillflow.injection.views import NEAREST, VIEWS
from skillflow.kernel.config import PromotionConfig, get_settings
from skillflow.promotion.redact import redact_query
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import declared_state_changes

log = logging.getLogger("skillflow.promotion.calibrate")


def declared_tools(engine: Engine, agent_id: str) -> dict[str, bool]:
    """Tools the agent declared as state-changing (or not) when registering its toolbox."""
    with engine.connect() as conn:
        return declared_state_changes(conn, agent_id)


def history_examples(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    embedder: Embedder,
    declared: dict[str, bool] | None = None,
) -> list[Example]:
    """The tenant's newest runs as examples (oldest first), each in the form of a live request."""
    wm = workflow_memory
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                wm.c.id, wm.c.query, wm.c.conversation_id, wm.c.segment_index, wm.c.tool_sequence, wm.c.canonical_hash
            )
            .where(wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.canonical_hash.is_not(None))
            .order_by(wm.c.created_at.desc(), wm.c.id)
            .limit(config.applicability_history_runs)
        ).all()
    runs = [
        HistoryRun(
            str(r.id), str(r.query or ""), str(r.tool_sequence or ""), str(r.canonical_hash), r.conversation_id,
            r.segment_index,
        )
        for r in reversed(rows)
    ]  # fmt: skip
    return examples(runs, embedder, VIEWS, redact_query, declared)


def summary(rule: Rule, fp: str) -> dict[str, Any]:
    """The rule as the cycle report shows it (no vectors, no texts)."""
    return {
        "fingerprint": fp[:16],
        "injects": rule.injects,
        "reason": rule.reason,
        "view": rule.view,
        "margin": rule.margin,
        "strength": rule.strength,
        "floors": {k: (None if v == NEVER else round(v, 4)) for k, v in sorted(rule.floors.items())},
        "lower_bound": rule.lower_bound,
        "live_skills": len(rule.skills),
        "intents": sorted({s.intent for s in rule.skills}),
        "exemplars": int(rule.exemplars.shape[0]),
        "inner": rule.inner,
    }


def calibrate(
    engine: Engine,
    agent_id: str,
    user_id: str,
    config: PromotionConfig,
    cycle: int,
    *,
    dry_run: bool = False,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Fit and (unless ``dry_run``) store the tenant's rule for its live skills; returns the report summary."""
    embedder = embedder or get_embedder(get_settings().embedder)
    declared = declared_tools(engine, agent_id) or None
    with engine.connect() as conn:
        skills = live_skills(conn, agent_id, user_id, declared)
        fp = fingerprint(conn, agent_id, user_id, embedder.model_id)
    history = history_examples(engine, agent_id, user_id, config, embedder, declared) if skills else []
    budget = Budget(
        wrong=config.applicability_wrong_budget,
        false=config.applicability_false_budget,
        min_negatives=config.applicability_min_negatives,
    )
    rule = fit(history, skills, VIEWS, budget, config.retrieval_min_similarity, nearest=NEAREST)
    if not dry_run:
        for attempt in (1, 2):
            try:
                with engine.begin() as conn:
                    save_rule(conn, agent_id, user_id, fp, embedder.model_id, rule, cycle)
                break
            except IntegrityError:
                # Two overlapping cycles (e.g. after a lease expired) replaced the tenant's rule at once:
                # the other one's insert won; replace it again (the rules describe the same live skills).
                if attempt == 2:
                    raise
    log.info(
        "applicability %s/%s: injects=%s examples=%d skills=%d",
        agent_id,
        user_id,
        rule.injects,
        len(history),
        len(skills),
    )
    return summary(rule, fp)
