"""A deployment's review waits suspended; the run it schedules at its timeout expires only that wait.

Each review is a run of the ``activation-review`` deployment executed in this process as a worker executes it
(``run_flow`` on the flow run): it suspends (Prefect's ``Pause`` ends the execution), the test answers the form or
not, then runs the expiry run and the resumed review as a worker would. The real worker, its freed process and the
expiry started on its own are in ``tests/fleet/test_review_suspended.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.exceptions import Pause
from sqlalchemy import Engine, create_engine, func, select

from skillflow.lifecycle.revisions import current_revision
from skillflow.storage.schema import skill_events, skillbox
from skillflow.storage.skills import get_skill
from tasks.review import expire_review
from tests.faults.test_kill_operations import _distilled

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]

OVERRIDES = {"require_shadow": True, "shadow_evaluation_enabled": False}
DEPLOYMENT = "activation-review/activation-review"


@pytest.fixture
def shadow(tmp_path: Path) -> tuple[Engine, str, str]:
    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    engine = create_engine(url)
    _distilled(engine, require_shadow=True)
    with engine.connect() as conn:
        skill_id = conn.execute(select(skillbox.c.id).where(skillbox.c.name == "cancel-reservation")).scalar_one()
    return engine, url, str(skill_id)


def _start(url: str, skill_id: str, timeout: int = 2) -> str:
    """``skillflow review``: a run of the deployment (Scheduled), then executed until it suspends. Its expiry run
    is scheduled ``timeout`` seconds later; executing it before then waits for that time (as Prefect does)."""
    from prefect.deployments import run_deployment

    from flows.activation_review import activation_review

    activation_review.to_deployment(name="activation-review").apply()
    params = {"database_url": url, "skill_id": skill_id, "timeout_seconds": timeout, "config_overrides": OVERRIDES}
    run: Any = run_deployment(DEPLOYMENT, parameters={"params": params}, timeout=0)
    assert _execute(str(run.id)) is Pause
    return str(run.id)


def _execute(run_id: str) -> Any:
    """Run the flow run as a worker does; ``Pause`` when it suspended, else its outcome."""
    from prefect.flow_engine import load_flow_run, run_flow

    from flows.activation_review import activation_review

    try:
        return run_flow(activation_review, flow_run=load_flow_run(UUID(run_id)))
    except Pause:
        return Pause


def _run(run_id: str) -> Any:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id))


def _expiries(run_id: str) -> list[str]:
    """The expiry runs scheduled for ``run_id``, oldest first."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    mine = [r for r in runs if ((r.parameters.get("params") or {}).get("expires") or {}).get("flow_run_id") == run_id]
    return [str(r.id) for r in sorted(mine, key=lambda r: r.created)]


def _answer(run_id: str, answer: dict[str, str]) -> None:
    from prefect.flow_runs import resume_flow_run

    resume_flow_run(UUID(run_id), run_input=answer)


def _events(engine: Engine, skill_id: str, event: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(skill_events.c.skill_id == skill_id, skill_events.c.event == event)
            ).scalar_one()
        )


