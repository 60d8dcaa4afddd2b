"""SIGKILL the shadow drain mid-batch, re-run it: every pending run evaluated exactly once, as in a clean run.

The worker (``tests/faults/shadow_kill_worker.py``) is a real subprocess running the shipped composition
``drain_shadow_evaluations`` (what the ``shadow-evaluation`` flow's task runs), killed at one point of its
second batch (or, for ``reconcile``, of its last). The re-run is a plain new drain. Then: the outbox is
empty, no run has two records for one skill, idempotency keys are unique, ``shadow_observations`` holds
exactly the records, and every table equals a clean twin's (ids and wall-clock times normalised).

SQLite claims by stamping ``shadow_claimed_at`` in a committed transaction, so a killed drain's claimed
rows wait for the stale-claim timeout (``DEFAULT_STALE_SECONDS``) before another drain takes them: the test
checks they are still pending (not lost) right after the kill, then ages the claims past the timeout.
PostgreSQL claims with row locks in the batch's own transaction, which the kill aborts.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, update

from skillflow.kernel.models import Step, utcnow
from skillflow.lifecycle.readiness import get_shadow_readiness
from skillflow.lifecycle.shadow import drain_shadow_evaluations
from skillflow.storage import outbox
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import shadow_observations, skillbox, workflow_memory
from tests.faults.dbdump import dump
from tests.faults.killing import run_killed
from tests.faults.shadow_kill_worker import BATCH_SIZE
from tests.support.lifecycle import EMBEDDER, USER, cancel_steps, config, make_skill, other_steps, sf

pytestmark = [pytest.mark.slow]

QUERIES = [
    "cancel my reservation please",
    "please cancel my flight booking",
    "I want to cancel the reservation",
    "cancel the reservation for next week",
    "what is the weather in Paris",  # no candidate: too far from the skill
    "cancel my booking, plans changed",
]
RUNS = 11  # with the source run: 12 pending rows, three batches of BATCH_SIZE
POINTS = [("claim", 2), ("evaluate", 2), ("commit", 2), ("reconcile", 3)]


def _seed(engine: Engine) -> list[str]:
    """A source run, a SHADOW skill built from it, then RUNS fresh runs in the outbox (ids fixed)."""
    migrate(engine)
    agent = sf(engine)
    when = utcnow() - timedelta(days=2)
    source = agent.record_run(
        "cancel my reservation", USER, cancel_steps(), run_id="source-0", created_at=when, strict=True
    )
    assert source.stored and source.canonical_hash
    make_skill(engine, source.canonical_hash, sources=["source-0"])
    ids = []
    for i in range(RUNS):
        steps: list[Step] = other_steps() if i % 4 == 3 else cancel_steps(fail=i % 5 == 4)
        res = agent.record_run(
            QUERIES[i % len(QUERIES)], USER, steps, run_id=f"fresh-{i:02d}", metadata={"ok": i % 5 != 4}, strict=True
        )
        assert res.stored, res.error
        ids.append(res.run_id)
    with engine.connect() as conn:
        assert outbox.pending_count(conn) == RUNS + 1  # the source run too (skipped: it is the skill's source)
    return ids


def _kill(url: str, point: str, batch: int) -> None:
    run_killed("tests.faults.shadow_kill_worker", url, point, str(batch), env={"SKILLFLOW_EMBEDDER": "hashing"})


def _drain(engine: Engine) -> None:
    drain_shadow_evaluations(engine, config(), EMBEDDER, None, BATCH_SIZE)


def _assert_exactly_once(engine: Engine, ids: list[str]) -> int:
    with engine.connect() as conn:
        assert outbox.pending_count(conn) == 0
        rows = conn.execute(
            select(workflow_memory.c.id, workflow_memory.c.shadow_evaluations, workflow_memory.c.shadow_claimed_at)
        ).all()
        observed = list(conn.execute(select(shadow_observations.c.idempotency_key)).scalars())
    assert all(r.shadow_claimed_at is None for r in rows)
    keys = [e["idempotency_key"] for r in rows for e in (r.shadow_evaluations or [])]
    assert len(keys) == len(set(keys))  # no run evaluated twice against one skill
    assert Counter(observed) == Counter(keys)  # the index holds each record once, and only those
    per_run = Counter(k.split(":")[0] for k in keys)
    assert set(per_run) <= set(ids) and max(per_run.values()) == 1  # one SHADOW skill: one record per run
    return len(keys)


@pytest.mark.parametrize(("point", "batch"), POINTS, ids=[p for p, _ in POINTS])
def test_shadow_drain_killed_mid_batch_then_rerun_loses_and_duplicates_nothing(
    twins: tuple[Engine, Engine], point: str, batch: int
) -> None:
    killed, clean = twins
    clean_ids = _seed(clean)
    _drain(clean)
    records = _assert_exactly_once(clean, clean_ids)
    assert records >= 6  # the clean twin really evaluated runs (some have no candidate)

    ids = _seed(killed)
    _kill(killed.url.render_as_string(hide_password=False), point, batch)
    with killed.connect() as conn:
        pending = outbox.pending_count(conn)
        claimed = conn.execute(select(func.count()).where(workflow_memory.c.shadow_claimed_at.is_not(None))).scalar()
    assert pending > 0  # the killed batch is still in the outbox (reconciling is part of its transaction)
    _drain(killed)
    if killed.dialect.name == "sqlite":
        # The killed drain's committed claim holds its rows until the stale-claim timeout: still pending, not lost.
        with killed.connect() as conn:
            assert outbox.pending_count(conn) == claimed == BATCH_SIZE
        with killed.begin() as conn:  # the timeout passes
            stale = utcnow() - timedelta(seconds=outbox.DEFAULT_STALE_SECONDS + 1)
            conn.execute(
                update(workflow_memory)
                .where(workflow_memory.c.shadow_claimed_at.is_not(None))
                .values(shadow_claimed_at=stale)
            )
        _drain(killed)
    assert _assert_exactly_once(killed, ids) == records
    got, want = dump(killed), dump(clean)
    assert _readiness(killed) == _readiness(clean)
    for table in want:
        assert got[table] == want[table], table


def _readiness(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        [skill_id] = conn.execute(select(skillbox.c.id)).scalars()
        return get_shadow_readiness(conn, skill_id, config())
