"""``skillflow bench lifecycle``: shadow-evaluation and drift throughput over a large stored history.

Shadow: ``runs`` pending runs across ``tenants`` tenants, each with ``skills_per_tenant`` SHADOW skills
(hashing embedder), are drained with :func:`skillflow.lifecycle.shadow.drain_shadow_evaluations`; half of the
queries paraphrase a skill's trigger queries (they produce records), half are unrelated.
Drift: for each history size, ``skills`` ACTIVE skills each carry ``history / skills`` old activations
(already counted by a first check, which sets the watermark) plus ``new`` fresh activations; the timed
second check must cost the same at 10k and 100k history.
Rows are bulk-inserted (executemany, one transaction) into a fresh SQLite file per measurement.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, utcnow
from skillflow.lifecycle.drift import run_drift
from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skill_activations, workflow_memory
from skillflow.storage.skills import insert_skill

SHADOW_TARGET = 2000.0
INTENTS = ("cancel my reservation", "change the seat on my flight", "refund my order", "update my address")
NOISE = ("what is the weather", "tell me a joke", "how tall is everest", "translate hello to french")


@dataclass
class LifecycleBench:
    runs: int
    tenants: int
    batch_size: int
    shadow_seconds: float = 0.0
    shadow_runs_per_s: float = 0.0
    shadow_records: int = 0
    generate_seconds: float = 0.0
    drift: list[dict[str, Any]] = field(default_factory=list)

    @property
    def meets_target(self) -> bool:
        return self.shadow_runs_per_s >= SHADOW_TARGET

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shadow_target_runs_per_s": SHADOW_TARGET, "meets_target": self.meets_target}


def _engine(folder: Path, name: str) -> Engine:
    engine = make_engine(f"sqlite:///{folder / name}")
    migrate(engine)
    return engine


def _skill(engine: Engine, agent: str, user: str, intent: str, status: SkillStatus, embedder: HashingEmbedder) -> Any:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=agent,
            user_id=user,
            canonical_hash=f"{intent}:{agent}:{user}".encode().hex()[:64].ljust(64, "0"),
            name=intent.replace(" ", "-"),
            description=f"Use when the customer asks to {intent}.",
            content="---\nname: bench\n---\n",
            status=status,
            injection_role=InjectionRole.USER,
            trigger_queries=[intent, f"please {intent}", f"I want to {intent}"],
            baseline={"executions": 10, "success_rate": 0.9},
            actor="bench",
        )
        write_skill_vectors(conn, skill, embedder)
    return skill


def _run_row(i: int, agent: str, user: str, query: str, chash: str, at: Any) -> dict[str, Any]:
    return {
        "id": f"r{i:09d}",
        "agent_id": agent,
        "user_id": user,
        "query": query,
        "canonical_hash": chash,
        "step_count": 2,
        "outcome": "success" if i % 5 else "failure",
        "execution_outcome": "success",
        "outcome_source": "execution",
        "shadow_pending": 1,
        "created_at": at,
        "steps": [],
        "skills_activated": [],
    }


def shadow_bench(folder: Path, runs: int, tenants: int, batch_size: int) -> tuple[float, float, int]:
    """(generate seconds, drain seconds, records)."""
    embedder = HashingEmbedder()
    engine = _engine(folder, "shadow.db")
    skills = {}
    for t in range(tenants):
        for intent in INTENTS[:3]:
            skills[(t, intent)] = _skill(engine, "bench", f"user{t}", intent, SkillStatus.SHADOW, embedder)
    start = time.perf_counter()
    base = utcnow() + timedelta(seconds=1)
    rows = []
    for i in range(runs):
        t = i % tenants
        intent = INTENTS[i % len(INTENTS)]
        related = (i // len(INTENTS)) % 2 == 0
        query = f"please {intent} number {i % 97}" if related else f"{NOISE[i % len(NOISE)]} {i % 89}"
        skill = skills.get((t, intent))
        chash = skill.canonical_hash if skill is not None and i % 3 else "f" * 64
        rows.append(_run_row(i, "bench", f"user{t}", query, chash, base + timedelta(microseconds=i)))
    with engine.begin() as conn:
        for j in range(0, len(rows), 10_000):
            conn.execute(insert(workflow_memory), rows[j : j + 10_000])
    generated = time.perf_counter() - start
    config = PromotionConfig.model_validate(
        {"shadow_evaluation_enabled": True, "require_shadow": True, "shadow_evaluation_min_similarity": 0.6}
    )
    start = time.perf_counter()
    report = drain_shadow_evaluations(engine, config, embedder, timeout=3600, batch_size=batch_size)
    drained = time.perf_counter() - start
    engine.dispose()
    if report.claimed != runs:
        raise RuntimeError(f"drained {report.claimed} of {runs} runs")
    return generated, drained, report.records


def drift_bench(folder: Path, history: int, skills: int, new: int) -> dict[str, Any]:
    """Seconds of a drift check with ``new`` fresh activations per skill over ``history`` old ones."""
    embedder = HashingEmbedder()
    engine = _engine(folder, f"drift-{history}.db")
    active = [_skill(engine, "bench", f"user{s}", INTENTS[0], SkillStatus.ACTIVE, embedder) for s in range(skills)]
    base = utcnow() + timedelta(seconds=1)

    def activations(offset: int, per_skill: int) -> list[dict[str, Any]]:
        return [
            {
                "run_id": f"a{offset + k:09d}-{s}",
                "skill_id": sk.id,
                "agent_id": sk.agent_id,
                "user_id": sk.user_id,
                "canonical_hash": sk.canonical_hash,
                "outcome": "success" if k % 10 else "failure",
                "created_at": base + timedelta(milliseconds=offset + k),
            }
            for s, sk in enumerate(active)
            for k in range(per_skill)
        ]

    old = activations(0, history // skills)
    with engine.begin() as conn:
        for j in range(0, len(old), 10_000):
            conn.execute(insert(skill_activations), old[j : j + 10_000])
    config = PromotionConfig.model_validate({})
    start = time.perf_counter()
    run_drift(engine, config)  # first check over the whole history: sets each skill's watermark
    first = time.perf_counter() - start
    with engine.begin() as conn:
        conn.execute(insert(skill_activations), activations(history, new))
    start = time.perf_counter()
    report = run_drift(engine, config)
    second = time.perf_counter() - start
    engine.dispose()
    return {
        "history_activations": len(old),
        "skills": skills,
        "new_per_skill": new,
        "first_check_s": round(first, 4),
        "incremental_check_s": round(second, 4),
        "new_activations_per_s": round(skills * new / second, 1) if second else None,
        "checked": report.checked,
    }


def run(
    runs: int = 100_000,
    tenants: int = 20,
    batch_size: int = 1000,
    histories: tuple[int, ...] = (10_000, 100_000),
    skills: int = 20,
    new: int = 50,
) -> LifecycleBench:
    result = LifecycleBench(runs=runs, tenants=tenants, batch_size=batch_size)
    with tempfile.TemporaryDirectory(prefix="skillflow-bench-") as tmp:
        folder = Path(tmp)
        generated, drained, records = shadow_bench(folder, runs, tenants, batch_size)
        result.generate_seconds = round(generated, 3)
        result.shadow_seconds = round(drained, 3)
        result.shadow_runs_per_s = round(runs / drained, 1) if drained else 0.0
        result.shadow_records = records
        result.drift = [drift_bench(folder, h, skills, new) for h in histories]
    return result
