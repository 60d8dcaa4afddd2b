"""``replay_spool()`` counts the runs this call stored, never a run another replay already stored.

Two replays of one spool (two agent processes at start-up, or a replay beside one killed after its write) both
read a file before either removes it; the rows converge on the run id (docs/guide/runtime.md, "The spool"), and
the counts must too: summed, they equal the runs stored (docs/RELIABILITY.md).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from skillflow.capture.record import CaptureResult
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import workflow_memory

STEPS: list[dict[str, Any]] = [
    {"tool": "get_order", "arguments": {"id": 7}, "result": {"ok": True}},
    {"tool": "refund_order"},
]


def _spool(tmp_path: Path, runs: int, prefix: str = "run") -> Path:
    """``runs`` runs spooled by an agent whose database cannot be opened."""
    spool_dir = tmp_path / "spool"
    (tmp_path / "down.db").mkdir()  # a folder where the database file belongs: every connect fails
    down = Skillflow(agent_id="agent", engine=make_engine(f"sqlite:///{tmp_path / 'down.db'}"), spool_dir=spool_dir)
    for i in range(runs):
        assert down.record_run(f"refund order {i}", "u1", STEPS, run_id=f"{prefix}-{i:02d}").spooled
    return spool_dir


def _stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(workflow_memory)).scalar_one())


def _in_threads(*calls: Callable[[], int]) -> list[int]:
    """Run ``calls`` at once (released together), each in its own thread; their results in order."""
    start = threading.Barrier(len(calls), timeout=60)
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(not t.is_alive() for t in threads) and all(isinstance(n, int) for n in out), out
    return out


def test_a_run_another_replay_already_stored_is_not_counted(engine: Engine, tmp_path: Path) -> None:
    """The files of runs already stored (another replay wrote them and has not removed them yet) count 0."""
    spool_dir = _spool(tmp_path, 3)
    kept = tmp_path / "kept"
    shutil.copytree(spool_dir, kept)
    sf = Skillflow(agent_id="agent", engine=engine, spool_dir=spool_dir)
    assert sf.replay_spool() == 3 and _stored(engine) == 3
    shutil.rmtree(spool_dir)
    shutil.copytree(kept, spool_dir)  # the same files again, their runs already stored
    assert sf.replay_spool() == 0  # was 3: each converged on its row and was counted again
    assert list(spool_dir.glob("*.json")) == [] and sf.replay_spool() == 0 and _stored(engine) == 3


def test_two_replays_that_both_write_every_run_count_each_once(db_url: str, engine: Engine, tmp_path: Path) -> None:
    """Two replays interleaved so that both write each file's run before either removes the file: one inserts
    it, the other finds it; the counts sum to the runs stored (before: to twice as many)."""
    runs = 5
    spool_dir = _spool(tmp_path, runs)
    one_at_a_time = threading.Lock()
    both_wrote = threading.Barrier(2, timeout=60)

    def replayer() -> Skillflow:
        sf = Skillflow(agent_id="agent", engine=make_engine(db_url), spool_dir=spool_dir)
        write = sf._write

        def interleaved(*args: Any, **kwargs: Any) -> CaptureResult:
            with one_at_a_time:  # the second write of a run starts after the first committed
                result = write(*args, **kwargs)
            both_wrote.wait()  # neither removes the file before the other wrote its run
            return result

        sf._write = interleaved  # type: ignore[method-assign]
        return sf

    a, b = replayer(), replayer()
    counts = _in_threads(a.replay_spool, b.replay_spool)
    assert _stored(engine) == runs
    assert sum(counts) == runs, counts
    assert list(spool_dir.glob("*.json")) == []
    assert a.replay_spool() == 0 and b.replay_spool() == 0


def test_two_concurrent_replays_sum_to_the_runs_stored(
    db_url: str, engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Free-running: two replays of one spool started together, on their own engines, three rounds. A replay
    whose insert loses the race to the other's (``IntegrityError``) finds the row, logging no error."""
    caplog.set_level(logging.WARNING, logger="skillflow.runtime")
    for round_ in range(3):
        work = tmp_path / f"round-{round_}"
        work.mkdir()
        spool_dir = _spool(work, 12, prefix=f"round{round_}")
        before = _stored(engine)
        a, b = (Skillflow(agent_id="agent", engine=make_engine(db_url), spool_dir=spool_dir) for _ in range(2))
        counts = _in_threads(a.replay_spool, b.replay_spool)
        assert _stored(engine) - before == 12
        assert sum(counts) == 12, counts
        assert list(spool_dir.glob("*.json")) == [] and a.replay_spool() == 0 and b.replay_spool() == 0
    replay_lines = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage() or "still" in r.getMessage()]
    assert replay_lines == []  # before: "spool file … not replayed: IntegrityError"
