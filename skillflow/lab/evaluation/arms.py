"""Arm databases: fresh, independently created SQLite files; training ingest; one distillation; review.

Every arm gets its own database file, migrated from scratch, into which the simulator's training runs are
ingested through the capture API (the same seed and start time, so the same runs). The skill is
distilled ONCE on a separate training database by the real promotion cycle (``require_shadow=True``:
it lands in SHADOW), reviewed there (activated), and its stored SKILL.md is then installed byte for byte
into the skill arms: as SHADOW first, then explicitly activated as ``user`` or ``developer``. Each skill
arm's applicability rule is then fitted on its own history, as a cycle's calibration stage would
(:func:`calibrate_arm`), so ``prepare`` selects skills exactly as in production.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from skillflow.injection.embeddings import Embedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.config import PromotionConfig, get_settings
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.lab.simulator import SimReport, business_outcome, good_procedure, simulate_runs
from skillflow.lifecycle.decisions import activate_skill
from skillflow.promotion.calibrate import calibrate
from skillflow.promotion.cycle import run_partition
from skillflow.promotion.report import PromotionReport
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skillbox, workflow_memory
from skillflow.storage.skills import SkillRecord, get_skill, insert_skill, live_skill_for_class

AGENT_ID = "eval-airline"
USER_ID = "shared"
REVIEWER = "eval:reviewer"


class EvaluationSetupError(RuntimeError):
    """The harness could not build its arms (e.g. the training runs did not yield a skill for a class)."""


def eval_config(min_similarity: float | None = None) -> PromotionConfig:
    """The promotion config of every arm: the production defaults, with shadow review on and manual cycles.

    Built from code defaults (not the local TOML) so the evaluation is the same on every machine. Retrieval
    is exactly production's: the fitted rule (at most one skill) with ``retrieval_min_similarity`` as its
    lower bound — the production default unless ``min_similarity`` overrides it (then reported as such).
    """
    overrides: dict[str, Any] = {"require_shadow": True, "max_promotions_per_cycle": 20, "promotion_every_n_runs": 0}
    if min_similarity is not None:
        overrides["retrieval_min_similarity"] = min_similarity
    return PromotionConfig.model_validate(overrides)


def calibrate_arm(engine: Engine, config: PromotionConfig, embedder: Embedder) -> dict[str, Any]:
    """The calibration stage of a promotion cycle in an arm: fit and store the tenant's rule on its history."""
    return calibrate(engine, AGENT_ID, USER_ID, config, 1, embedder=embedder)


def fresh_database(workdir: Path, name: str) -> tuple[str, Engine]:
    """A new SQLite file (an existing one is removed first), migrated from scratch."""
    path = workdir / f"{name}.db"
    path.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate(engine)
    return url, engine


def handle(engine: Engine, config: PromotionConfig, embedder: Embedder) -> Skillflow:
    return Skillflow(
        agent_id=AGENT_ID,
        engine=engine,
        config=config,
        workflow_outcome_evaluator=business_outcome,
        embedder=embedder,
        continual_learning=True,
    )


def ingest_training(sf: Skillflow, runs: int, seed: int, start: datetime) -> SimReport:
    """The simulator's training traffic, recorded through the capture API (deterministic for seed/start)."""
    return simulate_runs(sf, runs, seed, user_id=USER_ID, start=start)


def target_classes(report: SimReport, intents: Iterable[str]) -> dict[str, str]:
    """Per intent, the class of the good procedure: the most common hash of its successful training runs."""
    out: dict[str, str] = {}
    for intent in intents:
        good = good_procedure(intent).name
        counts = Counter(
            r.canonical_hash
            for r in report.records
            if r.intent == intent and r.procedure == good and r.outcome == "success" and r.canonical_hash
        )
        if not counts:
            raise EvaluationSetupError(f"no successful training run of the good procedure for {intent}")
        out[intent] = counts.most_common(1)[0][0]
    return out


