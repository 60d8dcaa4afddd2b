"""``skillflow bench retrieval``: skill search latency vs a numpy floor, embedding latency, precision@1.

Latency: per size, a fresh SQLite file holds N ACTIVE skills for the measured tenant (bank skills with
real vectors + filler, ``vectors_per_skill`` each) plus N/10 skills of another tenant; each query times
``search_skills`` (connection checkout, version stamp, cached matrix, exact pruned max-over-vectors
ranking, row fetch) excluding the query embedding, next to the bare numpy brute force over the same matrix.
Filler ``random``: i.i.d. random unit vectors — a skill whose vectors are unrelated to each other, the worst
case for the centroid/radius bound (nothing is pruned); ``text``: template intents of one office-documents
domain (verb × object × context, profile + trigger queries) embedded with the bench's embedder — real
within-skill geometry and many near-duplicate neighbours.
Precision: tenants with 5, 25 and 100 skills (bank intents + distractors) answer the bank's held-out
paraphrases through the real write/search path; a query for an intent outside the pool that retrieves
anything counts as a wrong skill.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, insert, text

from skillflow.injection.embeddings import Embedder, get_embedder
from skillflow.injection.retrieval import CACHE, applicability_texts, search_skills, write_skill_vectors
from skillflow.kernel.models import SkillStatus, new_id, utcnow
from skillflow.lab.bench.capture_bench import load_average
from skillflow.lab.bench.paraphrase_bank import BANK, Intent, distractors
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skill_vectors, skillbox
from skillflow.storage.skills import insert_skill, live_keys

FILLERS = ("random", "text")
TARGET_P95_MS = 2.0
TARGET_PRECISION = 0.9
AGENT = "bench-agent"


class CachedEmbedder:
    """Embeds each distinct text once (the bench re-uses bank texts across tenants)."""

    def __init__(self, base: Embedder) -> None:
        self.base, self.model_id, self.dim = base, base.model_id, base.dim
        self._memo: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.base.embed(missing), strict=True))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(np.vstack([self._memo[t] for t in texts]), dtype=np.float32)


@dataclass(frozen=True)
class LatencyRow:
    skills: int
    vectors: int
    queries: int
    p50_ms: float
    p95_ms: float
    floor_p50_ms: float
    floor_p95_ms: float
    cold_load_ms: float


@dataclass(frozen=True)
class PrecisionRow:
    skills_per_tenant: int
    tenants: int
    queries: int
    precision_at_1: float
    hit_at_1: float
    wrong_skill_rate: float
    miss_rate: float
    out_of_pool_queries: int
    out_of_pool_wrong_rate: float


@dataclass(frozen=True)
class RetrievalBench:
    backend: str
    embedder: str
    threshold: float
    vectors_per_skill: int
    intents: int
    tenant_index: bool
    latency: list[LatencyRow] = field(default_factory=list)
    filler: str = "random"
    load_average: float | None = None  # 1-minute load average when the latency runs started
    embed_p50_ms: float | None = None
    embed_p95_ms: float | None = None
    precision: list[PrecisionRow] = field(default_factory=list)
    target_p95_ms: float = TARGET_P95_MS
    target_precision: float = TARGET_PRECISION

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000.0


def _bulk_skills(engine: Engine, user: str, matrices: list[np.ndarray], model_id: str) -> None:
    now = utcnow()
    skills, vectors = [], []
    for i, mat in enumerate(matrices):
        sid, chash = new_id(), f"{user}-{i:06d}"
        skills.append(
            {
                "id": sid,
                "agent_id": AGENT,
                "user_id": user,
                "canonical_hash": chash,
                "version": 1,
                "name": f"skill-{i}",
                "description": "bench skill",
                "status": SkillStatus.ACTIVE.value,
                **live_keys(AGENT, user, chash, f"skill-{i}", True),
                "content": f"SKILL.md {i}",
                "prompt_version": "bench",
                "distiller": "bench",
                "embedding_model": model_id,
                "injection_role": "user",
                "created_at": now,
                "updated_at": now,
                "activated_at": now,
            }
        )
        for j, vec in enumerate(mat):
            kind = "profile" if j == 0 else "trigger"
            vectors.append(
                {
                    "skill_id": sid,
                    "ordinal": j,
                    "agent_id": AGENT,
                    "user_id": user,
                    "kind": kind,
                    "model_id": model_id,
                    "embedding": vec,
                }
            )
    with engine.begin() as conn:
        conn.execute(insert(skillbox), skills)
        conn.execute(insert(skill_vectors), vectors)


def _random_unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    return np.asarray(mat / np.linalg.norm(mat, axis=1, keepdims=True), dtype=np.float32)


_VERBS = (
    "export", "archive", "rename", "share", "print", "translate", "schedule", "summarize", "duplicate", "delete",
    "restore", "encrypt", "compress", "publish", "review", "approve", "tag", "merge", "split", "sync", "upload",
    "download", "lock", "convert", "proofread",
)  # fmt: skip
_OBJECTS = (
    "quarterly sales report", "meeting notes", "team calendar", "project roadmap", "expense spreadsheet",
    "customer survey", "newsletter draft", "warehouse inventory list", "vacation photo album", "recipe collection",
    "training slides", "product catalog", "podcast transcript", "employee handbook", "press release",
    "supplier contract", "board minutes", "budget forecast", "onboarding checklist", "marketing brochure",
    "research paper", "invoice batch", "timesheet", "style guide", "security policy", "release notes",
    "floor plan", "sales pitch deck", "job description", "travel itinerary", "grant proposal", "user manual",
    "price list", "incident report", "lesson plan", "event program", "annual review", "shipping manifest",
    "menu card", "audit log",
)  # fmt: skip
_CONTEXTS = (
    "for the Berlin office", "before Friday", "for the board meeting", "in the shared drive", "for the new hire",
    "from last quarter", "for the marketing team", "on the intranet", "for the audit", "in the client workspace",
)  # fmt: skip
_TRIGGERS = (
    "please {v} my {o} {c}", "I need to {v} the {o} {c}", "can you {v} the {o} {c} for me", "{v} our {o} {c}",
    "help me {v} the {o} {c}", "I'd like you to {v} the {o} {c}", "could you {v} my {o} {c} now",
    "time to {v} the {o} {c}",
)  # fmt: skip


def text_filler(embedder: Embedder, n: int, vectors_per_skill: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` distinct template intents (verb × object × context) embedded as profile + trigger vectors."""
    combos = [(v, o, c) for v in _VERBS for o in _OBJECTS for c in _CONTEXTS]
    if n > len(combos):
        raise ValueError(f"text filler has {len(combos)} intents, {n} requested")
    texts = []
    for i in rng.permutation(len(combos))[:n]:
        v, o, c = combos[int(i)]
        triggers = [t.format(v=v, o=o, c=c) for t in _TRIGGERS]
        name, description = f"{v}-{o}".replace(" ", "-"), f"{v.capitalize()} the {o} {c} for the user."
        group = applicability_texts(name, description, [f"The {o} exists"], triggers, vectors_per_skill - 1)
        texts.append([t for _, t in group][:vectors_per_skill])
    flat = embedder.embed([t for group in texts for t in group])
    return np.split(flat, np.cumsum([len(g) for g in texts])[:-1]) if texts else []


