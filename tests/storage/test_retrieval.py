"""Skill retrieval: applicability vectors, filters before top-k, model isolation, cache, MiniLM calibration."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select, update

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.injection.retrieval import applicability_texts, search_skills, write_skill_vectors
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.storage.schema import skill_vectors, skillbox
from skillflow.storage.skills import SkillRecord, insert_skill, transition

EMB = HashingEmbedder()
QUERY = "please refund my damaged order"


def make_skill(
    engine: Engine,
    *,
    agent: str = "a",
    user: str = "u",
    chash: str = "h1",
    status: SkillStatus = SkillStatus.ACTIVE,
    triggers: list[str] | None = None,
    name: str = "refund-damaged-order",
    role: InjectionRole = InjectionRole.USER,
    embedder: Any = EMB,
    description: str = "Refund a customer's damaged order after checking it",
    **extra: Any,
) -> SkillRecord:
    with engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id=agent,
            user_id=user,
            canonical_hash=chash,
            name=name,
            description=description,
            content=f"---\nname: {name}\n---\nSECRET-PROCEDURE-{agent}-{user}-{chash}",
            status=SkillStatus.SHADOW if role == InjectionRole.DEVELOPER else status,
            injection_role=role,
            preconditions=["the order id is known"],
            tools=["lookup_order", "issue_refund"],
            trigger_queries=triggers if triggers is not None else [QUERY, "my parcel arrived broken, refund it"],
            **extra,
        )
        if role == InjectionRole.DEVELOPER and status == SkillStatus.ACTIVE:
            skill = transition(conn, skill.id, SkillStatus.ACTIVE, actor="reviewer", injection_role=role)
        write_skill_vectors(conn, skill, embedder)
    return skill


def search(engine: Engine, query: str = QUERY, agent: str = "a", user: str = "u", **kw: Any) -> list[Any]:
    kw.setdefault("k", 2)
    kw.setdefault("min_score", 0.7)
    with engine.connect() as conn:
        return search_skills(conn, EMB.embed([query])[0], EMB.model_id, agent, user, kw.pop("status", "active"), **kw)


def test_applicability_texts_never_include_procedure_or_tools() -> None:
    texts = applicability_texts(
        "cancel-reservation", "Cancel a booking", ["id known"], ["cancel it", "Cancel  it", "drop my trip"], 8
    )
    assert texts[0] == ("profile", "cancel reservation. Cancel a booking. Preconditions: id known")
    assert texts[1:] == [("trigger", "cancel it"), ("trigger", "drop my trip")]
    assert len(applicability_texts("n", "d", None, [f"q{i}" for i in range(20)], max_triggers=3)) == 4


def test_write_skill_vectors_replaces_rows_and_records_model(engine: Engine) -> None:
    skill = make_skill(engine)
    with engine.begin() as conn:
        assert write_skill_vectors(conn, skill, EMB) == 3
        n = conn.execute(select(func.count()).select_from(skill_vectors).where(skill_vectors.c.skill_id == skill.id))
        assert n.scalar() == 3
        kinds = conn.execute(select(skill_vectors.c.kind).order_by(skill_vectors.c.ordinal)).scalars().all()
        assert kinds == ["profile", "trigger", "trigger"]
        model = conn.execute(select(skillbox.c.embedding_model).where(skillbox.c.id == skill.id)).scalar()
    assert model == EMB.model_id


def test_filters_apply_before_top_k(engine: Engine) -> None:
    # Perfect matches in other tenants and other statuses must not crowd out the tenant's one active skill.
    for i in range(3):
        make_skill(engine, agent="other", chash=f"o{i}", name=f"refund-damaged-order-{i}")  # names: unique per tenant
        make_skill(engine, user="someone-else", chash=f"x{i}", name=f"refund-damaged-order-{i}")
        make_skill(engine, chash=f"s{i}", status=SkillStatus.SHADOW, name=f"refund-damaged-order-{i}")
    mine = make_skill(engine, chash="mine", triggers=["refund my damaged order please"])
    found = search(engine, k=1, min_score=0.3)
    assert [s.skill_id for s in found] == [mine.id]
    assert found[0].status == "active" and found[0].content.endswith("SECRET-PROCEDURE-a-u-mine")
    assert search(engine, agent="nobody", min_score=-1) == []


def test_score_is_max_over_vectors_and_threshold_applies(engine: Engine) -> None:
    skill = make_skill(engine)
    found = search(engine)
    assert len(found) == 1 and found[0].score == pytest.approx(1.0, abs=1e-5)
    assert search(engine, query="what is the weather in paris") == []
    with engine.connect() as conn:
        stmt = select(skill_vectors.c.embedding).where(skill_vectors.c.skill_id == skill.id)
        vec = conn.execute(stmt).scalars().all()
    expected = max(float(np.dot(v, EMB.embed(["broken parcel refund"])[0])) for v in vec)
    assert search(engine, query="broken parcel refund", min_score=-1)[0].score == pytest.approx(expected, abs=1e-5)


def test_only_vectors_of_the_configured_model_are_compared(engine: Engine) -> None:
    make_skill(engine)
    with engine.begin() as conn:
        conn.execute(update(skill_vectors).values(model_id="some-other-model"))
    assert search(engine, min_score=-1) == []


def test_top_k_orders_by_score(engine: Engine) -> None:
    a = make_skill(engine, chash="h1", triggers=[QUERY], name="a", description="first")
    b = make_skill(engine, chash="h2", triggers=["refund my order"], name="b", description="second")
    make_skill(engine, chash="h3", triggers=["book a hotel room"], name="c", description="third")
    found = search(engine, k=2, min_score=0.2)
    assert [s.skill_id for s in found] == [a.id, b.id]
    assert found[0].score > found[1].score
    assert search(engine, k=0) == []


def test_cache_follows_lifecycle_and_new_vectors(engine: Engine) -> None:
    skill = make_skill(engine)
    assert [s.skill_id for s in search(engine)] == [skill.id]
    with engine.begin() as conn:
        transition(conn, skill.id, SkillStatus.DEMOTED, actor="test", reason="drift")
    assert search(engine) == []
    newer = make_skill(engine, chash="h2", triggers=["something unrelated entirely"])
    assert search(engine) == []
    with engine.begin() as conn:
        record = SkillRecord(**{**newer.__dict__, "trigger_queries": [QUERY]})
        write_skill_vectors(conn, record, EMB)
    assert [s.skill_id for s in search(engine)] == [newer.id]


@pytest.fixture(scope="module")
def minilm() -> Any:
    from skillflow.injection.embeddings import MiniLMEmbedder

    return MiniLMEmbedder()


CANCEL_TRIGGERS = [
    "I need to cancel my reservation",
    "Please cancel my flight booking",
    "Can you cancel reservation ABC123 for me?",
    "I want to cancel my trip and get a refund",
    "Cancel my upcoming flight please",
    "I won't be traveling, please cancel my booking",
]


def test_minilm_calibration_separates_paraphrases_from_near_misses(sqlite_engine: Engine, minilm: Any) -> None:
    with sqlite_engine.begin() as conn:
        skill = insert_skill(
            conn,
            agent_id="a",
            user_id="u",
            canonical_hash="cancel",
            name="cancel-reservation",
            description="Cancel an existing flight reservation for the customer and confirm any refund.",
            content="procedure text that is never embedded",
            status=SkillStatus.ACTIVE,
            preconditions=["The customer gives a reservation id", "The reservation has not already been flown"],
            trigger_queries=CANCEL_TRIGGERS,
        )
        write_skill_vectors(conn, skill, minilm)

    def score(query: str) -> float:
        with sqlite_engine.connect() as conn:
            hits = search_skills(conn, minilm.embed([query])[0], minilm.model_id, "a", "u", "active", 2, -1.0)
        return hits[0].score

    for paraphrase in (
        "I'd like to cancel my flight reservation",
        "please cancel the booking I made for next week",
        "cancel my reservation XYZ789",
        "I have to cancel my flight to Boston",
    ):
        assert score(paraphrase) >= 0.70, paraphrase
    for near_miss in ("change my flight", "modify my reservation dates", "add a checked bag to my booking"):
        assert score(near_miss) < 0.70, near_miss
    for unrelated in ("what's the weather in Paris", "reset my password"):
        assert score(unrelated) < 0.40, unrelated


def test_bench_retrieval_runs_the_real_search_path() -> None:
    from skillflow.lab.bench.retrieval_bench import run

    result = run(sizes=(40,), pool_sizes=(5,), embedder_name="hashing", vectors_per_skill=3, repeats=20, rounds=1)
    (row,) = result.latency
    assert row.skills == 40 and row.vectors == 25 * 6 + 15 * 3 and row.queries == 20
    assert row.floor_p50_ms > 0 and 0 < row.p50_ms <= row.p95_ms
    (prec,) = result.precision
    assert prec.queries == 5 * 3 and prec.out_of_pool_queries == 20 * 3
    assert prec.hit_at_1 + prec.wrong_skill_rate + prec.miss_rate == pytest.approx(1.0)
    assert result.filler == "random" and (result.load_average is None or result.load_average >= 0)


def test_bench_text_filler_embeds_distinct_template_intents(tmp_path: Any) -> None:
    from skillflow.lab.bench.retrieval_bench import latency, run, text_filler

    mats = text_filler(EMB, 30, 4, np.random.default_rng(1))
    assert len(mats) == 30 and all(m.shape == (4, EMB.dim) for m in mats)
    assert len({m[1].tobytes() for m in mats}) == 30  # distinct intents, distinct first triggers
    result = run(sizes=(40,), pool_sizes=(5,), embedder_name="hashing", vectors_per_skill=3, repeats=20, filler="text")
    assert result.filler == "text" and result.latency[0].vectors == 25 * 6 + 15 * 3
    with pytest.raises(ValueError, match="filler"):
        latency(30, EMB, EMB.embed(["q"]), tmp_path, 3, 10, 0.7, filler="nonsense")


# --- exact pruning: the centroid/radius bound never changes a result --------------------------------------


def brute_force(groups: list[np.ndarray], q: np.ndarray, k: int, min_score: float) -> list[tuple[int, float]]:
    """Reference: every vector scored (float64 per row), max per skill, threshold, best first, ties by order."""
    q64 = q.astype(np.float64)
    scores = [max(float((v.astype(np.float64) * q64).sum()) for v in g) for g in groups]
    keep = [i for i, s in enumerate(scores) if s >= min_score]
    return [(i, scores[i]) for i in sorted(keep, key=lambda i: (-scores[i], i))[:k]]


def as_matrix(groups: list[np.ndarray]) -> Any:
    from skillflow.injection.retrieval import _matrix

    ids = [f"s{i:04d}" for i, g in enumerate(groups) for _ in range(len(g))]
    return _matrix(("stamp",), ids, np.ascontiguousarray(np.vstack(groups), dtype=np.float32))


def unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.asarray(rows / np.where(norms == 0, 1, norms), dtype=np.float32)


def clustered(rng: np.random.Generator, n: int, dim: int, per: int, spread: float) -> list[np.ndarray]:
    """``n`` skills of 1..per unit vectors around a random center; noise of norm ≈ ``spread``."""
    centers = unit(rng.standard_normal((n, dim)))
    noise = spread / np.sqrt(dim)
    return [unit(c + noise * rng.standard_normal((int(rng.integers(1, per + 1)), dim))) for c in centers]


def top_k(m: Any, q: np.ndarray, k: int, min_score: float, max_fraction: float = 0.25) -> list[tuple[int, float]]:
    """The numpy ranking with pruning on at any size (production skips it below ``PRUNE_MIN_VECTORS``)."""
    from skillflow.injection.retrieval import _top_k

    return _top_k(m, q, k, min_score, max_fraction, 0)


def candidates(m: Any, q: np.ndarray, k: int, min_score: float) -> np.ndarray:
    from skillflow.injection.retrieval import PRUNE_MAX_FRACTION, _candidates

    return _candidates(m, q, k, min_score, PRUNE_MAX_FRACTION, 0)


def assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 60),
    dim=st.sampled_from([2, 3, 8, 24]),
    per=st.integers(1, 7),
    spread=st.sampled_from([0.0, 0.05, 0.3, 1.0, 10.0]),
    duplicates=st.booleans(),
    quantize=st.booleans(),
    scale=st.sampled_from([1.0, 1.0, 0.5, 3.0]),
    k=st.integers(1, 8),
    min_score=st.one_of(st.sampled_from([-1.0, -10.0, 0.0, 0.7, 0.99, 1.0]), st.floats(-1.2, 1.2)),
    max_fraction=st.sampled_from([0.0, 0.25, 1.0]),
)
@settings(deadline=None)
def test_pruned_top_k_equals_brute_force(
    seed: int,
    n: int,
    dim: int,
    per: int,
    spread: float,
    duplicates: bool,
    quantize: bool,
    scale: float,
    k: int,
    min_score: float,
    max_fraction: float,
) -> None:
    rng = np.random.default_rng(seed)
    groups = clustered(rng, n, dim, per, spread)
    if quantize:  # coarse values: many exact score ties between different skills and rows
        groups = [unit(np.round(g * 2)) for g in groups]
    if duplicates and n > 1:  # whole skills repeated: exact ties must keep skill order
        groups = [groups[int(rng.integers(0, i + 1))] if rng.random() < 0.3 else g for i, g in enumerate(groups)]
    groups = [g * np.float32(scale) for g in groups]  # the bounds do not assume unit skill vectors
    if scale == 3.0:  # nor equal norms within a skill
        groups = [(g * rng.uniform(0.2, 2.0, (len(g), 1))).astype(np.float32) for g in groups]
    q = unit(rng.standard_normal(dim)) if rng.random() < 0.5 else unit(groups[int(rng.integers(0, n))][0])
    if quantize:
        q = unit(np.round(q * 2))
    got = top_k(as_matrix(groups), q, k, min_score, max_fraction)
    assert_same(got, brute_force(groups, q, k, min_score))
    # and the scores agree with the plain float32 product the search used before pruning
    flat = np.maximum.reduceat(np.vstack(groups) @ q, np.cumsum([0] + [len(g) for g in groups[:-1]]))
    assert [s for _, s in got] == pytest.approx([float(flat[i]) for i, _ in got], abs=1e-6)


def test_pruning_discards_far_skills_and_keeps_a_skill_with_scattered_vectors() -> None:
    rng = np.random.default_rng(7)
    dim = 64
    groups = clustered(rng, 400, dim, 6, 0.6)
    target = unit(rng.standard_normal(dim))
    # Far-apart vectors: one matches the query exactly, the others point elsewhere, so the centroid is far
    # from the matching vector and the bound must rely on the radius.
    scattered = np.vstack([unit(rng.standard_normal((4, dim))), target[None, :]])
    groups[123] = unit(scattered)
    groups[300] = unit(target + 0.04 * rng.standard_normal((3, dim)))  # a close cluster around the query
    m = as_matrix(groups)
    for k, min_score in ((2, 0.7), (6, 0.7), (2, 0.0), (1, -1.0), (6, -1.0)):
        want = brute_force(groups, target, k, min_score)
        cand = candidates(m, target, k, min_score)
        if (k, min_score) != (6, -1.0):  # the 6th best score without a threshold is noise-level: weak pruning
            assert 0 < cand.size <= 0.05 * len(groups), (k, min_score, cand.size)
        assert {i for i, _ in want} <= set(cand.tolist())
        assert_same(top_k(m, target, k, min_score), want)
    assert [i for i, _ in top_k(m, target, 2, 0.7)] == [123, 300]
    assert top_k(m, target, 2, 0.7)[0][1] == pytest.approx(1.0, abs=1e-6)


def test_pruning_falls_back_to_the_full_product_when_bounds_cannot_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    from skillflow.injection import retrieval

    rng = np.random.default_rng(3)
    # Six unrelated random directions per skill: radius ≈ 0.93, so at 0.3 no bound is below the threshold.
    groups = [unit(rng.standard_normal((6, 64))) for _ in range(200)]
    q = unit(rng.standard_normal(64))
    assert candidates(as_matrix(groups), q, 2, 0.3).size == len(groups)
    for min_score in (0.3, 0.0, -1.0):
        assert_same(top_k(as_matrix(groups), q, 3, min_score), brute_force(groups, q, 3, min_score))
    # At 0.7 every skill is too wide for its cone to prune: the bound pass is skipped altogether.
    monkeypatch.setattr(retrieval, "_upper_bounds", lambda *_: pytest.fail("bounds computed"))
    assert_same(top_k(as_matrix(groups), q, 3, 0.7), brute_force(groups, q, 3, 0.7))


def test_search_with_pruning_matches_brute_force_on_stored_vectors(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skillflow.injection import retrieval

    monkeypatch.setattr(retrieval, "PRUNE_MIN_VECTORS", 0)  # prune even this small tenant
    bounds = []
    real_bounds = retrieval._upper_bounds
    monkeypatch.setattr(retrieval, "_upper_bounds", lambda m, q: bounds.append(1) or real_bounds(m, q))
    topics = ["refund a damaged order", "book a hotel room", "reset a password", "cancel a flight", "change an address"]
    ids = []
    for i in range(40):
        topic = topics[i % len(topics)]
        triggers = [f"{topic} number {i}", f"please {topic} {i}", f"i want to {topic} today {i}"]
        if i == 17:  # far-apart vectors in one skill
            triggers = ["book a hotel room in paris", "what is my loyalty balance", "report a lost bag"]
        ids.append(make_skill(engine, chash=f"h{i}", name=f"skill-{i}", description=topic, triggers=triggers).id)
    with engine.connect() as conn:
        rows = conn.execute(
            select(skill_vectors.c.skill_id, skill_vectors.c.embedding).order_by(
                skill_vectors.c.skill_id, skill_vectors.c.ordinal
            )
        ).all()
    by_skill: dict[str, list[np.ndarray]] = {}
    for sid, vec in rows:
        by_skill.setdefault(sid, []).append(np.asarray(vec, np.float32))
    order = sorted(by_skill)
    groups = [np.vstack(by_skill[sid]) for sid in order]
    for query in ("book a hotel room in paris", "please refund a damaged order 3", "lost bag", "xyz"):
        q = EMB.embed([query])[0]
        for k, min_score in ((2, 0.7), (2, 0.3), (4, -1.0), (1, 0.0)):
            want = brute_force(groups, q, k, min_score)
            got = search(engine, query=query, k=k, min_score=min_score)
            assert [s.skill_id for s in got] == [order[i] for i, _ in want], (query, k, min_score)
            assert [s.score for s in got] == pytest.approx([round(s, 6) for _, s in want], abs=1e-6)
    assert search(engine, query="book a hotel room in paris", k=1)[0].skill_id == ids[17]
    assert bounds  # the searches above went through the bounds


def test_near_ties_that_float32_orders_wrongly_are_resolved_exactly() -> None:
    rng = np.random.default_rng(0)
    reversed_pairs = 0
    for _ in range(400):
        v = unit(rng.standard_normal(384))
        q = unit(v + 0.3 * rng.standard_normal(384))
        w = (v + 1e-7 * rng.standard_normal(384)).astype(np.float32)  # scores within float32 rounding of v's
        groups = [w[None, :], *(0.01 * rng.standard_normal((5, 1, 384))).astype(np.float32), v[None, :]]
        fast = np.vstack(groups) @ q
        exact = [float((g[0].astype(np.float64) * q.astype(np.float64)).sum()) for g in (w[None, :], v[None, :])]
        reversed_pairs += bool((fast[0] - fast[-1]) * (exact[0] - exact[1]) < 0)
        for max_fraction in (0.0, 1.0):  # the full float32 product, and the gathered one
            assert_same(top_k(as_matrix(groups), q, 1, 0.0, max_fraction), brute_force(groups, q, 1, 0.0))
    assert reversed_pairs > 0  # the float32 product did order some pairs wrongly


def test_bounds_hold_for_negative_scores_and_unequal_norms() -> None:
    q = unit(np.array([1.0, 0.0, 0.0]))
    # Every vector points away from the query; the short one scores highest (least negative).
    away = np.array([[-3.0, 0.3, 0.0], [-0.2, 0.0, 0.05], [-2.0, -0.4, 0.1]], dtype=np.float32)
    groups = [away, np.array([[-5.0, 0.0, 0.0]], dtype=np.float32)]
    for min_score in (-10.0, -1.0, -0.3):
        for max_fraction in (0.0, 1.0):
            assert_same(top_k(as_matrix(groups), q, 2, min_score, max_fraction), brute_force(groups, q, 2, min_score))
    assert top_k(as_matrix(groups), q, 1, -1.0)[0] == (0, pytest.approx(-0.2, abs=1e-6))
