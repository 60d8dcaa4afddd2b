"""SIGKILL the activation-review flow on its timeout and edit paths, retry it as a deployment's run is retried.

Each run is a flow run of the ``activation-review`` deployment (as ``skillflow review`` starts one), executed by a
worker process the way Prefect's engine executes a deployment's run (``tests/faults/ops_kill_worker.py``,
``review-run``) and killed with SIGKILL at one stage boundary: inside a decision's transaction, right after its
commit, between the decision and its Prefect event, or (``paused``) while waiting for the reviewer. The crashed run
is then marked Crashed, as the worker that watched the process die does, and retried as Prefect offers it:

* ``orchestrated`` — ``AwaitingRetry`` through the server's orchestration (the classic UI's Retry button): the
  server resets the run's fired pauses, so a retried run that pauses asks the reviewer again;
* ``forced`` — ``Scheduled`` with ``force=True`` (``prefect flow-run retry`` of a deployment's run; the newer UI
  forces ``AwaitingRetry`` likewise): the run's fired pauses are kept, and Prefect hands a retried run that pauses
  under an earlier attempt's pause key that pause's stored input instead of pausing.

Then a worker runs it again (``run_flow`` on the retried flow run, in this process so its events are captured) while
the test plays the reviewer. The rows (every table, ids and wall-clock times normalised: ``tests/faults/dbdump.py``),
the outcome the retried run returns and the events it emits equal a clean run's, and the reviewer is asked again
only for what the crashed attempt had not committed (docs/RELIABILITY.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine, select

from skillflow.lifecycle.revisions import current_revision
from skillflow.storage.schema import skill_events
from skillflow.storage.skills import entered, get_skill
from tests.conftest import ROOT
from tests.faults import ops_kill_worker as worker
from tests.faults.dbdump import dump
from tests.faults.test_kill_operations import _assert_same_rows, _row, _shadow_cancel, _twin_ids, _url
from tests.flows.test_review_answer_deleted import stored_inputs
from tests.support.promotion import config

pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]

TIMEOUT = 5  # seconds: the timeout path's pause (the test kills a ``paused`` worker well within it)
DEPLOYMENT = "activation-review"
Reply = Callable[[Engine, str, int], "dict[str, str] | None"]  # (engine, skill id, revision asked) -> the answer


# -- the reviewer -----------------------------------------------------------------------------------------------
def edit_then_activate(engine: Engine, skill_id: str, revision: int) -> dict[str, str] | None:
    """Revision 1: correct the SKILL.md (``ops_kill_worker.edited``); the edited revision: activate it."""
    if revision == 1:
        with engine.connect() as conn:
            content = get_skill(conn, skill_id).content
        return {"decision": "edit", "reviewer": "alice", "reason": worker.REASON, "skill_md": worker.edited(content)}
    return {"decision": "activate_user", "reviewer": "alice", "reason": "checked the edit"}


def silent(engine: Engine, skill_id: str, revision: int) -> None:
    """Nobody answers: the pause times out."""
    return None


def deciding(decision: str) -> Reply:
    def reply(engine: Engine, skill_id: str, revision: int) -> dict[str, str]:
        return {"decision": decision, "reviewer": "alice", "reason": "checked the evidence"}

    return reply


PATHS: dict[str, Reply] = {
    "timeout": silent,
    "edit": edit_then_activate,
    "reject": deciding("reject"),
    "keep_shadow": deciding("keep_shadow"),
}


# -- Prefect: the deployment's runs, their pauses, their retries --------------------------------------------------
def _deployment_run(engine: Engine, skill_id: str, path: str) -> str:
    """A flow run of the ``activation-review`` deployment for the skill (Scheduled, not started); its pause times
    out after :data:`TIMEOUT` seconds on the timeout path, after the worker's ``REVIEW_TIMEOUT`` on the others."""
    from prefect.deployments import run_deployment

    from flows.activation_review import activation_review

    activation_review.to_deployment(name=DEPLOYMENT).apply()
    timeout = TIMEOUT if path == "timeout" else worker.REVIEW_TIMEOUT
    params = worker.review_params(_url(engine), skill_id).model_dump() | {"timeout_seconds": timeout}
    run: Any = run_deployment(f"{DEPLOYMENT}/{DEPLOYMENT}", parameters={"params": params}, timeout=0)
    return str(run.id)


