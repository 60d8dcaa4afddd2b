"""Advisory readiness: docs/design.md numbers, reason order and formats; it never changes a status."""

from __future__ import annotations

from sqlalchemy import Engine, update

from skillflow.lifecycle.readiness import get_shadow_readiness, readiness_from_counts
from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import get_skill
from tests.support.lifecycle import EMBEDDER, class_hash, config, earlier, make_skill, other_steps, record


def test_seed_example_numbers_and_reason() -> None:
    cfg = config(shadow_readiness_min_observations=10)
    got = readiness_from_counts(
        {"observations": 7, "trajectory_matches": 6, "matched_successes": 6, "matched_failures": 0}, cfg
    )
    assert got["ready"] is False and got["observations"] == 7
    assert abs(got["trajectory_match_rate"] - 6 / 7) < 1e-12 and got["matched_success_rate"] == 1.0
    assert got["reasons"] == ["observations 7 < 10"]


def test_all_reasons_in_order_and_zero_observations() -> None:
    cfg = config(shadow_readiness_min_observations=10)
    got = readiness_from_counts({}, cfg)
    assert got == {
        "ready": False,
        "observations": 0,
        "trajectory_match_rate": 0.0,
        "matched_success_rate": 0.0,
        "reasons": ["observations 0 < 10", "trajectory match rate 0.00 < 0.80", "matched success rate 0.00 < 0.80"],
    }
    got = readiness_from_counts(
        {"observations": 12, "trajectory_matches": 9, "matched_successes": 7, "matched_failures": 2}, cfg
    )
    assert got["reasons"] == ["trajectory match rate 0.75 < 0.80", "matched success rate 0.78 < 0.80"]
    ready = readiness_from_counts(
        {"observations": 10, "trajectory_matches": 8, "matched_successes": 8, "matched_failures": 0}, cfg
    )
    assert ready["ready"] is True and ready["reasons"] == []  # thresholds are inclusive


def test_readiness_from_stored_observations(engine: Engine) -> None:
    cfg = config(shadow_readiness_min_observations=3)
    source = record(engine, "cancel my reservation", at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source])
    with engine.connect() as conn:
        assert get_shadow_readiness(conn, "nope", cfg)["reasons"] == ["skill not found"]
        assert get_shadow_readiness(conn, skill.id, cfg)["reasons"][0] == "observations 0 < 3"
    for i in range(3):
        record(engine, f"please cancel my reservation {i}")
    bad = record(engine, "cancel the reservation for me", steps=other_steps())
    failed = record(engine, "I want to cancel the reservation")
    with engine.begin() as conn:
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == failed).values(outcome="failure"))
    drain_shadow_evaluations(engine, cfg, EMBEDDER)
    with engine.connect() as conn:
        got = get_shadow_readiness(conn, skill.id, cfg)
        status = get_skill(conn, skill.id).status
    assert bad and got["observations"] == 5
    assert got["trajectory_match_rate"] == 4 / 5 and got["matched_success_rate"] == 3 / 4
    assert got["reasons"] == ["matched success rate 0.75 < 0.80"] and got["ready"] is False
    assert status == "shadow"


def test_observations_whose_outcome_is_unknown_do_not_meet_the_floor(engine: Engine) -> None:
    """Twelve observed runs whose business evaluator failed (``unknown``) and one success were "ready": the
    floor counted every observation and the success rate rested on one known outcome. Drift's grace counts known
    outcomes only; readiness now does too."""
    cfg = config(shadow_readiness_min_observations=10)
    counts = {"observations": 13, "trajectory_matches": 13, "matched_successes": 1, "matched_failures": 0}
    got = readiness_from_counts({**counts, "unknown_outcomes": 12}, cfg)
    assert got["ready"] is False and got["observations"] == 13
    assert got["reasons"] == ["observations with a known outcome 1 < 10"]
    source = record(engine, "cancel my reservation", at=earlier(2))
    skill = make_skill(engine, class_hash(engine, source), sources=[source])
    for i in range(12):
        run = record(engine, f"please cancel my reservation {i}")
        with engine.begin() as conn:
            conn.execute(update(workflow_memory).where(workflow_memory.c.id == run).values(outcome="unknown"))
    record(engine, "cancel my reservation now")
    drain_shadow_evaluations(engine, cfg, EMBEDDER)
    with engine.connect() as conn:
        stored = get_shadow_readiness(conn, skill.id, cfg)
        cached = (get_skill(conn, skill.id).stats or {})["shadow"]
    assert stored["observations"] == 13 and stored["reasons"] == ["observations with a known outcome 1 < 10"]
    assert cached["unknown_outcomes"] == 12