def test_an_unanswered_review_times_out_once_and_cannot_be_answered_late(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    from prefect.exceptions import NotPausedError

    engine, url, skill_id = shadow
    run_id = _start(url, skill_id)
    waiting = _run(run_id).state
    assert waiting.name == "Suspended"
    [expiry] = _expiries(run_id)
    outcome = _execute(expiry)
    assert (outcome.decision, outcome.reasons) == ("keep_shadow", ["review timed out"])
    ended = _run(run_id).state
    assert ended.is_completed() and ended.message == "review timed out: kept in shadow"
    assert not expire_review(url, skill_id, run_id, waiting.state_details.pause_key)  # a retry of the expiry
    assert _events(engine, skill_id, "review_timeout") == 1
    with pytest.raises(NotPausedError):
        _answer(run_id, {"decision": "activate_user", "reviewer": "alice", "reason": "late"})
    with engine.connect() as conn:
        assert get_skill(conn, skill_id).status == "shadow"


def test_an_answer_before_the_timeout_leaves_the_expiry_nothing_to_do(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    engine, url, skill_id = shadow
    run_id = _start(url, skill_id)
    _answer(run_id, {"decision": "reject", "reviewer": "alice", "reason": "wrong procedure"})
    [expiry] = _expiries(run_id)
    assert _execute(expiry).reasons == ["the review is no longer waiting"]  # it ran first: resumed, not yet run
    outcome = _execute(run_id)  # the worker runs the resumed review from the top
    assert (outcome.decision, outcome.applied, outcome.status) == ("reject", True, "rejected")
    assert _run(run_id).state.is_completed() and _events(engine, skill_id, "review_timeout") == 0


def test_an_edit_asks_again_and_only_the_new_waits_expiry_ends_it(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    from tests.faults.ops_kill_worker import edited

    engine, url, skill_id = shadow
    run_id = _start(url, skill_id)
    with engine.connect() as conn:
        content = get_skill(conn, skill_id).content
    _answer(run_id, {"decision": "edit", "reviewer": "alice", "reason": "tighter", "skill_md": edited(content)})
    assert _execute(run_id) is Pause  # the edit applied, revision 2 asked: suspended again, under a new key
    first, second = _expiries(run_id)
    assert _run(run_id).state.state_details.pause_key.startswith("review-r2-")
    assert _execute(first).reasons == ["the review is no longer waiting"]
    assert _run(run_id).state.name == "Suspended"
    assert _execute(second).reasons == ["review timed out"]
    assert _run(run_id).state.is_completed() and _events(engine, skill_id, "review_timeout") == 1
    with engine.connect() as conn:  # the edit stands, unreviewed: revision 2, still in shadow
        assert (get_skill(conn, skill_id).status, current_revision(conn, skill_id)) == ("shadow", 2)


def test_an_expiry_naming_another_skill_ends_nothing(prefect_harness: None, shadow: tuple[Engine, str, str]) -> None:
    """An expiry run's parameters name the run and the skill: a run that is not that skill's review is left alone."""
    engine, url, skill_id = shadow
    run_id = _start(url, skill_id)
    key = _run(run_id).state.state_details.pause_key
    with engine.connect() as conn:
        other = conn.execute(select(skillbox.c.id).where(skillbox.c.id != skill_id)).scalars().first()
    assert not expire_review(url, str(other), run_id, key)
    assert _run(run_id).state.name == "Suspended"
    assert _events(engine, str(other), "review_timeout") == _events(engine, skill_id, "review_timeout") == 0


def test_a_review_whose_expiry_cannot_be_scheduled_waits_in_its_process(
    prefect_harness: None, shadow: tuple[Engine, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduling fails (an API error): the review pauses in its process instead, and still takes the answer."""
    import threading
    import time

    import prefect.deployments

    from flows.activation_review import activation_review

    _, url, skill_id = shadow
    activation_review.to_deployment(name="activation-review").apply()
    params = {"database_url": url, "skill_id": skill_id, "timeout_seconds": 60, "config_overrides": OVERRIDES}
    run: Any = prefect.deployments.run_deployment(DEPLOYMENT, parameters={"params": params}, timeout=0)
    run_id = str(run.id)

    def down(*_: Any, **__: Any) -> Any:
        raise ConnectionError("the API is unreachable")

    monkeypatch.setattr(prefect.deployments, "run_deployment", down)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("outcome", _execute(run_id)))
    thread.start()
    deadline = time.monotonic() + 60
    while _run(run_id).state.name != "Paused":
        assert time.monotonic() < deadline and thread.is_alive(), _run(run_id).state
        time.sleep(0.2)
    assert _expiries(run_id) == []
    while True:  # the paused run saves its form's schema right after it paused
        try:
            _answer(run_id, {"decision": "keep_shadow", "reviewer": "alice", "reason": "later"})
            break
        except RuntimeError as exc:
            assert "schema not found" in str(exc) and time.monotonic() < deadline
            time.sleep(0.2)
    thread.join(timeout=60)
    assert (result["outcome"].decision, result["outcome"].applied) == ("keep_shadow", True)
    assert _run(run_id).state.is_completed()


def test_an_expiry_after_the_skill_was_decided_elsewhere_records_no_timeout(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    """The suspended review's expiry after ``skillflow activate``: it recorded ``review_timeout`` "kept in shadow" on
    the ACTIVE skill and ended the review run "review timed out" (the paused path's twin is in
    ``tests/flows/test_lifecycle_flows.py``)."""
    from skillflow.lifecycle.decisions import activate_skill

    engine, url, skill_id = shadow
    run_id = _start(url, skill_id)
    activate_skill(engine, skill_id, actor="cli:ops")
    [expiry] = _expiries(run_id)
    outcome = _execute(expiry)
    assert (outcome.applied, outcome.status) == (False, "active")
    assert outcome.reasons == ["the skill was decided elsewhere: it is active"]
    ended = _run(run_id).state
    assert ended.is_completed() and ended.message == "the skill was decided elsewhere"
    assert _events(engine, skill_id, "review_timeout") == 0