def _state(run_id: str) -> Any:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state


def _pauses(run_id: str) -> int:
    """How many times the run entered a Paused state (its state history)."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return sum(1 for s in client.read_flow_run_states(UUID(run_id)) if s.is_paused())


def _resume(run_id: str, answer: dict[str, str]) -> None:
    """Resume as the form does; the run saves its form's schema right after it paused, so wait for it."""
    from prefect.flow_runs import resume_flow_run

    deadline = time.monotonic() + 30
    while True:
        try:
            resume_flow_run(UUID(run_id), run_input=answer)
            return
        except RuntimeError as exc:
            if "schema not found" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _review(
    engine: Engine, skill_id: str, run_id: str, on_pause: Callable[[int], None], done: Callable[[], bool]
) -> list[int]:
    """Play the reviewer until ``done()``: ``on_pause(revision)`` once per pause; returns the revisions asked."""
    seen: set[Any] = set()
    asked: list[int] = []
    while not done():
        state = _state(run_id)
        if state is not None and state.is_paused() and state.id not in seen:
            seen.add(state.id)
            with engine.connect() as conn:
                asked.append(current_revision(conn, skill_id))
            on_pause(asked[-1])
        time.sleep(0.3)
    return asked


def _answering(engine: Engine, skill_id: str, run_id: str, reply: Reply) -> Callable[[int], None]:
    def on_pause(revision: int) -> None:
        answer = reply(engine, skill_id, revision)
        if answer is not None:
            _resume(run_id, answer)

    return on_pause


