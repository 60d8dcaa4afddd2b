"""Builders shared by the lifecycle tests: a tenant's runs and skills with applicability vectors."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from skillflow.capture.outcome import Workflow
from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step, utcnow
from skillflow.runtime import Skillflow
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import SkillRecord, insert_skill
from tests.support import patient_capture

AGENT = "agent"
USER = "u1"
EMBEDDER = HashingEmbedder()
TRIGGERS = ["cancel my reservation", "please cancel my flight booking", "I want to cancel the reservation"]
CANCEL_TOOLS = ["get_reservation_details", "cancel_reservation"]


def config(**overrides: Any) -> PromotionConfig:
    base: dict[str, Any] = {
        "require_shadow": True,
        "shadow_evaluation_enabled": True,
        "shadow_evaluation_min_similarity": 0.6,
        "shadow_readiness_min_observations": 3,
    }
    return PromotionConfig.model_validate({**base, **overrides})


def cancel_steps(fail: bool = False) -> list[Step]:
    return [
        Step("get_reservation_details", {"reservation_id": "R1"}, {"status": "ok"}),
        Step("cancel_reservation", {"reservation_id": "R1"}, None, error="Boom" if fail else None),
    ]


def other_steps() -> list[Step]:
    return [Step("get_reservation_details", {"reservation_id": "R1"}, {"status": "ok"}), Step("think", {"x": 1})]


def business(workflow: Workflow) -> bool | None:
    """The test's business outcome: ``metadata["ok"]`` when given, else the execution outcome."""
    value = workflow.metadata.get("ok")
    return None if value is None else bool(value)


def sf(engine: Engine, cfg: PromotionConfig | None = None, agent: str = AGENT) -> Skillflow:
    with patient_capture():
        flow = Skillflow(
            agent_id=agent,
            engine=engine,
            config=cfg or config(),
            continual_learning=True,
            workflow_outcome_evaluator=business,
        )
    flow.register_tools([*CANCEL_TOOLS, "think"])
    return flow


def record(
    engine: Engine,
    query: str = "cancel my reservation please",
    *,
    user: str = USER,
    agent: str = AGENT,
    steps: list[Step] | None = None,
    at: datetime | None = None,
    skills: tuple[str, ...] = (),
    cfg: PromotionConfig | None = None,
    ok: bool | None = None,
) -> str:
    res = sf(engine, cfg, agent).record_run(
        query,
        user,
        steps if steps is not None else cancel_steps(),
        created_at=at,
        skills_activated=skills,
        metadata={} if ok is None else {"ok": ok},
        strict=True,
    )
    return res.run_id


def class_hash(engine: Engine, run_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(select(workflow_memory.c.canonical_hash).where(workflow_memory.c.id == run_id)).scalar()
        )


def make_skill(
    engine: Engine,
    canonical_hash: str,
    *,
    status: SkillStatus = SkillStatus.SHADOW,
    user: str = USER,
    agent: str = AGENT,
    sources: list[str] | None = None,
    tools: list[str] | None = None,
    baseline: float = 0.9,
    role: InjectionRole = InjectionRole.USER,
    name: str = "cancel-reservation",
) -> SkillRecord:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=agent,
            user_id=user,
            canonical_hash=canonical_hash,
            name=name,
            description="Use when a customer asks to cancel an existing reservation.",
            content="---\nname: cancel-reservation\n---\nbody",
            status=status,
            injection_role=role,
            tools=tools if tools is not None else list(CANCEL_TOOLS),
            trigger_queries=TRIGGERS,
            source_workflow_ids=sources or [],
            baseline={"executions": 10, "success_rate": baseline},
            preconditions=["the reservation exists"],
            actor="test",
        )
        write_skill_vectors(conn, skill, EMBEDDER)
        return skill


def later(seconds: float = 1.0) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


def earlier(days: float = 1.0) -> datetime:
    return utcnow() - timedelta(days=days)


def database_with_skill(path: Any, status: SkillStatus = SkillStatus.ACTIVE) -> tuple[str, SkillRecord]:
    """A migrated SQLite database at ``path`` holding one ``cancel-reservation`` skill of tenant a/u; its URL."""
    from skillflow.storage.engine import make_engine
    from skillflow.storage.migrations import migrate

    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        skill = insert_skill(
            conn, agent_id="a", user_id="u", canonical_hash="h", name="cancel-reservation",
            description="Cancel a reservation", content="---\nname: cancel-reservation\n---\nbody\n", status=status,
        )  # fmt: skip
    engine.dispose()
    return url, skill