def training_state(engine: Engine) -> tuple[tuple[str | None, str | None, int], ...]:
    """Per (class, outcome) run counts of the arm's tenant: one GROUP BY, comparable across databases."""
    wm = workflow_memory
    q = (
        select(wm.c.canonical_hash, wm.c.outcome, func.count())
        .where(wm.c.agent_id == AGENT_ID, wm.c.user_id == USER_ID)
        .group_by(wm.c.canonical_hash, wm.c.outcome)
        .order_by(wm.c.canonical_hash, wm.c.outcome)
    )
    with engine.connect() as conn:
        return tuple((r[0], r[1], int(r[2])) for r in conn.execute(q))


def distill_and_review(
    engine: Engine, config: PromotionConfig, classes: Mapping[str, str]
) -> tuple[dict[str, SkillRecord], list[PromotionReport]]:
    """One real promotion cycle (offline distiller and judge) on the training DB, then the review: the
    SHADOW skill of each target class is activated at user authority. Other classes' skills stay SHADOW."""
    settings = get_settings(distiller="offline", judge="offline")
    reports = [run_partition(engine, AGENT_ID, USER_ID, config, settings=settings, actor="eval:promotion-cycle")]
    reviewed: dict[str, SkillRecord] = {}
    for intent, chash in classes.items():
        with engine.connect() as conn:
            skill = live_skill_for_class(conn, AGENT_ID, USER_ID, chash)
        if skill is None or skill.status != SkillStatus.SHADOW.value:
            reasons = [r for rep in reports for h, r in rep.skipped + [(h, "; ".join(x)) for h, x in rep.rejected]]
            why = next((r for rep in reports for h, r in rep.skipped if h == chash), None) or "; ".join(reasons[:3])
            raise EvaluationSetupError(f"no SHADOW skill was distilled for {intent} ({chash[:12]}): {why}")
        reviewed[intent] = activate_skill(engine, skill.id, "user", actor=REVIEWER, config=config)
    return reviewed, reports


def install_skill(
    engine: Engine, reviewed: SkillRecord, role: InjectionRole, embedder: Embedder, config: PromotionConfig
) -> SkillRecord:
    """Store the reviewed SKILL.md unchanged as SHADOW, embed it, then activate it explicitly with ``role``."""
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=AGENT_ID,
            user_id=USER_ID,
            canonical_hash=reviewed.canonical_hash,
            name=reviewed.name,
            description=reviewed.description,
            content=reviewed.content,
            status=SkillStatus.SHADOW,
            version=reviewed.version,
            preconditions=list(reviewed.preconditions or []),
            tools=list(reviewed.tools or []),
            trigger_queries=list(reviewed.trigger_queries or []),
            source_workflow_ids=list(reviewed.source_workflow_ids or []),
            baseline=reviewed.baseline,
            validation=reviewed.validation,
            prompt_version=reviewed.prompt_version,
            distiller=reviewed.distiller,
            actor="eval:install",
        )
        write_skill_vectors(conn, skill, embedder, config.max_trigger_queries)
    return activate_skill(engine, skill.id, role.value, actor=REVIEWER, config=config, embedder=embedder)


def stored_bodies(engine: Engine) -> dict[str, str]:
    """class hash -> SKILL.md of the ACTIVE skills, read back from the database."""
    q = select(skillbox.c.canonical_hash, skillbox.c.content).where(
        skillbox.c.agent_id == AGENT_ID, skillbox.c.user_id == USER_ID, skillbox.c.status == SkillStatus.ACTIVE.value
    )
    with engine.connect() as conn:
        return {str(r[0]): str(r[1]) for r in conn.execute(q)}


@dataclass
class Arm:
    """One arm: its own database and runtime handle, and the skills it holds (intent -> skill id)."""

    name: str
    url: str
    engine: Engine
    sf: Skillflow
    skills: dict[str, str]
    retrieves_workflows: bool = True
    applicability: dict[str, Any] | None = None  # the fitted rule's summary (skill arms)

    def skill(self, intent: str) -> SkillRecord | None:
        sid = self.skills.get(intent)
        if sid is None:
            return None
        with self.engine.connect() as conn:
            return get_skill(conn, sid)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "database": self.url, "skills": dict(self.skills)}
