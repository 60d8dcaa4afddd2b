"""A review waits without a process: suspended on a real worker, resumed by the answer, expired at its timeout.

A real ``prefect server``, ``skillflow deploy`` on a control and a compute pool, one control worker. Two SHADOW
skills of one tenant are reviewed as ``skillflow review`` starts a review (a run of the ``activation-review``
deployment):

* the first run suspends: its process exits, the worker holds nothing for it and does not start it again while it
  waits; a run of the deployment is scheduled at its timeout to expire it. The reviewer's answer resumes it, the
  worker runs it again from the top, and the decision is applied once, by that run, which then deletes the answer
  from the server (docs/SECURITY.md);
* the second run's timeout is 3 seconds: its expiry run (started by the same worker) records ``review_timeout``
  for it and ends it Completed; the skill stays in SHADOW.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import create_engine, select

from skillflow.lab.fleet import LocalFleet, process_tree, unschedule
from skillflow.storage.schema import skill_events, skillbox
from tests.faults.test_kill_operations import _distilled
from tests.fleet.test_unresponsive import read, until

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

OVERRIDES = {"require_shadow": True, "shadow_evaluation_enabled": False}
ANSWER = {"decision": "activate_user", "reviewer": "alice", "reason": "checked the evidence"}


def expiry_runs(run_id: Any) -> list[Any]:
    """The runs of the review deployment that expire ``run_id``."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    return [
        r for r in runs if ((r.parameters.get("params") or {}).get("expires") or {}).get("flow_run_id") == str(run_id)
    ]


def engine_processes(worker: Any) -> list[int]:
    """The flow-run processes a worker has running (``python -m prefect.engine`` below it)."""
    out = []
    for pid in process_tree(worker.pid)[1:]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"prefect.engine" in cmd:
            out.append(pid)
    return out


def review(url: str, skill_id: str, timeout: int) -> Any:
    from prefect.deployments import run_deployment

    params = {"database_url": url, "skill_id": skill_id, "timeout_seconds": timeout, "config_overrides": OVERRIDES}
    return run_deployment("activation-review/activation-review", parameters={"params": params}, timeout=0)


@pytest.mark.usefixtures("offline_providers")  # this process's own seeding: no model load
def test_a_suspended_review_frees_its_worker_resumes_on_the_answer_and_expires_at_its_timeout(tmp_path: Path) -> None:
    from prefect.flow_runs import resume_flow_run
    from prefect.input.actions import filter_flow_run_input
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    engine = create_engine(url)
    _distilled(engine, require_shadow=True)
    with engine.connect() as conn:
        ids = dict(conn.execute(select(skillbox.c.name, skillbox.c.id)).all())
    answered, unanswered = ids["cancel-reservation"], next(i for n, i in ids.items() if n != "cancel-reservation")
    env = {"SKILLFLOW_DATABASE_URL": url, "SKILLFLOW_EMBEDDER": "hashing", "SKILLFLOW_JUDGE": "offline"}
    with LocalFleet(tmp_path / "prefect", env=env) as fleet:
        fleet.cli("deploy", "--pool", "compute", "--control-pool", "ctl", "--db", url)
        with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
            unschedule()
            fleet.start_workers("ctl", 1, limit=None)
            [worker] = fleet.workers

            run = review(url, answered, 600)
            waiting = until(lambda: (r := read(run.id)).state.name == "Suspended" and r, 120, "the review suspended")
            until(lambda: not engine_processes(worker), 30, "the run's process exited")
            time.sleep(5)  # the worker polls every second: it does not start the waiting run again
            assert read(run.id).state.name == "Suspended" and not engine_processes(worker)
            [expiry] = expiry_runs(run.id)
            assert expiry.state.is_scheduled()
            left = (expiry.expected_start_time - waiting.state.timestamp).total_seconds()
            assert 590 < left < 610, left  # scheduled at the review's timeout

            resume_flow_run(UUID(str(run.id)), run_input=ANSWER)  # the UI's form
            done = until(lambda: (r := read(run.id)).state.is_final() and r, 120, "the resumed review")
            stored = filter_flow_run_input(key_prefix="", limit=100, flow_run_id=UUID(str(run.id)))
            assert stored and not [i.key for i in stored if i.key.endswith("-response")]  # applied, then deleted

            late = review(url, unanswered, 3)
            ended = until(lambda: (r := read(late.id)).state.is_final() and r, 120, "the expired review")
            [expired_by] = expiry_runs(late.id)
            expired_by = until(lambda: (r := read(expired_by.id)).state.is_final() and r, 60, "the expiry run")
            assert expiry_runs(run.id)[0].state.is_scheduled()  # the answered review's expiry has not run yet
    assert done.state.is_completed(), done.state
    assert ended.state.is_completed() and "timed out" in (ended.state.message or ""), ended.state
    assert expired_by.state.is_completed(), expired_by.state
    with engine.connect() as conn:
        status = dict(conn.execute(select(skillbox.c.id, skillbox.c.status)).all())
        events = conn.execute(
            select(skill_events.c.skill_id, skill_events.c.event, skill_events.c.actor, skill_events.c.flow_run_id)
            .where(skill_events.c.flow_run_id.in_([str(run.id), str(late.id)]))
            .order_by(skill_events.c.created_at)
        ).all()
    assert status[answered] == "active" and status[unanswered] == "shadow"
    assert [tuple(e) for e in events] == [
        (answered, "activated", "alice", str(run.id)),
        (unanswered, "review_timeout", "flow:activation-review", str(late.id)),
    ]
