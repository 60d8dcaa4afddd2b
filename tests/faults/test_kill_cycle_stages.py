"""SIGKILL a cycle worker right after each stage, re-run the cycle: the database equals a clean run's.

The worker is a real subprocess running the shipped composition (``run_partition``, what the
``promotion-cycle`` flow task runs); the re-run uses the same flow-run id, as a Prefect retry of the
crashed run does. Tables are compared row by row with ids and wall-clock times normalised.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from skillflow.promotion import cycle
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from tests.conftest import ROOT
from tests.faults.dbdump import dump
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("offline_providers")]

STAGES = ("sweep", "aggregation", "distillation", "validation", "store", "report")
FLOW_RUN = "0f0f0f0f-fault-kill-run"


def _seeded(path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
        record_payment(sf, "u1", i, accepted=i != 0)
    return engine


def _cycle(engine: Engine) -> cycle.PromotionReport:
    return cycle.run_partition(engine, AGENT, "u1", config(require_shadow=True), flow_run_id=FLOW_RUN)


@pytest.fixture(scope="module")
def want(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tables after one clean cycle: the reference of every stage's kill-and-rerun (built once)."""
    with pytest.MonkeyPatch.context() as mp:  # what ``offline_providers`` sets, for this module-wide run
        for name, value in (("EMBEDDER", "hashing"), ("DISTILLER", "offline"), ("JUDGE", "offline")):
            mp.setenv(f"SKILLFLOW_{name}", value)
        clean = _seeded(tmp_path_factory.mktemp("clean") / "clean.db")
        clean_report = _cycle(clean)
        assert len(clean_report.promoted) == 2  # both classes promote in one clean cycle
        tables = dump(clean)
        clean.dispose()
    return tables


@pytest.mark.parametrize("stage", STAGES)
def test_kill_at_stage_then_rerun_equals_a_clean_run(stage: str, tmp_path: Path, want: dict[str, Any]) -> None:
    killed = _seeded(tmp_path / "killed.db")
    url = killed.url.render_as_string(hide_password=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.faults.kill_worker", url, stage, FLOW_RUN],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    rerun = _cycle(killed)
    assert rerun.partition_skipped is None  # the retry of the crashed run holds the same lease
    got = dump(killed)
    for table in want:
        assert got[table] == want[table], table
