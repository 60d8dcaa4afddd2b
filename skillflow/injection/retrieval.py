"""Skill applicability vectors and tenant-scoped, lifecycle-filtered skill search.

A skill's applicability is several vectors — one for name + description + preconditions and one per
sampled trigger query, never the procedure or tools — and its score is the maximum cosine similarity
over them (docs/design.md, Applicability). Lifecycle, agent and user filters are applied before top-k on every backend:
SQLite/PostgreSQL select only the tenant's vectors of that model for skills in that status and rank them
exactly with numpy; Oracle ranks in SQL with ``VECTOR_DISTANCE … FETCH FIRST``.

The numpy ranking prunes without approximating. Each cached skill keeps the direction ``u`` of the mean
``c = |c|·u`` of its vectors and two bounds on every score ``q·v`` of the skill: the ball
``q·c + r·|q|`` (``r = max |v - c|``) and the cone ``|q|·|v|·cos(max(0, angle(q, u) - phi))`` (``phi`` =
the widest angle between ``u`` and a vector of the skill). One product over the directions discards the
skills whose bound is below ``min_score`` (or below the k-th best score of the skills with the highest
bounds); only the survivors' vectors are scored, and every returned score is recomputed canonically
(float64, per row) so the result does not depend on which path produced it. All bounds absorb float32
rounding, so the result is exactly the brute-force one.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update

from skillflow.injection.embeddings import Embedder
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.storage.schema import skill_vectors, skillbox
from skillflow.storage.skills import SkillRecord

PROFILE = "profile"
PRUNE_MAX_FRACTION = 0.25  # more surviving skills than this → one full product is cheaper than a gather
PRUNE_MIN_VECTORS = 12_000  # below this (~2,000 skills) the full product costs less than the bounds
SPARE = 4
TRIGGER = "trigger"


@dataclass(frozen=True)
class ScoredSkill:
    """A retrieved skill with its match score (max similarity over its applicability vectors)."""

    skill_id: str
    name: str
    version: int
    score: float
    injection_role: str
    status: str
    content: str
    canonical_hash: str
    source_workflow_ids: tuple[str, ...]
    description: str

    @classmethod
    def from_row(cls, row: Mapping[Any, Any], score: float) -> ScoredSkill:
        """A ``skillbox`` row (id as ``id`` or ``skill_id``) with its match score."""
        return cls(
            skill_id=str(row["id"] if "id" in row else row["skill_id"]),
            name=row["name"],
            version=int(row["version"]),
            score=round(score, 6),
            injection_role=row["injection_role"],
            status=row["status"],
            content=row["content"],
            canonical_hash=row["canonical_hash"],
            source_workflow_ids=tuple(row["source_workflow_ids"] or ()),
            description=row["description"],
        )


def applicability_texts(
    name: str,
    description: str,
    preconditions: Sequence[str] | None,
    trigger_queries: Sequence[str] | None,
    max_triggers: int = 8,
) -> list[tuple[str, str]]:
    """``[("profile", name + description + preconditions), ("trigger", q) …]`` — never procedure or tools."""
    readable = name.replace("-", " ").replace("_", " ").strip()
    parts = [p for p in (readable, description.strip()) if p]
    pre = [p.strip() for p in (preconditions or []) if p and p.strip()]
    if pre:
        parts.append("Preconditions: " + "; ".join(pre))
    out: list[tuple[str, str]] = [(PROFILE, ". ".join(parts))]
    seen: set[str] = set()
    for query in trigger_queries or []:
        q = " ".join(str(query).split())
        if q and q.lower() not in seen:
            seen.add(q.lower())
            out.append((TRIGGER, q))
        if len(out) > max_triggers:
            break
    return out


def write_skill_vectors(conn: Connection, skill: SkillRecord, embedder: Embedder, max_triggers: int = 8) -> int:
    """Replace the skill's applicability vectors (delete + insert: idempotent); returns the row count."""
    texts = applicability_texts(skill.name, skill.description, skill.preconditions, skill.trigger_queries, max_triggers)
    matrix = embedder.embed([t for _, t in texts])
    conn.execute(delete(skill_vectors).where(skill_vectors.c.skill_id == skill.id))
    rows = [
        {
            "skill_id": skill.id,
            "ordinal": i,
            "agent_id": skill.agent_id,
            "user_id": skill.user_id,
            "kind": kind,
            "model_id": embedder.model_id,
            "embedding": matrix[i],
        }
        for i, (kind, _) in enumerate(texts)
    ]
    if rows:
        conn.execute(insert(skill_vectors), rows)
    # updated_at is part of the tenant cache's version stamp: new vectors invalidate it.
    conn.execute(
        update(skillbox).where(skillbox.c.id == skill.id).values(embedding_model=embedder.model_id, updated_at=utcnow())
    )
    return len(rows)


