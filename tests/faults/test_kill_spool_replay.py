"""A spool replay killed with SIGKILL mid-way converges: the next replay stores each run once, no file is left.

The replay stores a file's run, then removes the file (docs/guide/runtime.md, "The spool"). A process killed
after the read, or after the write and before the removal, leaves its file; the next replay must store the
same rows as an uninterrupted one — nothing lost, nothing twice — and leave the spool empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import workflow_memory
from tests.faults.killing import run_killed

pytestmark = [pytest.mark.slow]
STEPS = [{"tool": "get_order", "arguments": {"id": 7}, "result": {"ok": True}}, {"tool": "refund_order"}]


def _rows(engine: Engine) -> list[tuple[str, str, str | None]]:
    cols = workflow_memory.c
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(cols.id, cols.query, cols.canonical_hash).order_by(cols.id))]


@pytest.mark.parametrize("point", ["read", "write"])
def test_a_replay_killed_mid_way_converges_on_the_next(sqlite_engine: Engine, tmp_path: Path, point: str) -> None:
    spool_dir = tmp_path / "spool"
    (tmp_path / "down.db").mkdir()
    down = Skillflow(agent_id="agent", engine=make_engine(f"sqlite:///{tmp_path / 'down.db'}"), spool_dir=spool_dir)
    for i in range(4):
        assert down.record_run(f"refund order {i}", "u1", STEPS, run_id=f"run-{i}").spooled
    up = Skillflow(agent_id="agent", engine=sqlite_engine, spool_dir=spool_dir)
    url = str(sqlite_engine.url)
    run_killed("tests.faults.replay_kill_worker", url, str(spool_dir), point)
    stored_before = len(_rows(sqlite_engine))
    assert stored_before == (1 if point == "read" else 2)  # the second file: read only, or written and kept
    assert len(list(spool_dir.glob("*.json"))) == 3
    # The kept files; one already stored converges on its row and is not counted: this call did not store it.
    assert up.replay_spool() == (3 if point == "read" else 2)
    assert list(spool_dir.glob("*.json")) == [] and up.replay_spool() == 0
    rows = _rows(sqlite_engine)
    assert [r[0] for r in rows] == [f"run-{i}" for i in range(4)]  # each run once
    assert len({r[2] for r in rows}) == 1  # one procedure, as the direct writes give
