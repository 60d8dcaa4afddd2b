"""Batched SHADOW-skill matching for shadow evaluation on SQLite/PostgreSQL.

The same scoring as :func:`skillflow.injection.retrieval.search_skills` — exact agent, user, lifecycle and model
filters applied in SQL before ranking; score = maximum cosine over a skill's applicability vectors;
threshold, then top-k — but one vector load per tenant per batch and one matrix product for all of the
tenant's runs, instead of a search per run. Oracle ranks in SQL through ``search_skills`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import Connection, select

from skillflow.kernel.models import SkillStatus
from skillflow.storage.schema import skill_vectors, skillbox


@dataclass(frozen=True)
class Candidate:
    skill_id: str
    version: int
    canonical_hash: str
    created_at: datetime
    source_ids: frozenset[str]


@dataclass(frozen=True)
class TenantMatrix:
    candidates: list[Candidate]
    starts: np.ndarray  # first vector row of each candidate
    vectors: np.ndarray  # (n_vectors, dim) float32, grouped by candidate


def load_tenant(conn: Connection, agent_id: str, user_id: str, model_id: str) -> TenantMatrix:
    """Every SHADOW skill vector of exactly this tenant and model (one query)."""
    sv, sb = skill_vectors.c, skillbox.c
    rows = conn.execute(
        select(sv.skill_id, sv.embedding, sb.version, sb.canonical_hash, sb.created_at, sb.source_workflow_ids)
        .join(skillbox, sb.id == sv.skill_id)
        .where(
            sv.agent_id == agent_id,
            sv.user_id == user_id,
            sv.model_id == model_id,
            sb.agent_id == agent_id,
            sb.user_id == user_id,
            sb.status == SkillStatus.SHADOW.value,
        )
        .order_by(sv.skill_id, sv.ordinal)
    ).all()
    candidates: list[Candidate] = []
    starts: list[int] = []
    for i, r in enumerate(rows):
        if i == 0 or r.skill_id != rows[i - 1].skill_id:
            starts.append(i)
            candidates.append(
                Candidate(
                    r.skill_id, int(r.version), r.canonical_hash, r.created_at, frozenset(r.source_workflow_ids or ())
                )
            )
    if not rows:
        return TenantMatrix([], np.zeros(0, np.int64), np.zeros((0, 0), np.float32))
    vectors = np.ascontiguousarray(np.vstack([r.embedding for r in rows]), dtype=np.float32)
    return TenantMatrix(candidates, np.asarray(starts, np.int64), vectors)


def top_k(matrix: TenantMatrix, queries: np.ndarray, k: int, min_score: float) -> list[list[tuple[Candidate, float]]]:
    """Per query row: up to ``k`` candidates scoring ``>= min_score``, best first."""
    if not matrix.candidates or k <= 0:
        return [[] for _ in range(len(queries))]
    q = np.asarray(queries, dtype=np.float32)
    if q.shape[1] != matrix.vectors.shape[1]:
        raise ValueError(f"query vectors have dimension {q.shape[1]}, skill vectors {matrix.vectors.shape[1]}")
    per_skill = np.maximum.reduceat(q @ matrix.vectors.T, matrix.starts, axis=1)
    out: list[list[tuple[Candidate, float]]] = []
    for row in per_skill:
        keep = np.flatnonzero(row >= min_score)
        order = keep[np.argsort(-row[keep], kind="stable")][:k]
        out.append([(matrix.candidates[i], float(row[i])) for i in order])
    return out
