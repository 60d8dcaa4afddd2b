"""SIGKILL a cycle worker right after each stage, re-run the cycle: the database equals a clean run's.

The worker is a real subprocess running the shipped composition (``run_partition``, what the
``promotion-cycle`` flow task runs); the re-run uses the same flow-run id, as a Prefect retry of the
crashed run does. Tables are compared row by row with ids and wall-clock times normalised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.lifecycle.decisions import activate_skill
from skillflow.promotion import cycle
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import applicability_rules, skillbox
from tests.faults.dbdump import dump
from tests.faults.killing import run_killed
from tests.support.promotion import AGENT, TOOLS, agent, config, record_cancel, record_payment

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


def _offline(mp: pytest.MonkeyPatch) -> None:
    """What ``offline_providers`` sets, for a module-wide run."""
    for name, value in (("EMBEDDER", "hashing"), ("DISTILLER", "offline"), ("JUDGE", "offline")):
        mp.setenv(f"SKILLFLOW_{name}", value)


def _kill(engine: Engine, stage: str) -> None:
    run_killed("tests.faults.kill_worker", engine.url.render_as_string(hide_password=False), stage, FLOW_RUN)


@pytest.fixture(scope="module")
def want(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tables after one clean cycle: the reference of every stage's kill-and-rerun (built once)."""
    with pytest.MonkeyPatch.context() as mp:
        _offline(mp)
        clean = _seeded(tmp_path_factory.mktemp("clean") / "clean.db")
        clean_report = _cycle(clean)
        assert len(clean_report.promoted) == 2  # both classes promote in one clean cycle
        tables = dump(clean)
        clean.dispose()
    return tables


@pytest.mark.parametrize("stage", STAGES)
def test_kill_at_stage_then_rerun_equals_a_clean_run(stage: str, tmp_path: Path, want: dict[str, Any]) -> None:
    killed = _seeded(tmp_path / "killed.db")
    _kill(killed, stage)
    rerun = _cycle(killed)
    assert rerun.partition_skipped is None  # the retry of the crashed run holds the same lease
    got = dump(killed)
    for table in want:
        assert got[table] == want[table], table


# The report's fields compared below: what the sweep deprecated is part of the flow run's report (and of its
# ``skillflow.skill.deprecated`` events, which the flow emits from it).
SWEPT_FIELDS = ("kind", "agent_id", "user_id", "cycle", "deprecated", "promoted", "rejected", "partition_failed")


def _swept(path: Path) -> Engine:
    """A cycle ran, the cancel skill went ACTIVE (the tenant's rule refit for it), then its tool was removed:
    the next cycle's sweep deprecates it."""
    engine = _seeded(path)
    assert len(cycle.run_partition(engine, AGENT, "u1", config(require_shadow=True), flow_run_id="seed").promoted) == 2
    with engine.connect() as conn:
        cancel = conn.execute(select(skillbox.c.id).where(skillbox.c.name == "cancel-reservation")).scalar_one()
    activate_skill(engine, cancel, actor="alice", config=config(require_shadow=True))
    agent(engine).register_tools([t for t in TOOLS if t != "cancel_reservation"])
    return engine


def _rule_cycle(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(applicability_rules.c.cycle)).scalar_one())


@pytest.fixture(scope="module")
def want_swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tables after one clean cycle whose sweep deprecates a skill (built once)."""
    with pytest.MonkeyPatch.context() as mp:
        _offline(mp)
        clean = _swept(tmp_path_factory.mktemp("swept") / "clean.db")
        report = _cycle(clean)
        assert [reason for _, reason in report.deprecated] == ["tool removed: cancel_reservation"]
        assert _rule_cycle(clean) == 1  # the sweep's refit keeps the rule's cycle; calibration keeps that rule
        tables = dump(clean, SWEPT_FIELDS)
        clean.dispose()
    return tables


def test_kill_inside_the_sweep_then_rerun_equals_a_clean_run(tmp_path: Path, want_swept: dict[str, Any]) -> None:
    """Killed after the sweep's deprecation committed and before it refit the tenant's rule: the retry reports
    the deprecation and stores the rule a clean run stores (the same cycle number)."""
    killed = _swept(tmp_path / "killed.db")
    _kill(killed, "sweep-refit")
    with killed.connect() as conn:
        assert conn.execute(select(skillbox.c.status).where(skillbox.c.name == "cancel-reservation")).scalar() == (
            "deprecated"
        )
    rerun = _cycle(killed)
    assert [reason for _, reason in rerun.deprecated] == ["tool removed: cancel_reservation"]
    assert _rule_cycle(killed) == 1
    got = dump(killed, SWEPT_FIELDS)
    for table in want_swept:
        assert got[table] == want_swept[table], table
