"""The calibration stage of a promotion cycle: fit the tenant's applicability rule on its history and store it.

Reads the tenant's newest runs (``applicability_history_runs``), turns each into an example at its probe
moment with :func:`skillflow.injection.history.examples` — the conversation so far in every view (redacted
and vectorised exactly like live requests), its intent (the state-changing call its procedure ends in) and
the calls before it — and fits :func:`skillflow.injection.calibration.fit` against the live skills,
grouped by conversation. The rule is stored with the live skills' fingerprint (one row per tenant,
replaced: a re-run converges) and with the key of the fit's inputs: a cycle or status change whose inputs
are unchanged since the last fit keeps the stored rule instead of fitting it again (docs/guide/runtime.md,
"When the rule is refitted").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from skillflow import __version__
from skillflow.injection.applicability import (
    RuleDocumentError,
    fingerprint,
    live_skills,
    rule_document,
    rule_from_document,
    save_rule,
)
from skillflow.injection.calibration import Budget, fit
from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.injection.history import HistoryRun, examples
from skillflow.injection.rule import NEVER, LiveSkill, Rule
from skillflow.injection.views import NEAREST, VIEWS
from skillflow.kernel.config import PromotionConfig, get_settings
from skillflow.promotion.redact import redact_query
from skillflow.storage.schema import applicability_rules, workflow_memory
from skillflow.storage.skills import declared_state_changes

log = logging.getLogger("skillflow.promotion.calibrate")

FIT_KEY = "fit_key"  # where the stored rule document keeps the key of the inputs it was fitted on


def declared_tools(engine: Engine, agent_id: str) -> dict[str, bool]:
    """Tools the agent declared as state-changing (or not) when registering its toolbox."""
    with engine.connect() as conn:
        return declared_state_changes(conn, agent_id)


def history_runs(engine: Engine, agent_id: str, user_id: str, config: PromotionConfig) -> list[HistoryRun]:
    """The tenant's newest hashed runs the rule is fitted on (oldest first)."""
    wm = workflow_memory
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                wm.c.id,
                wm.c.query,
                wm.c.conversation_id,
                wm.c.segment_index,
                wm.c.tool_sequence,
                wm.c.canonical_hash,
                wm.c.outcome,
            )
            .where(wm.c.agent_id == agent_id, wm.c.user_id == user_id, wm.c.canonical_hash.is_not(None))
            .order_by(wm.c.created_at.desc(), wm.c.id)
            .limit(config.applicability_history_runs)
        ).all()
    return [
        HistoryRun(
            str(r.id), str(r.query or ""), str(r.tool_sequence or ""), str(r.canonical_hash), r.conversation_id,
            r.segment_index, str(r.outcome),
        )
        for r in reversed(rows)
    ]  # fmt: skip


@lru_cache(maxsize=1)
def fit_code() -> str:
    """A digest of the modules that decide what a fit produces: a changed fit refits every tenant once, even
    at an unchanged package version (an upgrade never keeps a rule the new code would not have fitted)."""
    from skillflow.injection import calibration, history, procedures, rule, views

    digest = hashlib.sha256()
    for module in (calibration, history, procedures, rule, views):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def fit_key(
    fp: str,
    model_id: str,
    skills: Sequence[LiveSkill],
    runs: Sequence[HistoryRun],
    declared: Mapping[str, bool] | None,
    config: PromotionConfig,
) -> str:
    """sha256 over everything the fit reads: the live skills as the rule sees them, the runs it is fitted on,
    the declared tools, the embedding model, the configuration values it uses, the package's version and a
    digest of the fitting code (:func:`fit_code`)."""
    doc = {
        "version": __version__,
        "code": fit_code(),
        "views": [list(VIEWS), list(NEAREST)],
        "model": model_id,
        "fingerprint": fp,
        "skills": [[s.skill_id, s.canonical_hash, s.intent, list(s.procedure), list(s.rank)] for s in skills],
        "runs": [
            [r.run_id, r.query, r.tool_sequence, r.canonical_hash, r.conversation_id, r.segment_index, r.outcome]
            for r in runs
        ],
        "declared": sorted((declared or {}).items()),
        "config": [
            config.applicability_wrong_budget,
            config.applicability_false_budget,
            config.applicability_min_negatives,
            config.applicability_history_runs,
            config.retrieval_min_similarity,
        ],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def stored_fit(engine: Engine, agent_id: str, user_id: str, key: str) -> Rule | None:
    """The tenant's stored rule when it was fitted on exactly the inputs ``key`` names, else None."""
    with engine.connect() as conn:
        doc = conn.execute(
            select(applicability_rules.c.rule).where(
                applicability_rules.c.agent_id == agent_id, applicability_rules.c.user_id == user_id
            )
        ).scalar()
    if not isinstance(doc, Mapping) or doc.get(FIT_KEY) != key:
        return None
    try:
        return rule_from_document(doc)
    except RuleDocumentError:  # damaged in the database: fitted again, as if it were not there
        return None


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
        "opening_floors": {k: (None if v == NEVER else round(v, 4)) for k, v in sorted(rule.opening_floors.items())},
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
    """Fit and (unless ``dry_run``) store the tenant's rule for its live skills; returns the report summary.

    When the stored rule was fitted on the same inputs (:func:`fit_key`) it is kept as it is (same row, same
    cycle) and its summary returned: the fit is deterministic, so fitting again would store the same rule.
    """
    embedder = embedder or get_embedder(get_settings().embedder)
    declared = declared_tools(engine, agent_id) or None
    with engine.connect() as conn:
        skills = live_skills(conn, agent_id, user_id, declared)
        fp = fingerprint(conn, agent_id, user_id, embedder.model_id)
    runs = history_runs(engine, agent_id, user_id, config) if skills else []
    key = fit_key(fp, embedder.model_id, skills, runs, declared, config)
    kept = stored_fit(engine, agent_id, user_id, key)
    if kept is not None:
        log.info("applicability %s/%s: inputs unchanged, the stored rule is kept", agent_id, user_id)
        return summary(kept, fp)
    history = examples(runs, embedder, VIEWS, redact_query, declared)
    rule = fit(history, skills, VIEWS, Budget.of(config), config.retrieval_min_similarity, nearest=NEAREST)
    if not dry_run:
        for attempt in (1, 2):
            try:
                with engine.begin() as conn:
                    save_rule(conn, agent_id, user_id, fp, embedder.model_id, rule, cycle)
                    conn.execute(
                        update(applicability_rules)
                        .where(applicability_rules.c.agent_id == agent_id, applicability_rules.c.user_id == user_id)
                        .values(rule={**rule_document(rule), FIT_KEY: key})
                    )
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