@dataclass(frozen=True)
class _Matrix:
    stamp: tuple[Any, ...]
    skill_ids: np.ndarray  # one entry per skill, aligned with ``starts``
    starts: np.ndarray  # first row of each skill in ``vectors`` (rows grouped by skill)
    counts: np.ndarray  # rows per skill
    vectors: np.ndarray  # float32 (n_vectors, dim)
    directions: np.ndarray  # float32 (n_skills, dim): direction u of each skill's mean vector
    lengths: np.ndarray  # |u| (≈ 1; tiny for a zero mean)
    centers: np.ndarray  # ball center c = centers·u
    radii: np.ndarray  # max |v - c|, rounded up
    cos_phi: np.ndarray  # cone half-angle phi around u, rounded up
    sin_phi: np.ndarray
    phi_sorted: np.ndarray  # ascending: how many skills are too wide for the cone to prune
    norm_max: np.ndarray  # max and min |v| of each skill
    norm_min: np.ndarray
    eps: float  # relative float32 rounding of a product with the query: ≤ dim·2⁻²⁴, doubled here
    vmax: float  # max |v|


def _matrix(stamp: tuple[Any, ...], ids: Sequence[str], vectors: np.ndarray) -> _Matrix:
    """Group rows (sorted by skill id) into skills and precompute the ball and cone bounds."""
    if not ids:
        none, e = np.empty(0, np.int64), np.empty(0)
        return _Matrix(stamp, none.astype(object), none, none, vectors, vectors, e, e, e, e, e, e, e, e, 0.0, 0.0)
    starts = np.asarray([i for i, sid in enumerate(ids) if i == 0 or sid != ids[i - 1]], np.int64)
    counts = np.diff(np.append(starts, len(ids)))
    # Row j of every skill that has one, for j = 0, 1, …: per-skill reductions without big temporaries.
    nth = [
        (slice(None) if has.all() else np.flatnonzero(has), starts[has] + j)
        for j in range(counts.max())
        for has in [counts > j]
    ]

    def dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # row-wise, accumulated in float64
        return np.asarray(np.einsum("ij,ij->i", a, b, dtype=np.float64))

    mean = np.zeros((starts.size, vectors.shape[1]))
    for skills, rows in nth:
        mean[skills] += vectors[rows]
    mean /= counts[:, None]
    centers = np.linalg.norm(mean, axis=1)
    directions = (mean / np.where(centers > 0, centers, 1)[:, None]).astype(np.float32)
    lengths = np.maximum(np.linalg.norm(directions.astype(np.float64), axis=1), 1e-300)
    ball_centers = (centers[:, None] * directions).astype(np.float32)
    radii2, phi, norm_max2, norm_min2 = (np.full(starts.size, x) for x in (0.0, 0.0, 0.0, np.inf))
    for skills, rows in nth:
        v = vectors[rows]
        diff = v - ball_centers[skills]
        norms2 = dots(v, v)
        along = dots(v, directions[skills]) / lengths[skills]
        angle = np.arctan2(np.sqrt(np.maximum(norms2 - along**2, 0)), along)  # of the row from its skill's u
        radii2[skills] = np.maximum(radii2[skills], dots(diff, diff))
        phi[skills] = np.maximum(phi[skills], angle)
        norm_max2[skills] = np.maximum(norm_max2[skills], norms2)
        norm_min2[skills] = np.minimum(norm_min2[skills], norms2)
    vmax = float(np.sqrt(norm_max2.max()))
    phi = np.minimum(phi + 1e-6, np.pi)
    return _Matrix(
        stamp=stamp,
        skill_ids=np.asarray([ids[i] for i in starts], dtype=object),
        starts=starts,
        counts=counts,
        vectors=vectors,
        directions=directions,
        lengths=lengths,
        centers=centers,
        radii=np.sqrt(radii2) * (1 + 1e-6) + 1e-7 * vmax,
        cos_phi=np.cos(phi),
        sin_phi=np.sin(phi),
        phi_sorted=np.sort(phi),
        norm_max=np.sqrt(norm_max2),
        norm_min=np.sqrt(norm_min2),
        eps=(vectors.shape[1] + 4) * 2.0**-23,
        vmax=vmax,
    )


