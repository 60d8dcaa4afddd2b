"""A worker whose machine holds the code elsewhere than the deploying one: ``skillflow deploy --source``.

A real ``prefect server`` and one process worker started in a directory of its own. The deployments are
registered twice: once from a git repository (each run clones it; ``file://`` stands in for a remote), once
naming the directory the worker holds its checkout at. Each time a promotion cycle runs on the pool, fans out
to its ``promotion-partitions`` child on the same worker, and stores its report; no pull step names the
deploying project's directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from flows.serve import PROJECT_ROOT
from skillflow.lab.fleet import LocalFleet, unschedule
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import reports, skillbox
from tests.support.promotion import seed_cancels

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

CODE = ("flows", "tasks", "config")  # what a run loads from its source; skillflow itself is the worker's install
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}


def checkout(to: Path) -> Path:
    """A copy of the project's flow code at ``to`` (no caches), as another machine's checkout would hold it."""
    for part in CODE:
        shutil.copytree(PROJECT_ROOT / part, to / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return to


def repository(at: Path) -> str:
    """A git repository holding the flow code, committed on branch ``fleet``; its ``file://`` URL."""
    checkout(at)
    git = ["git", "-C", str(at), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "fleet"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "flows"], check=True)
    return at.as_uri()


def pull_steps(name: str) -> list[dict[str, Any]]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return list(client.read_deployment_by_name(name).pull_steps or [])


def slot_released(name: str, timeout: float = 60) -> None:
    """Wait until the deployment's concurrency slot is free: its limit is 1 with ``cancel-new``, and a run
    started while the previous run's slot is still held (its release lags the Completed state under load) is
    Cancelled "Deployment concurrency limit reached"."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            limit = client.read_deployment_by_name(name).global_concurrency_limit
            if limit is None or limit.active_slots == 0:
                return
            assert time.monotonic() < deadline, f"{name}: {limit.active_slots} slot(s) still held after {timeout} s"
            time.sleep(0.5)


def run_cycle(url: str, user: str) -> Any:
    from prefect.deployments import run_deployment

    slot_released("promotion-cycle/promotion-cycle")
    params = {"params": {"database_url": url, "force": True, "user_id": user, "config_overrides": OVERRIDES}}
    return finished(run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0).id)


def finished(run_id: Any, timeout: float = 180) -> Any:
    """The flow run once final (or as it is after ``timeout`` seconds)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while not (run := client.read_flow_run(run_id)).state.is_final() and time.monotonic() < deadline:
            time.sleep(1)
    return run


def cycle_runs() -> list[tuple[str, str, bool]]:
    """Every flow run as (name, state, auto-scheduled): what took the slot when a cycle was Cancelled."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    return [(r.name, str(r.state_name), r.auto_scheduled) for r in runs]


def stored(url: str, user: str) -> tuple[list[str], list[str]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        flow_runs = conn.execute(select(reports.c.flow_run_id).where(reports.c.user_id == user)).scalars().all()
        skills = conn.execute(select(skillbox.c.status).where(skillbox.c.user_id == user)).scalars().all()
    engine.dispose()
    return list(flow_runs), list(skills)


@pytest.mark.usefixtures("offline_providers")  # this process's own seeding: no model load
def test_a_worker_runs_the_flows_from_its_own_checkout_or_a_clone(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    remote = repository(tmp_path / "remote")
    worker_home = checkout(tmp_path / "worker-machine" / "skillflow")
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()
    env = {"SKILLFLOW_EMBEDDER": "hashing", "SKILLFLOW_DISTILLER": "offline", "SKILLFLOW_JUDGE": "offline"}
    with LocalFleet(tmp_path / "prefect", env=env) as fleet:
        settings = {PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}
        for user, source in (
            ("git", ["--source", remote, "--branch", "fleet"]),
            ("dir", ["--source", str(worker_home)]),
        ):
            seed_cancels(url, user)
            out = fleet.cli("deploy", "--pool", "compute", "--db", url, "--json", *source)
            deployed = json.loads(out)  # stdout is JSON alone (Prefect's tables go to stderr)
            assert deployed["source"]["location"] == source[1] and deployed["source"]["git"] == (user == "git")
            with temporary_settings(settings):
                unschedule()
                steps = pull_steps("promotion-cycle/promotion-cycle")
                assert str(PROJECT_ROOT) not in json.dumps(steps), steps
                if user == "git":
                    [step] = steps
                    clone = step["prefect.deployments.steps.git_clone"]
                    assert (clone["repository"], clone["branch"]) == (remote, "fleet")
                else:
                    assert steps == [
                        {"prefect.deployments.steps.set_working_directory": {"directory": str(worker_home)}}
                    ]
                if not fleet.workers:
                    fleet.start_workers("compute", 1, limit=None, cwd=elsewhere)
                run = run_cycle(url, user)
                logs = "".join(f.read_text()[-3000:] for f in (tmp_path / "prefect").glob("worker-*.log"))
                assert run.state.is_completed(), (user, run.state, cycle_runs(), logs)
            flow_runs, skills = stored(url, user)
            # The pool run fans out: the partition's report is written by its promotion-partitions child run.
            assert len(flow_runs) == 1 and flow_runs[0] != str(run.id), flow_runs
            assert skills == ["active"]


@pytest.mark.postgres
@pytest.mark.usefixtures("offline_providers")
def test_a_database_password_stays_out_of_the_deployments_and_the_runs_use_the_workers_url(
    tmp_path: Path, pg_schema_url: str
) -> None:
    """``--db`` with a password: no deployment records it (the UI shows parameters and job variables); a run
    without a URL of its own reads the worker's ``SKILLFLOW_DATABASE_URL`` (trust auth here takes any password)."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url = pg_schema_url
    secret = "s3cret-fleet-pw"
    with_password = make_url(url).set(password=secret).render_as_string(hide_password=False)
    seed_cancels(url, "pw")
    env = {"SKILLFLOW_EMBEDDER": "hashing", "SKILLFLOW_DISTILLER": "offline", "SKILLFLOW_JUDGE": "offline"}
    with LocalFleet(tmp_path / "prefect", env={**env, "SKILLFLOW_DATABASE_URL": url}) as fleet:
        out = fleet.cli("deploy", "--pool", "compute", "--db", with_password, "--json")
        assert json.loads(out)["database_url_recorded"] is False
        assert secret not in out
        with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
            unschedule()
            with get_client(sync_client=True) as client:
                recorded = [(d.parameters, d.job_variables, d.pull_steps) for d in client.read_deployments() if d.tags]
            assert len(recorded) >= 8 and secret not in json.dumps(recorded, default=str)
            assert all(p["params"]["database_url"] is None for p, _, _ in recorded), [p for p, _, _ in recorded]
            fleet.start_workers("compute", 1, limit=None)
            params = {"params": {"force": True, "user_id": "pw", "config_overrides": OVERRIDES, "fan_out": "local"}}
            run = finished(run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0).id)
            assert run.state.is_completed(), run.state
            assert secret not in json.dumps(run.parameters)
    flow_runs, skills = stored(url, "pw")
    assert flow_runs == [str(run.id)] and skills == ["active"]