PROPOSED_INDEX = "create index if not exists ix_skillbox_tenant_updated on skillbox (agent_id, user_id, updated_at)"


def latency(
    size: int,
    embedder: Embedder,
    queries: np.ndarray,
    workdir: Path,
    vectors_per_skill: int,
    repeats: int,
    threshold: float,
    tenant_index: bool = True,
    filler: str = "random",
) -> LatencyRow:
    engine = make_engine(f"sqlite:///{workdir / f'latency-{size}.db'}")
    migrate(engine)
    with engine.begin() as conn:  # migration 004 ships the index; --no-tenant-index measures without it
        conn.execute(text(PROPOSED_INDEX if tenant_index else "drop index if exists ix_skillbox_tenant_updated"))
    rng = np.random.default_rng(size)
    bank = [
        embedder.embed([t for _, t in applicability_texts(b.name, b.description, b.preconditions, b.triggers)])
        for b in BANK
    ]
    missing = max(0, size - len(bank))
    if filler == "text":
        mats = bank[:size] + text_filler(embedder, missing, vectors_per_skill, rng)
    elif filler == "random":
        mats = bank[:size] + [_random_unit(rng, vectors_per_skill, embedder.dim) for _ in range(missing)]
    else:
        raise ValueError(f"filler must be one of {FILLERS}, got {filler!r}")
    _bulk_skills(engine, "latency", mats, embedder.model_id)
    _bulk_skills(
        engine,
        "noise",
        [_random_unit(rng, vectors_per_skill, embedder.dim) for _ in range(max(1, size // 10))],
        embedder.model_id,
    )
    CACHE.clear()

    def one(q: np.ndarray) -> None:
        with engine.connect() as conn:
            search_skills(conn, q, embedder.model_id, AGENT, "latency", SkillStatus.ACTIVE, 2, threshold)

    t0 = time.perf_counter()
    one(queries[0])
    cold = time.perf_counter() - t0
    timings = []
    for i in range(repeats):
        t0 = time.perf_counter()
        one(queries[i % len(queries)])
        timings.append(time.perf_counter() - t0)
    matrix = np.ascontiguousarray(np.vstack(mats), dtype=np.float32)
    starts = np.cumsum([0] + [m.shape[0] for m in mats[:-1]])
    floor = []
    for i in range(repeats):
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        scores = np.maximum.reduceat(matrix @ q, starts)
        keep = np.flatnonzero(scores >= threshold)
        keep[np.argsort(-scores[keep])][:2]
        floor.append(time.perf_counter() - t0)
    engine.dispose()
    return LatencyRow(
        size,
        int(matrix.shape[0]),
        repeats,
        _pct(timings, 50),
        _pct(timings, 95),
        _pct(floor, 50),
        _pct(floor, 95),
        cold * 1000,
    )


def _add(engine: Engine, user: str, intent: Intent, embedder: Embedder, i: int) -> str:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=AGENT,
            user_id=user,
            canonical_hash=f"{user}-{i}",
            name=intent.name,
            description=intent.description,
            content=f"SKILL.md of {intent.name}",
            status=SkillStatus.ACTIVE,
            preconditions=list(intent.preconditions),
            trigger_queries=list(intent.triggers),
        )
        write_skill_vectors(conn, skill, embedder)
    return skill.id


def precision(size: int, embedder: Embedder, engine: Engine, rounds: int, threshold: float) -> PrecisionRow:
    fill = distractors()
    correct = wrong = miss = n = oop = oop_wrong = 0
    for r in range(rounds):
        rng = random.Random(size * 1000 + r)
        core = rng.sample(list(BANK), min(size, len(BANK)))
        pool = core + rng.sample(fill, max(0, size - len(core)))
        user = f"precision-{size}-{r}"
        ids = {intent.name: _add(engine, user, intent, embedder, i) for i, intent in enumerate(pool)}
        for intent in BANK:
            expected = ids.get(intent.name)
            for query in intent.held_out:
                with engine.connect() as conn:
                    hits = search_skills(
                        conn, embedder.embed([query])[0], embedder.model_id, AGENT, user, "active", 1, threshold
                    )
                got = hits[0].skill_id if hits else None
                if expected is None:
                    oop += 1
                    oop_wrong += got is not None
                    continue
                n += 1
                correct += got == expected
                wrong += got is not None and got != expected
                miss += got is None
    retrieved = correct + wrong
    return PrecisionRow(
        skills_per_tenant=size,
        tenants=rounds,
        queries=n,
        precision_at_1=round(correct / retrieved, 4) if retrieved else 0.0,
        hit_at_1=round(correct / n, 4) if n else 0.0,
        wrong_skill_rate=round(wrong / n, 4) if n else 0.0,
        miss_rate=round(miss / n, 4) if n else 0.0,
        out_of_pool_queries=oop,
        out_of_pool_wrong_rate=round(oop_wrong / oop, 4) if oop else 0.0,
    )


def embed_latency(embedder: Embedder, texts: Sequence[str], n: int = 50) -> tuple[float, float]:
    embedder.embed([texts[0]])  # load + warm up
    timings = []
    for i in range(n):
        t0 = time.perf_counter()
        embedder.embed([texts[i % len(texts)]])
        timings.append(time.perf_counter() - t0)
    return _pct(timings, 50), _pct(timings, 95)


def run(
    sizes: Sequence[int] = (100, 1000, 10_000),
    pool_sizes: Sequence[int] = (5, 25, 100),
    embedder_name: str = "minilm",
    vectors_per_skill: int = 6,
    repeats: int = 300,
    rounds: int = 5,
    threshold: float = 0.70,
    tenant_index: bool = True,
    progress: Callable[[str], None] | None = None,
    filler: str = "random",
) -> RetrievalBench:
    say = progress or (lambda _msg: None)
    base = get_embedder(embedder_name)
    embedder = CachedEmbedder(base)
    held_out = [t for b in BANK for t in b.held_out]
    say(f"embedding latency ({base.model_id})")
    e50, e95 = embed_latency(base, held_out)
    queries = embedder.embed(held_out)
    rows, prec = [], []
    load = load_average()
    with tempfile.TemporaryDirectory(prefix="skillflow-bench-retrieval-") as tmp:
        for size in sizes:
            say(f"latency at {size:,} skills")
            rows.append(
                latency(size, embedder, queries, Path(tmp), vectors_per_skill, repeats, threshold, tenant_index, filler)
            )
        engine = make_engine(f"sqlite:///{Path(tmp) / 'precision.db'}")
        migrate(engine)
        for size in pool_sizes:
            say(f"precision with {size} skills per tenant")
            prec.append(precision(size, embedder, engine, rounds, threshold))
        engine.dispose()
    return RetrievalBench(
        backend="sqlite",
        embedder=base.model_id,
        threshold=threshold,
        vectors_per_skill=vectors_per_skill,
        intents=len(BANK),
        tenant_index=tenant_index,
        latency=rows,
        embed_p50_ms=e50,
        embed_p95_ms=e95,
        precision=prec,
        filler=filler,
        load_average=load,
    )
