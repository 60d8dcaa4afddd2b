"""A late conversation outcome that meets a shadow drain in flight re-queues its run (a concurrency audit, 2026-12-05).

The drain reads a run's outcome, evaluates it and writes its records; a conversation's outcome given meanwhile
changed the run, and the records kept the old outcome for good: the late outcome re-queued the run only when it
saw records already written, and the drain then took the run out of the outbox (20 of 20 audit rounds on
PostgreSQL, where the drain holds the run's row). Now both sides re-queue: a late outcome that changes a
tool-calling run always puts it back, and a drain whose run's outcome changed since it read it leaves it in.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, select, text

from skillflow.lifecycle.shadow import evaluate_batch, persist
from skillflow.storage import outbox
from skillflow.storage.schema import workflow_memory
from tests.storage.test_late_outcome import MESSAGES, _agent
from tests.support.lifecycle import EMBEDDER, config


def _pending_run(engine: Engine) -> tuple[Any, str]:
    sf = _agent(engine)
    results = sf.record_conversation(MESSAGES, "u1", conversation_id="c-1", complete=False)
    run_id = next(r.run_id for r in results if r.stored)
    with engine.connect() as conn:
        row = conn.execute(select(workflow_memory.c.outcome, workflow_memory.c.shadow_pending)
                           .where(workflow_memory.c.id == run_id)).one()  # fmt: skip
    assert tuple(row) == ("success", 1)
    return sf, run_id


def _state(engine: Engine, run_id: str) -> tuple[Any, ...]:
    wm = workflow_memory.c
    with engine.connect() as conn:
        return tuple(conn.execute(select(wm.outcome, wm.shadow_pending).where(wm.id == run_id)).one())


def test_a_late_outcome_between_a_drain_s_read_and_its_write_leaves_the_run_queued(engine: Engine) -> None:
    """The order SQLite drains in (claim, read, evaluate, then persist in another transaction)."""
    sf, run_id = _pending_run(engine)
    with engine.connect() as conn:
        runs = outbox.read_runs(conn, [run_id])
        new, failed = evaluate_batch(conn, runs, config(shadow_evaluation_enabled=True), EMBEDDER)
    assert not failed and runs[0].outcome == "success"
    sf.record_conversation(MESSAGES, "u1", conversation_id="c-1", outcome=False)
    with engine.begin() as conn:
        persist(conn, runs, new)
    assert _state(engine, run_id) == ("failure", 1)


@pytest.mark.postgres
def test_a_late_outcome_waiting_on_a_drain_s_row_lock_re_queues_the_run(pg_engine: Engine) -> None:
    """The order PostgreSQL drains in: the drain holds the run's row while it evaluates and writes."""
    engine = pg_engine
    sf, run_id = _pending_run(engine)
    done: list[Any] = []
    with engine.connect() as drain:
        drain.execute(text("SELECT id FROM workflow_memory WHERE id = :id FOR UPDATE"), {"id": run_id})
        late = threading.Thread(
            target=lambda: done.append(sf.record_conversation(MESSAGES, "u1", conversation_id="c-1", outcome=False))
        )
        late.start()
        time.sleep(1.0)  # the late outcome read the row (no records yet) and waits on the drain's lock
        assert not done
        outbox.write_evaluations(drain, {run_id: [{"idempotency_key": "k", "observed_outcome": "success"}]})
        drain.commit()
    late.join(30)
    assert done and _state(engine, run_id) == ("failure", 1)
