"""The Prefect server restarts while slots of ``skillflow-partitions`` are held: every slot comes back.

A real ``prefect server`` (SQLite under the fleet's home), ``skillflow deploy`` on one pool with a global limit of
two slots, one worker. A promotion cycle's one ``promotion-partitions`` child holds a slot while its distiller
waits on a provider that answers only after the server was stopped and started again on the same port
(``LocalFleet.restart_server``); the other slot is held under a 60 s lease that nothing renews or releases, as
a holder that died with the server (a host restart) leaves it. After the restart the chunk ends and releases
its slot, and the dead holder's lease expires and Prefect's repossessor frees its slot.

With the leases in the server's memory (Prefect's default) the restarted server knew neither lease: the
chunk's release freed nothing, nothing expired, ``active_slots`` stayed at 2 of 2 for good, and the next
cycle's child waited for a slot that never came (docs/RELIABILITY.md). Every server the project starts now
keeps its leases on file (``skillflow.lab.fleet.SERVER_ENV``). Last, ``skillflow status`` is asked about a slot
taken with no chunk running: it warns and names the reset command, which frees the slot.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillflow.lab.fleet import BIN, LocalFleet, unschedule
from skillflow.operations.status import partition_slots
from tests.fleet.test_unresponsive import children, read, until
from tests.support.llm import fleet_llm_env
from tests.support.promotion import seed_cancels

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

LIMIT = "skillflow-partitions"
OVERRIDES = {"require_shadow": False, "promotion_every_n_runs": 0, "shadow_evaluation_enabled": False}
DEAD_LEASE_SECONDS = 60  # the server's floor for a lease
REPOSSESSOR_SECONDS = 15  # how often Prefect's repossessor looks for expired leases (its default)
RELEASE_SECONDS = 30  # a released slot shows at once; a leaked one never does
CYCLE_SECONDS = 120  # the second cycle on an idle pool takes ~20 s here


def held_provider() -> tuple[ThreadingHTTPServer, threading.Event, threading.Event]:
    """An OpenAI endpoint on 127.0.0.1 that holds each request until ``answer`` is set, then says INSUFFICIENT
    (the class is rejected and the chunk ends normally); ``asked`` says one came."""
    asked, answer = threading.Event(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            asked.set()
            answer.wait(600)
            message = {"role": "assistant", "content": "INSUFFICIENT"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, asked, answer


def active_slots(fleet: LocalFleet) -> int | None:
    limit = fleet._get(f"/v2/concurrency_limits/{LIMIT}")
    return None if limit is None else int(limit["active_slots"])


def slots_until(fleet: LocalFleet, at_most: int, timeout: float) -> int | None:
    """``active_slots`` once at most ``at_most``, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while ((n := active_slots(fleet)) is None or n > at_most) and time.monotonic() < deadline:
        time.sleep(0.5)
    return n


def final(run_id: Any, timeout: float) -> Any:
    """The flow run once final, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (run := read(run_id)).state.is_final() and time.monotonic() < deadline:
        time.sleep(1)
    return run


def cycle(url: str) -> Any:
    from prefect.deployments import run_deployment

    params = {"params": {"database_url": url, "force": True, "chunks": 1, "config_overrides": OVERRIDES}}
    return run_deployment("promotion-cycle/promotion-cycle", parameters=params, timeout=0)


def take_dead_lease() -> None:
    """One slot under a lease nobody renews or releases: its holder died."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.increment_concurrency_slots_with_lease([LIMIT], 1, "concurrency", DEAD_LEASE_SECONDS)


def take_slot_by_hand() -> None:
    """One slot of the limit taken with no lease, as a release lost to a restart leaves it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    with get_client(sync_client=True) as client:
        client.update_global_concurrency_limit(LIMIT, GlobalConcurrencyLimitUpdate(active_slots=1))


def cycle_slot_free() -> bool:
    """The ``promotion-cycle`` singleton's slot is free (its release can lag the Completed state under load)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        limit = client.read_deployment_by_name("promotion-cycle/promotion-cycle").global_concurrency_limit
    return limit is None or limit.active_slots == 0