class _TenantCache:
    """In-process cache of a tenant's vector matrix keyed by (db, tenant, model, status) + version stamp.

    Only candidate ranking uses it; the final rows are always re-read with the tenant and lifecycle
    filters, so a stale entry can at worst miss a skill, never surface a foreign or non-live one.
    """

    def __init__(self, max_entries: int = 64) -> None:
        # Keyed by the engine object (not its URL: two in-memory SQLite engines share a URL).
        self._data: weakref.WeakKeyDictionary[Engine, dict[tuple[str, ...], _Matrix]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._max = max_entries

    def get(self, engine: Engine, key: tuple[str, ...], stamp: tuple[Any, ...]) -> _Matrix | None:
        with self._lock:
            hit = self._data.get(engine, {}).get(key)
        return hit if hit is not None and hit.stamp == stamp else None

    def put(self, engine: Engine, key: tuple[str, ...], value: _Matrix) -> None:
        with self._lock:
            entries = self._data.setdefault(engine, {})
            if key not in entries and len(entries) >= self._max:
                entries.pop(next(iter(entries)))
            entries[key] = value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


CACHE = _TenantCache()


def _stamp(conn: Connection, agent_id: str, user_id: str) -> tuple[Any, ...]:
    # Every status change, edit and vector rewrite bumps skillbox.updated_at (derived figures do not), so the newest
    # updated_at of the tenant (any status) versions its matrix; with an index on (agent_id, user_id,
    # updated_at) this is one index seek. Skills are never deleted; the row fetch re-checks status anyway.
    newest = conn.execute(
        select(func.max(skillbox.c.updated_at)).where(skillbox.c.agent_id == agent_id, skillbox.c.user_id == user_id)
    ).scalar()
    return (newest,)


def _load_matrix(
    conn: Connection, agent_id: str, user_id: str, model_id: str, status: str, stamp: tuple[Any, ...]
) -> _Matrix:
    rows = conn.execute(
        select(skill_vectors.c.skill_id, skill_vectors.c.embedding)
        .join(skillbox, skillbox.c.id == skill_vectors.c.skill_id)
        .where(
            skill_vectors.c.agent_id == agent_id,
            skill_vectors.c.user_id == user_id,
            skill_vectors.c.model_id == model_id,
            skillbox.c.agent_id == agent_id,
            skillbox.c.user_id == user_id,
            skillbox.c.status == status,
        )
        .order_by(skill_vectors.c.skill_id, skill_vectors.c.ordinal)
    ).all()
    if not rows:
        return _matrix(stamp, [], np.zeros((0, 0), np.float32))
    dims = {len(r[1]) for r in rows}
    if len(dims) != 1:
        raise ValueError(f"skill vectors of model {model_id!r} have mixed dimensions")
    vectors = np.ascontiguousarray(np.vstack([r[1] for r in rows]), dtype=np.float32)
    return _matrix(stamp, [r[0] for r in rows], vectors)


def _rows(m: _Matrix, skills: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of ``skills``' vectors and the offset of each skill's first row among them."""
    counts = m.counts[skills]
    offsets = np.cumsum(counts) - counts
    return np.repeat(m.starts[skills] - offsets, counts) + np.arange(int(counts.sum())), offsets


def _exact(m: _Matrix, q: np.ndarray, skills: np.ndarray) -> np.ndarray:
    """Canonical scores: per row, a float64 sum of exact products (independent of the other rows)."""
    rows, offsets = _rows(m, skills)
    per_row = (m.vectors[rows].astype(np.float64) * q.astype(np.float64)).sum(axis=1)
    return np.asarray(np.maximum.reduceat(per_row, offsets), dtype=np.float64)


def _upper_bounds(m: _Matrix, q: np.ndarray) -> np.ndarray:
    """Per skill, a bound ≥ every float32 and float64 score of its vectors with ``q``."""
    q_norm = float(np.linalg.norm(q))
    dots = (m.directions @ q).astype(np.float64)  # q·u, off by at most eps/2·|u|·|q|
    ball = m.centers * dots + m.radii * q_norm
    # cos(max(0, angle(q, u) - phi)) grows with cos angle(q, u): evaluate it at the rounded-up cosine.
    cos_q = np.clip(dots / m.lengths / max(q_norm, 1e-300) + m.eps, -1.0, 1.0)
    cos_gap = np.where(cos_q >= m.cos_phi, 1.0, cos_q * m.cos_phi + np.sqrt((1 - cos_q) * (1 + cos_q)) * m.sin_phi)
    cone = q_norm * np.where(cos_gap >= 0, m.norm_max, m.norm_min) * cos_gap
    return np.asarray(np.minimum(ball, cone) + m.eps * m.vmax * q_norm, dtype=np.float64)


def _candidates(
    m: _Matrix, q: np.ndarray, k: int, min_score: float, max_fraction: float, min_vectors: int
) -> np.ndarray:
    """Ascending indices of the skills that can be in the top ``k``; every skill when too many survive."""
    n = m.starts.size
    if m.vectors.shape[0] < min_vectors:
        return np.arange(n)
    # Against min_score > 0, a skill wider than pi/2 - arccos(min_score) is pruned only by a query pointing
    # away from it, which embeddings practically never do: when too many are that wide, skip the bounds (a
    # speed choice only). Low thresholds still try, as the k-th best score may prune.
    if min_score > 0:
        wide = n - np.searchsorted(m.phi_sorted, np.pi / 2 - np.arccos(min(min_score, 1.0)))
        if wide > max_fraction * n:
            return np.arange(n)
    upper = _upper_bounds(m, q)
    cand = np.flatnonzero(upper >= min_score)
    if cand.size > k:  # the k best upper bounds name k real scores; the k-th best score is at least their min
        probe = cand[np.argpartition(-upper[cand], k - 1)[:k]]
        cand = cand[upper[cand] >= _exact(m, q, probe).min()]
    return np.arange(n) if cand.size > max_fraction * n else cand


def _top_k(
    m: _Matrix, q: np.ndarray, k: int, min_score: float, max_fraction: float, min_vectors: int
) -> list[tuple[int, float]]:
    """Exact top-``k`` (skill index, score ≥ min_score), best first, ties by skill order — as brute force."""
    n = m.starts.size
    tol = m.eps * m.vmax * float(np.linalg.norm(q))  # |float32 score - canonical score|
    cand = _candidates(m, q, k, min_score, max_fraction, min_vectors)
    if cand.size == 0:
        return []
    if cand.size == n:  # float32 scores of every skill (within ``tol`` of the canonical ones)
        approx = np.maximum.reduceat(m.vectors @ q, m.starts)
    else:
        rows, offsets = _rows(m, cand)
        approx = np.maximum.reduceat(m.vectors[rows] @ q, offsets)
    near = approx >= min_score - tol
    cand, approx = cand[near], approx[near]
    if cand.size > k:  # only skills within rounding of the k-th best can be in the top k
        cand = cand[approx >= np.partition(approx, -k)[-k] - 2 * tol]
    if cand.size == 0:
        return []
    scores = _exact(m, q, cand)
    keep = np.flatnonzero(scores >= min_score)
    order = keep[np.argsort(-scores[keep], kind="stable")][:k]
    return [(int(cand[i]), float(scores[i])) for i in order]


def _rank_numpy(
    conn: Connection,
    query_vec: np.ndarray,
    model_id: str,
    agent_id: str,
    user_id: str,
    status: str,
    k: int,
    min_score: float,
) -> list[tuple[str, float]]:
    stamp = _stamp(conn, agent_id, user_id)
    key = (agent_id, user_id, model_id, status)
    matrix = CACHE.get(conn.engine, key, stamp)
    if matrix is None:
        matrix = _load_matrix(conn, agent_id, user_id, model_id, status, stamp)
        CACHE.put(conn.engine, key, matrix)
    if matrix.vectors.shape[0] == 0:
        return []
    q = np.asarray(query_vec, dtype=np.float32).ravel()
    if q.shape[0] != matrix.vectors.shape[1]:
        raise ValueError(f"query vector has dimension {q.shape[0]}, skill vectors {matrix.vectors.shape[1]}")
    ranked = _top_k(matrix, q, k, min_score, PRUNE_MAX_FRACTION, PRUNE_MIN_VECTORS)
    return [(str(matrix.skill_ids[i]), score) for i, score in ranked]


def _rank_oracle(
    conn: Connection,
    query_vec: np.ndarray,
    model_id: str,
    agent_id: str,
    user_id: str,
    status: str,
    k: int,
    min_score: float,
) -> list[tuple[str, float]]:
    import array

    from skillflow.storage.oracle_files import load_query

    sql = load_query("search_skills")

    params = {
        "query_vec": array.array("f", np.asarray(query_vec, dtype=np.float32).ravel().tolist()),
        "agent_id": agent_id,
        "user_id": user_id,
        "model_id": model_id,
        "status": status,
        "min_score": min_score,
        "k": k,
    }
    return [(str(r[0]), float(r[1])) for r in conn.execute(text(sql), params)]


def search_skills(
    conn: Connection,
    query_vec: np.ndarray,
    model_id: str,
    agent_id: str,
    user_id: str,
    status: SkillStatus | str = SkillStatus.ACTIVE,
    k: int = 2,
    min_score: float = 0.70,
) -> list[ScoredSkill]:
    """Top-``k`` skills of exactly (agent_id, user_id) in ``status`` scoring ≥ ``min_score``, best first."""
    if k <= 0:
        return []
    status = str(status.value if isinstance(status, SkillStatus) else status)
    if conn.dialect.name == "oracle":
        ranked = _rank_oracle(conn, query_vec, model_id, agent_id, user_id, status, k, min_score)
    else:  # a few spare candidates in case a cached skill left ``status`` since its matrix was stamped
        ranked = _rank_numpy(conn, query_vec, model_id, agent_id, user_id, status, k + SPARE, min_score)
    if not ranked:
        return []
    rows = {
        r["id"]: r
        for r in conn.execute(
            select(
                skillbox.c.id,
                skillbox.c.name,
                skillbox.c.version,
                skillbox.c.injection_role,
                skillbox.c.status,
                skillbox.c.content,
                skillbox.c.canonical_hash,
                skillbox.c.source_workflow_ids,
                skillbox.c.description,
            ).where(
                skillbox.c.id.in_([sid for sid, _ in ranked]),
                skillbox.c.agent_id == agent_id,
                skillbox.c.user_id == user_id,
                skillbox.c.status == status,
            )
        ).mappings()
    }
    out: list[ScoredSkill] = []
    for sid, score in ranked:
        row = rows.get(sid)
        if row is None:  # changed status since the cached matrix was built
            continue
        out.append(ScoredSkill.from_row({**row, "id": sid}, score))
    return out[:k]
