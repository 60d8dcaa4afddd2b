"""SIGKILL the backfill, the class-stats fold, an import and an edit mid-way, re-run: the rows equal a clean run's.

The worker (``tests/faults/ops_kill_worker.py``) is a real subprocess running the shipped composition of each
operation, killed at one point (inside a transaction, or right after one committed). The re-run is what an
operator or Prefect does next: the backfill retried under the same flow-run id (a retry of the crashed flow
run), the fold, the import and the edit asked again. Every table is then compared with a clean twin's, row for
row (ids and wall-clock times normalised, ``tests/faults/dbdump.py``), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.models import SkillStatus, Step, utcnow
from skillflow.lifecycle.transfer import export_skills
from skillflow.operations.backfill import BackfillReport
from skillflow.promotion.cycle import run_partition
from skillflow.runtime import Skillflow
from skillflow.storage import class_stats
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skillbox, workflow_memory
from skillflow.storage.skills import entered, insert_skill, transition
from tests.conftest import ROOT
from tests.faults import ops_kill_worker as worker
from tests.faults.dbdump import dump
from tests.faults.killing import run_killed
from tests.storage.test_backfill import GOLDEN
from tests.storage.test_backfill import _legacy as legacy_rows
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("offline_providers")]

BACKFILL_FIELDS = (*BackfillReport.__dataclass_fields__, "summary")


def _kill(engine: Engine, operation: str, point: str, arg: str = "") -> None:
    """The worker inherits the offline providers' settings from this process's environment."""
    run_killed("tests.faults.ops_kill_worker", _url(engine), operation, point, arg)


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _assert_same_rows(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for table in want:
        assert got[table] == want[table], table


# -- backfill -------------------------------------------------------------------------------------------------
def _legacy(engine: Engine) -> None:
    """Eight legacy runs without a canonical hash (five of one class, two without tools, one unreadable), a
    captured run, an ACTIVE skill of the legacy class (newly hashed runs are stamped) and folded statistics
    (re-hashed classes are marked for a recount)."""
    migrate(engine)
    legacy_rows(engine, 5)
    legacy_rows(engine, 2, steps={}, start=100)
    legacy_rows(engine, 1, steps="not steps", start=200)
    captured = Skillflow(agent_id="legacy", engine=engine)
    captured.record_run("Refund order 9", "u1", [Step("lookup_order", {"order_id": 1})], run_id="run-9", strict=True)
    with engine.begin() as conn:
        insert_skill(conn, agent_id="legacy", user_id="u1", canonical_hash=GOLDEN, name="refund-order",
                     description="Refund an order.", content="x", status=SkillStatus.ACTIVE)  # fmt: skip
    class_stats.fold(engine)


@pytest.mark.parametrize("point", ["batch-open", "batch-committed", "report"])
def test_backfill_killed_mid_way_then_retried_equals_a_clean_run(twins: tuple[Engine, Engine], point: str) -> None:
    killed, clean = twins
    _legacy(clean)
    want_report = worker.run_backfill(_url(clean))
    assert want_report.summary() == "scanned=9 updated=5 already_hashed=1 no_steps=2 invalid=1"
    assert want_report.batches == 4

    _legacy(killed)
    _kill(killed, "backfill", point)
    report = worker.run_backfill(_url(killed))  # the crashed flow run retried: the same flow-run id
    assert (report.summary(), report.batches) == (want_report.summary(), want_report.batches)
    _assert_same_rows(dump(killed, BACKFILL_FIELDS), dump(clean, BACKFILL_FIELDS))


# -- class-stats fold -----------------------------------------------------------------------------------------
def _folded_then_changed(engine: Engine) -> None:
    """Folded statistics, then what the next fold must take in: new runs in two partitions, a class whose skill
    was demoted (its ``since`` moved) and a class whose runs were stamped (marked stale)."""
    migrate(engine)
    sf = agent(engine)
    hashes = {}
    for i in range(6):
        hashes["cancel"] = record_cancel(sf, "u1", i)
        hashes["pay"] = record_payment(sf, "u1", i, accepted=i != 0)
    class_stats.fold(engine)  # the first fold: a recount
    with engine.begin() as conn:
        demoted = insert_skill(conn, agent_id=AGENT, user_id="u1", canonical_hash=hashes["cancel"], name="cancel",
                               description="Cancel.", content="x", status=SkillStatus.ACTIVE)  # fmt: skip
        transition(conn, demoted.id, SkillStatus.DEMOTED, actor="alice", reason="drift")
        insert_skill(conn, agent_id=AGENT, user_id="u1", canonical_hash=hashes["pay"], name="pay",
                     description="Pay.", content="x", status=SkillStatus.ACTIVE)  # fmt: skip
    for i in range(6, 9):
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
        record_cancel(sf, "u2", i)


def _reference(engine: Engine) -> dict[tuple[str, str], list[Any]]:
    """The maintained statistics of every partition next to the full aggregation (the reference)."""
    with engine.connect() as conn:
        maintained = class_stats.completed(conn, class_stats.read_stats(conn))
        return {p: [maintained.get(p), aggregate_classes(conn, *p)] for p in (("agent-a", "u1"), ("agent-a", "u2"))}


@pytest.mark.parametrize("point", ["open", "committed"])
def test_class_stats_fold_killed_then_run_again_equals_a_clean_run(twins: tuple[Engine, Engine], point: str) -> None:
    killed, clean = twins
    _folded_then_changed(clean)
    assert class_stats.fold(clean) == {"folded": 6, "recounted": 2}
    want = dump(clean)

    _folded_then_changed(killed)
    _kill(killed, "fold", point)
    again = class_stats.fold(killed)
    assert again == ({"folded": 6, "recounted": 2} if point == "open" else {"folded": 0, "recounted": 0})
    got = dump(killed)
    for stats in _reference(killed).values():
        assert stats[0] == stats[1]  # the maintained statistics equal the full aggregation
    if point == "committed":  # the re-run is a second fold, which records that it folded nothing
        [state] = got["class_stats_state"]
        assert state.pop("last_folded") == 0 and want["class_stats_state"][0].pop("last_folded") == 6
    _assert_same_rows(got, want)


# -- import and edit ------------------------------------------------------------------------------------------
def _distilled(engine: Engine, require_shadow: bool) -> None:
    migrate(engine)
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
        record_payment(sf, "u1", i, accepted=i != 0)
    report = run_partition(engine, AGENT, "u1", config(require_shadow=require_shadow), flow_run_id="seed")
    assert len(report.promoted) == 2


def _exported(engine: Engine, folder: Path) -> Path:
    """Two ACTIVE skills of the tenant, exported as Agent Skills folders: what the import reads."""
    _distilled(engine, require_shadow=False)
    assert len(export_skills(engine, folder)) == 2
    return folder


@pytest.mark.parametrize("point", ["open", "committed"])
def test_import_killed_mid_way_then_run_again_equals_a_clean_run(
    twins: tuple[Engine, Engine], tmp_path: Path, point: str
) -> None:
    killed, clean = twins
    src = _exported(clean, tmp_path / "clean-export")
    rule = dump(clean)["applicability_rules"]
    assert [r.decision for r in worker.run_import(_url(clean), str(src), config(require_shadow=True))] == [
        "imported",
        "imported",
    ]
    want = dump(clean)
    assert want.pop("applicability_rules") == rule  # SHADOW imports leave the rule of the ACTIVE skills alone

    src = _exported(killed, tmp_path / "killed-export")
    rule = dump(killed)["applicability_rules"]
    _kill(killed, "import", point, str(src))
    results = worker.run_import(_url(killed), str(src), config(require_shadow=True))
    assert [r.decision for r in results] == (["imported"] * 2 if point == "open" else ["unchanged", "imported"])
    got = dump(killed)
    assert got.pop("applicability_rules") == rule  # fitted on random skill ids: compared with its own twin only
    _assert_same_rows(got, want)


def _shadow_cancel(engine: Engine) -> str:
    _distilled(engine, require_shadow=True)
    with engine.connect() as conn:
        return str(conn.execute(select(skillbox.c.id).where(skillbox.c.name == "cancel-reservation")).scalar_one())


@pytest.mark.parametrize("point", ["open", "committed"])
def test_edit_killed_mid_way_then_asked_again_equals_a_clean_run(twins: tuple[Engine, Engine], point: str) -> None:
    killed, clean = twins
    clean_id = _shadow_cancel(clean)
    assert worker.run_edit(_url(clean), clean_id, config(require_shadow=True)).revision == 2
    skill_id = _shadow_cancel(killed)
    _kill(killed, "edit", point, skill_id)
    result = worker.run_edit(_url(killed), skill_id, config(require_shadow=True))
    assert (result.revision, result.changed) == (2, point == "open")  # committed: the same text again is a no-op
    got, want = dump(killed), dump(clean)
    with killed.connect() as conn:  # every run of the tenant is still there (the edit touches none)
        assert len(list(conn.execute(select(workflow_memory.c.id)))) == 12
    _assert_same_rows(got, want)


# -- the review flow's decision and its event -----------------------------------------------------------------
def _twin_ids(dumped: dict[str, Any]) -> dict[str, Any]:
    """What differs between two twins by construction, as tokens: the review runs' flow-run ids in the lifecycle
    log, and the rule's two digests over the ACTIVE skills' (random) ids; the rule's content is compared."""
    for row in dumped["skill_events"]:
        if row["flow_run_id"] not in (None, "seed"):
            row["flow_run_id"] = "<review run>"
    for row in dumped["applicability_rules"]:
        row["fingerprint"] = row["rule"]["fit_key"] = "<digest>"
    return dumped


