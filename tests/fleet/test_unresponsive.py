"""A worker machine dies mid-run: the shipped automation marks its run Crashed, and the parent moves on.

A real ``prefect server``, ``skillflow deploy`` on a control and a compute pool, one worker each. A promotion
cycle's one child run is distilling (the provider never answers) when the compute worker's whole process group
(the flow run's process included) is SIGKILLed, as a machine's power loss would: nothing is left to report
the child. Its heartbeats stop; the
``skillflow-crash-unresponsive-runs`` automation marks it Crashed, and the parent, which would otherwise wait
for its child timeout (six hours by default) while holding the ``promotion-cycle`` singleton, ends naming it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillflow.lab.fleet import LocalFleet, unschedule
from tasks.automations import CRASH_UNRESPONSIVE
from tests.support.llm import fleet_llm_env
from tests.support.promotion import AGENT, seed_cancels

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

HEARTBEAT_SECONDS = 30  # Prefect's floor
UNRESPONSIVE_SECONDS = 75
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}


def silent_provider() -> tuple[ThreadingHTTPServer, threading.Event]:
    """An OpenAI endpoint on 127.0.0.1 that takes each request and never answers; the event says one came."""
    asked = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def do_POST(self) -> None:
            asked.set()
            time.sleep(600)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, asked


def read(run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def children(parent_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        flt = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id]))
        return list(client.read_flow_runs(flow_run_filter=flt))


def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(1)
    return found


@pytest.mark.usefixtures("offline_providers")  # this process's own seeding: no model load
def test_a_dead_machines_run_is_marked_crashed_and_its_parent_moves_on(tmp_path: Path) -> None:
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    seed_cancels(url, "u00")
    llm, asked = silent_provider()
    env = fleet_llm_env(
        url,
        llm.server_address[1],
        SKILLFLOW_LLM_TIMEOUT_SECONDS="300",
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY=str(HEARTBEAT_SECONDS),
        SKILLFLOW_FLEET_UNRESPONSIVE_SECONDS=str(UNRESPONSIVE_SECONDS),
    )
    try:
        with LocalFleet(tmp_path / "prefect", env=env) as fleet:
            out = fleet.cli("deploy", "--pool", "compute", "--control-pool", "ctl", "--db", url, "--json")
            assert CRASH_UNRESPONSIVE in json.loads(out)["automations"]
            with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
                unschedule()
                fleet.start_workers("ctl", 1, limit=None)
                fleet.start_workers("compute", 1, limit=None)
                [machine] = [w for w in fleet.workers if getattr(w, "pool", None) == "compute"]
                params = {"params": {"database_url": url, "force": True, "chunks": 1, "config_overrides": OVERRIDES}}
                parent = run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0)
                [child] = until(lambda: children(parent.id), 120, "the cycle's child run")
                assert asked.wait(120), "the child never reached the provider"
                assert read(child.id).state.is_running()

                killed_pids = fleet.kill_worker(machine)  # the worker and the run it started, at once
                killed = time.monotonic()
                assert len(killed_pids) >= 2, killed_pids  # the flow run's process was among them

                done = until(lambda: (r := read(parent.id)).state.is_final() and r, 4 * UNRESPONSIVE_SECONDS, "parent")
                waited = time.monotonic() - killed
                crashed = read(child.id)
    finally:
        llm.shutdown()
        llm.server_close()
    assert crashed.state.is_crashed(), crashed.state
    assert CRASH_UNRESPONSIVE in (crashed.state.message or ""), crashed.state
    assert done.state.is_failed(), done.state
    assert f"failed: {AGENT}/u00 (child run crashed)" in (done.state.message or ""), done.state
    assert waited < UNRESPONSIVE_SECONDS + 2 * HEARTBEAT_SECONDS + 60, waited