def _run_here(engine: Engine, skill_id: str, run_id: str, reply: Reply) -> tuple[Any, list[int]]:
    """A worker runs the flow run (in this process, as the engine does); the reviewer answers its pauses."""
    from prefect.flow_engine import load_flow_run, run_flow

    from flows.activation_review import activation_review

    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["outcome"] = run_flow(activation_review, flow_run=load_flow_run(UUID(run_id)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    asked = _review(
        engine, skill_id, run_id, _answering(engine, skill_id, run_id, reply), lambda: not thread.is_alive()
    )
    thread.join()
    assert "error" not in result, repr(result.get("error"))
    return result["outcome"], asked


def _run_killed(engine: Engine, skill_id: str, run_id: str, point: str, reply: Reply) -> list[int]:
    """The worker process runs the flow run with ``point`` armed (``paused``: the test kills it at its first pause)
    while the reviewer answers; it must die of SIGKILL. Returns the revisions the reviewer was asked."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    armed = "none" if point == "paused" else point
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.ops_kill_worker", _url(engine), "review-run", armed, run_id],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    answer = _answering(engine, skill_id, run_id, reply)
    on_pause = (lambda revision: proc.send_signal(signal.SIGKILL)) if point == "paused" else answer
    try:
        asked = _review(engine, skill_id, run_id, on_pause, lambda: proc.poll() is not None)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")[-2000:]
    if point == "paused":  # killed while waiting, not after the timeout was recorded
        with engine.connect() as conn:
            timeouts = conn.execute(
                select(skill_events.c.id).where(
                    skill_events.c.skill_id == skill_id, skill_events.c.event == "review_timeout"
                )
            ).all()
        assert not timeouts, "killed after the pause timed out: raise TIMEOUT on this machine"
    return asked


def _crash_and_retry(run_id: str, mode: str) -> None:
    """What follows the kill: the worker reports the run Crashed (the server makes a run whose pause had timed out
    Failed instead), then the run is retried (``mode``: the module's docstring)."""
    from prefect import get_client
    from prefect.states import AwaitingRetry, Crashed, Scheduled

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(UUID(run_id), Crashed(message="the flow run's process was killed"))
        assert client.read_flow_run(UUID(run_id)).state.is_final()
        if mode == "orchestrated":
            result = client.set_flow_run_state(UUID(run_id), AwaitingRetry(message="Retry from the UI"))
        else:
            result = client.set_flow_run_state(UUID(run_id), Scheduled(message="Retried via CLI"), force=True)
    assert result.status.value == "ACCEPT", result.details


# -- the clean twin of each path ----------------------------------------------------------------------------------
@dataclass
class Seen:
    """What a run left and reported: rows, outcome, events (normalised), revisions asked, final state type."""

    rows: dict[str, Any]
    outcome: dict[str, Any]
    events: list[tuple[Any, ...]]
    asked: list[int]
    final: str


def _outcome(outcome: Any) -> dict[str, Any]:
    return outcome.model_dump() | {"skill_id": "<skill>", "event_row": _row(outcome.event_row)}


def _events(sent: list[tuple[Any, ...]], skill_id: str) -> list[tuple[Any, ...]]:
    return [(e, r.replace(skill_id, "<skill>"), labels, payload) for e, r, labels, payload, *_ in sent]


CLEAN: dict[tuple[str, str], Seen] = {}


def _clean(engine: Engine, path: str, sent: list[tuple[Any, ...]]) -> Seen:
    """A clean run of ``path`` (computed once per backend: it does not depend on the kill point or the retry)."""
    key = (engine.dialect.name, path)
    if key not in CLEAN:
        skill_id = _shadow_cancel(engine)
        run_id = _deployment_run(engine, skill_id, path)
        outcome, asked = _run_here(engine, skill_id, run_id, PATHS[path])
        CLEAN[key] = Seen(
            _twin_ids(dump(engine)), _outcome(outcome), _events(sent, skill_id), asked, _state(run_id).type.value
        )
    sent.clear()
    return CLEAN[key]


# -- the tests ----------------------------------------------------------------------------------------------------
# (path, point, retry, revisions the crashed attempt asked, revisions its retry asks)
CASES = [
    ("timeout", "paused", "orchestrated", [1], [1]),
    ("timeout", "paused", "forced", [1], [1]),
    ("timeout", "timeout-open", "orchestrated", [1], [1]),
    ("timeout", "timeout-open", "forced", [1], [1]),
    ("timeout", "timeout-committed", "orchestrated", [1], []),
    ("edit", "edit-open", "orchestrated", [1], [2]),  # the edit answered, not committed: read back, applied
    ("edit", "edit-open", "forced", [1], [2]),
    ("edit", "edit-committed", "orchestrated", [1], [2]),
    ("edit", "edit-event", "orchestrated", [1], [2]),
    ("edit", "activate-open", "orchestrated", [1, 2], []),  # likewise the activation of revision 2
    ("edit", "activate-open", "forced", [1, 2], []),
    ("edit", "activate-committed", "orchestrated", [1, 2], []),
    ("edit", "activate-event", "orchestrated", [1, 2], []),
    ("reject", "event", "orchestrated", [1], []),
    ("keep_shadow", "event", "orchestrated", [1], []),
]


@pytest.mark.parametrize(
    ("path", "point", "retry", "asked_before", "asked_again"), CASES, ids=["-".join(c[:3]) for c in CASES]
)
def test_review_killed_on_its_path_then_retried_equals_a_clean_run(
    prefect_harness: None,
    twins: tuple[Engine, Engine],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    point: str,
    retry: str,
    asked_before: list[int],
    asked_again: list[int],
) -> None:
    """The retried run returns the clean run's outcome, emits the clean run's events (under the ids of the decision's
    lifecycle row), leaves the clean run's rows, and pauses only for what the reviewer had not answered: never
    again for an applied decision, nor for an answer about the revision it shows that the crashed attempt got and
    did not apply, whichever way the run is retried."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    killed, clean = twins
    want = _clean(clean, path, sent)

    skill_id = _shadow_cancel(killed)
    run_id = _deployment_run(killed, skill_id, path)
    assert _run_killed(killed, skill_id, run_id, point, PATHS[path]) == asked_before == want.asked[: len(asked_before)]
    pauses = _pauses(run_id)
    _crash_and_retry(run_id, retry)
    outcome, asked = _run_here(killed, skill_id, run_id, PATHS[path])

    _assert_same_rows(_twin_ids(dump(killed)), want.rows)
    assert _outcome(outcome) == want.outcome
    assert _events(sent, skill_id) == want.events
    if sent:  # an event carries the id of its decision's lifecycle row, on every attempt
        with killed.connect() as conn:
            row = entered(conn, skill_id, outcome.status)
        assert row is not None and [args[4:] for args in sent] == [(events.lifecycle_event_id(row.id),)] * len(sent)
    assert asked == asked_again and _pauses(run_id) - pauses == len(asked_again)
    # The reviewer's raw answers, the crashed attempt's too, left the Prefect server with the retry's outcome
    # (docs/SECURITY.md): a kill between a decision's commit and their deletion leaves them only until the retry.
    assert not [key for key in stored_inputs(run_id) if key.endswith("-response")]
    if not asked_again:  # the retry found the applied decision: it ended without pausing
        assert _state(run_id).type.value == "COMPLETED"
    else:
        assert _state(run_id).type.value == want.final


def test_a_forced_retry_asks_about_the_revision_it_shows(
    prefect_harness: None, twins: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside the activation of revision 1 (rolled back), then the skill edited (``skillflow edit``) before
    the run is retried with ``prefect flow-run retry``: the retry shows revision 2 and asks the reviewer about it;
    the activation answered for revision 1 is not applied to revision 2, which nobody reviewed."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    killed, _ = twins
    skill_id = _shadow_cancel(killed)
    run_id = _deployment_run(killed, skill_id, "activate")
    assert _run_killed(killed, skill_id, run_id, "activate-open", deciding("activate_user")) == [1]
    assert worker.run_edit(_url(killed), skill_id, config(require_shadow=True)).revision == 2
    _crash_and_retry(run_id, "forced")
    outcome, asked = _run_here(killed, skill_id, run_id, deciding("keep_shadow"))  # not reviewed yet: keep it
    with killed.connect() as conn:
        assert get_skill(conn, skill_id).status == "shadow" and entered(conn, skill_id, "active") is None
    assert (outcome.decision, outcome.status, outcome.revision, sent) == ("keep_shadow", "shadow", 2, [])
    assert asked == [2]


@pytest.mark.parametrize("retry", ["orchestrated", "forced"])
def test_an_answer_given_after_the_worker_died_is_applied_by_the_retry(
    prefect_harness: None, twins: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch, retry: str
) -> None:
    """The machine running a paused review dies; the reviewer, who cannot tell, answers the form (the run goes
    Running with no process, and is later marked Crashed: the unresponsive-run automation, docs/guide/ops.md).
    The retry applies that answer without asking again, and the rows equal a clean run's."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    killed, clean = twins
    want = _clean(clean, "reject", sent)

    skill_id = _shadow_cancel(killed)
    run_id = _deployment_run(killed, skill_id, "reject")
    assert _run_killed(killed, skill_id, run_id, "paused", PATHS["reject"]) == [1]
    answer = PATHS["reject"](killed, skill_id, 1)
    assert answer is not None
    _resume(run_id, answer)  # the form, answered for a run whose process is gone
    assert _state(run_id).is_running()
    pauses = _pauses(run_id)
    _crash_and_retry(run_id, retry)
    outcome, asked = _run_here(killed, skill_id, run_id, PATHS["reject"])

    assert asked == [] and _pauses(run_id) == pauses
    assert _outcome(outcome) == want.outcome
    _assert_same_rows(_twin_ids(dump(killed)), want.rows)
    assert _events(sent, skill_id) == want.events
    with killed.connect() as conn:
        assert get_skill(conn, skill_id).status == "rejected"