def _kill_review(engine: Engine, skill_id: str, answer: dict[str, str]) -> str:
    """The review flow in a worker process, answered with ``answer``, killed between the decision's commit and its
    event; returns the crashed flow run's id."""
    from prefect.flow_runs import resume_flow_run
    from prefect.settings import PREFECT_API_URL

    from tests.flows.test_lifecycle_flows import _paused_run_id

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.ops_kill_worker", _url(engine), "review", "event", skill_id],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        run_id = _paused_run_id(skill_id, timeout=120)
        resume_flow_run(UUID(run_id), run_input=answer)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    return run_id


def _retry(run_id: str) -> Any:
    """What Prefect does with the crashed run: marked Crashed, then retried (the UI's Retry: AwaitingRetry) and run
    again under the same flow-run id, as a worker runs it."""
    from prefect import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import AwaitingRetry, Crashed

    from flows.activation_review import activation_review

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, Crashed(message="the worker process was killed"), force=True)
        client.set_flow_run_state(run_id, AwaitingRetry(), force=True)
        flow_run = client.read_flow_run(UUID(run_id))
    return run_flow(activation_review, flow_run=flow_run)


def _review(engine: Engine, skill_id: str, answer: dict[str, str]) -> Any:
    """The review flow in this process with the worker's parameters, answered with ``answer`` (the clean run)."""
    from prefect.flow_runs import resume_flow_run

    from tests.flows.test_lifecycle_flows import _paused_run_id, review_in_thread

    outcome = review_in_thread(worker.review_params(_url(engine), skill_id))
    resume_flow_run(UUID(_paused_run_id(skill_id, timeout=120)), run_input=answer)
    return outcome()


