"""Overlapping cycles never create two skills for a class; a cycle killed mid-way re-runs to the same rows."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.injection import retrieval
from skillflow.promotion import cycle as promotion
from skillflow.promotion import landing as store
from skillflow.promotion.cycle import LEASE_HELD, PartitionFailed, run_partition
from skillflow.promotion.gates import COVERED
from skillflow.promotion.landing import store_skill
from skillflow.promotion.stages import gather_evidence, validate_draft
from skillflow.storage.schema import leases, reports, skill_events, skillbox, workflow_memory
from skillflow.storage.skills import list_skills
from tests.support.promotion import AGENT, agent, counts, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


class Boom(RuntimeError):
    pass


def seed(engine: Engine) -> tuple[Any, str]:
    sf = agent(engine)
    h = ""
    for i in range(6):
        h = record_cancel(sf, "u1", i)
    return sf, h


def stamps(engine: Engine, h: str) -> set[str | None]:
    with engine.connect() as conn:
        q = select(workflow_memory.c.promoted_skill_id).where(workflow_memory.c.canonical_hash == h)
        return set(conn.execute(q).scalars())


def race(n: int, fn: Any) -> list[Any]:
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertions below
            out[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_racing_cycles_create_one_skill(engine: Engine) -> None:
    sf, h = seed(engine)
    results = race(4, lambda i: run_partition(engine, AGENT, "u1", sf.config, flow_run_id=f"race-{i}"))
    assert not [r for r in results if isinstance(r, Exception)], results
    promoted = [sid for r in results for sid in r.promoted]
    assert len(promoted) == 1
    for r in results:
        if not r.promoted:  # the losers waited for the lease or found the class covered
            assert r.partition_skipped == LEASE_HELD or (h, COVERED) in r.skipped
    with engine.connect() as conn:
        assert [s.id for s in list_skills(conn, AGENT, "u1")] == promoted
        assert conn.execute(select(leases)).first() is None  # every lease released
    assert stamps(engine, h) == set(promoted)


def test_unique_live_key_holds_without_the_lease(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores racing past the lease (e.g. an expired one): the database admits one live skill."""
    sf, _ = seed(engine)
    [stats] = promotion.assess_classes(engine, AGENT, "u1", sf.config, promotion.utcnow(), 1)
    evidence = gather_evidence(engine, stats.stats, sf.config)
    outcome = promotion.distill_evidence(evidence, sf.config)
    validation = validate_draft(outcome.skill_md, evidence, sf.config)
    assert validation.ok, validation.reasons
    results = race(4, lambda i: store_skill(engine, evidence, outcome, validation, sf.config))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sorted(r.decision for r in results) == ["promoted", "skipped", "skipped", "skipped"]
    assert all(r.reasons == [COVERED] for r in results if r.decision == "skipped")
    with engine.connect() as conn:
        assert len(list_skills(conn, AGENT, "u1")) == 1
    # Even when the pre-check misses the live skill, the unique live_key rejects the insert.
    monkeypatch.setattr(store, "live_skill_for_class", lambda *args: None)
    late = store_skill(engine, evidence, outcome, validation, sf.config)
    assert (late.decision, late.reasons) == ("skipped", [COVERED])
    with engine.connect() as conn:
        assert len(list_skills(conn, AGENT, "u1")) == 1


def test_crash_inside_store_leaves_nothing_then_rerun_converges(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sf, h = seed(engine)
    before = counts(engine)

    def explode(*args: Any, **kwargs: Any) -> int:  # after insert_skill + stamping, before commit
        raise Boom("killed mid-store")

    monkeypatch.setattr(retrieval, "write_skill_vectors", explode)
    with pytest.raises(PartitionFailed, match="failed: Boom"):
        run_partition(engine, AGENT, "u1", sf.config, flow_run_id="crash-1")
    after = counts(engine)
    assert after == before  # no skill, no event, no stamp, no report, no cycle mark, lease released
    assert stamps(engine, h) == {None}
    monkeypatch.undo()
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    report = run_partition(engine, AGENT, "u1", sf.config, flow_run_id="clean-1")
    [skill_id] = report.promoted
    assert stamps(engine, h) == {skill_id}
    with engine.connect() as conn:
        assert len(conn.execute(select(skillbox)).all()) == 1
        assert len(conn.execute(select(skill_events)).all()) == 1


def test_crash_after_commit_then_rerun_reports_the_truth(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf, h = seed(engine)

    def explode(*args: Any, **kwargs: Any) -> None:
        raise Boom("killed before the report")

    monkeypatch.setattr(promotion, "finish_partition", explode)
    with pytest.raises(PartitionFailed, match="failed: Boom"):
        run_partition(engine, AGENT, "u1", sf.config, flow_run_id="crash-2")
    monkeypatch.undo()
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")
    with engine.connect() as conn:
        [skill] = list_skills(conn, AGENT, "u1")
        assert conn.execute(select(reports)).first() is None
        assert conn.execute(select(leases)).first() is None
    assert stamps(engine, h) == {skill.id}  # fully stamped: the status and the stamps committed together
    report = run_partition(engine, AGENT, "u1", sf.config, flow_run_id="clean-2")
    assert report.promoted == [] and (h, COVERED) in report.skipped
    with engine.connect() as conn:
        assert len(list_skills(conn, AGENT, "u1")) == 1
        [stored] = conn.execute(select(reports)).mappings().all()
    assert stored["body"]["skipped"] == [[h, COVERED]]