@pytest.mark.usefixtures("offline_providers")  # this process's own seeding: no model load
def test_slots_held_across_a_server_restart_come_back_and_the_next_cycle_runs(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    seed_cancels(url, "u00")
    llm, asked, answer = held_provider()
    env = fleet_llm_env(url, llm.server_address[1], SKILLFLOW_LLM_TIMEOUT_SECONDS="300")
    started = time.monotonic()
    try:
        with LocalFleet(tmp_path / "prefect", env=env) as fleet:
            fleet.cli("deploy", "--pool", "compute", "--db", url, "--partition-limit", "2", "--json")
            with temporary_settings({PREFECT_API_URL: fleet.api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
                unschedule()
                fleet.start_workers("compute", 1, limit=None)
                first = cycle(url)
                [chunk] = until(lambda: children(first.id), 120, "the cycle's child run")
                assert asked.wait(120), "the child never reached the provider"
                take_dead_lease()
                dead_taken = time.monotonic()
                held = active_slots(fleet)
                assert held == 2, held  # the distilling chunk's slot and the dead holder's

                down = fleet.restart_server()
                answer.set()  # the chunk ends and releases its slot through the restarted server
                first_done = final(first.id, 180)
                chunk_done = read(chunk.id)
                after_chunk = slots_until(fleet, 1, RELEASE_SECONDS)

                until(cycle_slot_free, 60, "the promotion-cycle slot")
                second = cycle(url)
                second_done = final(second.id, CYCLE_SECONDS)
                second_children = [(c.name, c.state_name) for c in children(second.id)]
                bound = DEAD_LEASE_SECONDS + 2 * REPOSSESSOR_SECONDS + 15 - (time.monotonic() - dead_taken)
                leftover = slots_until(fleet, 0, max(bound, 5))
                expired_after = round(time.monotonic() - dead_taken)
                report = partition_slots(fleet.api_url, LIMIT)
                evidence = (
                    f"held {held} of 2, server down {down} s; after the first cycle {after_chunk}; second cycle "
                    f"{second_done.state_name} {second_children}; {leftover} left {expired_after} s after the dead "
                    f"lease was taken; first cycle {first_done.state_name} (chunk {chunk_done.state_name}); "
                    f"{round(time.monotonic() - started)} s so far"
                )
                print(evidence)
                assert first_done.state.is_final() and chunk_done.state.is_final(), evidence
                # The chunk's release freed its slot (in memory: 2, for good); the dead holder's may be gone already.
                assert after_chunk is not None and after_chunk <= 1, evidence
                assert second_done.state.is_completed(), evidence  # in memory: Running, its child waiting
                assert [state for _, state in second_children] == ["Completed"], evidence
                assert leftover == 0, evidence  # the dead holder's lease expired, its slot freed (in memory: 2)
                assert report is not None and not report.leaked and report.active_slots == 0, report

                # `skillflow status` against the real API: a slot taken with no chunk running (as a lost release
                # leaves it) is reported with the reset command, which frees it.
                take_slot_by_hand()
                warned = fleet.cli("status", "--db", url)
                reset = partition_slots(fleet.api_url, LIMIT)
                assert reset is not None and reset.leaked, reset
                done = subprocess.run(
                    [str(BIN / "prefect"), *shlex.split(reset.reset_command)[1:]],
                    env=fleet.process_env(),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert done.returncode == 0, done.stdout + done.stderr
                after_reset = active_slots(fleet)
    finally:
        answer.set()
        llm.shutdown()
        llm.server_close()
    assert f"1 slot(s) of the global concurrency limit {LIMIT} are taken" in warned, warned
    assert f"`prefect gcl update {LIMIT} --active-slots 0`" in warned, warned
    assert after_reset == 0