def _row(event_row: str | None) -> str | None:
    """A lifecycle row id as compared between twins: whether there is one (the ids are random)."""
    return None if event_row is None else "<row>"


@pytest.mark.prefect
@pytest.mark.parametrize("decision", ["activate_user", "reject", "keep_shadow"])
def test_review_killed_before_its_event_then_retried_emits_it_and_equals_a_clean_run(
    prefect_harness: None, twins: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch, decision: str
) -> None:
    """Killed between the decision's commit and its Prefect event, the crashed flow run retried: the retry does
    not ask the reviewer again (Prefect pauses a retried run afresh), returns the clean run's outcome and emits
    the clean run's event under the id the crashed attempt would have used; the rows equal a clean run's."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    answer = {"decision": decision, "reviewer": "alice", "reason": "checked the evidence"}
    killed, clean = twins

    clean_id = _shadow_cancel(clean)
    clean_outcome = _review(clean, clean_id, answer)
    assert (clean_outcome.event_row is None) == (decision == "keep_shadow")
    want_outcome = clean_outcome.model_dump() | {"skill_id": "<skill>", "event_row": _row(clean_outcome.event_row)}
    want_events = [(e, r.replace(clean_id, "<skill>"), labels, payload) for e, r, labels, payload, *_ in sent]
    assert len(want_events) == (0 if decision == "keep_shadow" else 1)
    sent.clear()

    skill_id = _shadow_cancel(killed)
    run_id = _kill_review(killed, skill_id, answer)
    outcome = _retry(run_id)
    assert outcome.model_dump() | {"skill_id": "<skill>", "event_row": _row(outcome.event_row)} == want_outcome
    assert [(e, r.replace(skill_id, "<skill>"), labels, payload) for e, r, labels, payload, *_ in sent] == want_events
    with killed.connect() as conn:  # the retry's event carries the id of the decision's lifecycle row
        row = entered(conn, skill_id, outcome.status)
    assert row is not None and outcome.event_row == (None if decision == "keep_shadow" else row.id)
    assert [args[4:] for args in sent] == [(events.lifecycle_event_id(row.id),)] * len(sent)
    _assert_same_rows(_twin_ids(dump(killed)), _twin_ids(dump(clean)))
