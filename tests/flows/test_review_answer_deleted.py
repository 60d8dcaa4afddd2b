"""The reviewer's raw answer leaves the Prefect server once the review has applied it (docs/SECURITY.md).

The Prefect server stores the answer that resumes a review as given (its ``flow_run_input`` table, key
``suspended-review-r<revision>-…-response`` or ``paused-…``); skillflow stores the reason cleaned and redacted. Once
the answer is applied and recorded, the server's copy is deleted, and when the run has decided, so is any answer of
the run that was never applied (another revision's). Regression (an outside audit): ``skillflow review`` answered with
a password in the reason kept the password in the Prefect database for good.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.exceptions import Pause
from sqlalchemy import Engine, create_engine, select

from flows.activation_review import ActivationReviewParams
from skillflow.storage.schema import skill_events, skillbox
from tests.faults.test_kill_operations import _distilled
from tests.flows.test_lifecycle_flows import OVERRIDES as PAUSE_OVERRIDES
from tests.flows.test_lifecycle_flows import _paused_run_id, _skill, review_in_thread
from tests.flows.test_review_expiry import OVERRIDES, _answer, _execute, _expiries, _run, _start

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("offline_providers")]

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRET = "hunter2hunter2"
REASON = f"checked; my password is {SECRET} and token {TOKEN}"
EDIT_SECRET = "opensesame4711x"


@pytest.fixture
def shadow(tmp_path: Path) -> tuple[Engine, str, str]:
    url = f"sqlite:///{tmp_path / 'skillflow.db'}"
    engine = create_engine(url)
    _distilled(engine, require_shadow=OVERRIDES["require_shadow"])
    with engine.connect() as conn:
        skill_id = conn.execute(select(skillbox.c.id).where(skillbox.c.name == "cancel-reservation")).scalar_one()
    return engine, url, str(skill_id)


def stored_inputs(run_id: str) -> dict[str, str]:
    """Every flow-run input the Prefect server holds for the run, key → stored value, as its API returns them."""
    from prefect.input.actions import filter_flow_run_input

    found: Any = filter_flow_run_input(key_prefix="", limit=1000, flow_run_id=UUID(run_id))
    return {i.key: str(i.value) for i in found}


def assert_gone(run_id: str, *secrets: str) -> None:
    inputs = stored_inputs(run_id)
    assert inputs, "the run's form schemas are stored: the read found the run's inputs"
    leaked = {key for key, value in inputs.items() for s in secrets if s in value}
    assert not leaked, leaked
    assert not [key for key in inputs if key.endswith("-response")]


def reasons(engine: Engine, skill_id: str) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(select(skill_events.c.reason).where(skill_events.c.skill_id == skill_id)).scalars()
        return [str(r) for r in rows if r]


def test_a_suspended_review_s_answer_is_deleted_once_applied(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    """The audit's repro: ``skillflow review`` (a deployment's run, suspended), answered from code."""
    engine, url, skill_id = shadow
    run_id = _start(url, skill_id, timeout=600)
    _answer(run_id, {"decision": "activate_user", "reviewer": "alice", "reason": REASON})
    assert any(SECRET in v for v in stored_inputs(run_id).values())  # raw on the server until applied
    outcome = _execute(run_id)
    assert (outcome.decision, outcome.applied, outcome.status) == ("activate_user", True, "active")
    assert _run(run_id).state.is_completed()
    assert_gone(run_id, SECRET, TOKEN)
    assert "checked; my password is <secret> <secret>" in reasons(engine, skill_id)  # skillflow's cleaned copy


def test_an_edit_s_answer_is_deleted_before_the_new_revision_waits(
    prefect_harness: None, shadow: tuple[Engine, str, str]
) -> None:
    from skillflow.storage.skills import get_skill
    from tests.faults.ops_kill_worker import edited

    engine, url, skill_id = shadow
    run_id = _start(url, skill_id, timeout=600)
    with engine.connect() as conn:
        content = get_skill(conn, skill_id).content
    edit = {"decision": "edit", "reviewer": "alice", "reason": f"pin is {EDIT_SECRET}", "skill_md": edited(content)}
    _answer(run_id, edit)
    assert _execute(run_id) is Pause  # the edit applied; revision 2 waits
    assert _run(run_id).state.state_details.pause_key.startswith("review-r2-")
    assert_gone(run_id, EDIT_SECRET)
    _answer(run_id, {"decision": "reject", "reviewer": "alice", "reason": REASON})
    outcome = _execute(run_id)
    assert (outcome.decision, outcome.applied, outcome.revision) == ("reject", True, 2)
    assert_gone(run_id, EDIT_SECRET, SECRET, TOKEN)


@pytest.mark.parametrize("end", ["answered", "expired"])
def test_an_answer_never_applied_is_deleted_once_the_run_has_decided(
    prefect_harness: None, shadow: tuple[Engine, str, str], end: str
) -> None:
    """An answer about another revision (an earlier attempt got it and died; an edit landed since) is never applied:
    it goes when the run decides, whether the current revision is answered or the review expires."""
    from prefect.input.actions import create_flow_run_input

    _, url, skill_id = shadow
    run_id = _start(url, skill_id, timeout=1)
    stale = {"decision": "activate_user", "reviewer": "bob", "reason": REASON, "skill_md": ""}
    create_flow_run_input("suspended-review-r7-0123456789ab-response", stale, flow_run_id=UUID(run_id))
    if end == "answered":
        _answer(run_id, {"decision": "keep_shadow", "reviewer": "alice", "reason": "later"})
        outcome = _execute(run_id)
        assert (outcome.decision, outcome.applied) == ("keep_shadow", True)
    else:
        [expiry] = _expiries(run_id)
        assert _execute(expiry).reasons == ["review timed out"]
    assert _run(run_id).state.is_completed()
    assert_gone(run_id, SECRET, TOKEN)


def test_a_paused_review_s_answer_is_deleted_once_applied(prefect_harness: None, sqlite_engine: Engine) -> None:
    """The flow called directly waits in its process (``pause_flow_run``): the same deletion."""
    from prefect.flow_runs import resume_flow_run

    skill = _skill(sqlite_engine)
    params = ActivationReviewParams(
        database_url=str(sqlite_engine.url), skill_id=skill.id, timeout_seconds=120, poll_interval_seconds=1,
        config_overrides=PAUSE_OVERRIDES,
    )  # fmt: skip
    waited = review_in_thread(params)
    run_id = _paused_run_id(skill.id)
    resume_flow_run(UUID(run_id), run_input={"decision": "keep_shadow", "reviewer": "alice", "reason": REASON})
    outcome = waited()
    assert outcome.decision == "keep_shadow" and outcome.applied
    assert_gone(run_id, SECRET, TOKEN)
    assert "checked; my password is <secret> <secret>" in reasons(sqlite_engine, skill.id)


def test_an_answer_not_yet_applied_stays_for_the_retry(
    prefect_harness: None, shadow: tuple[Engine, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted only once applied: a run that failed while applying leaves the answer, which its retry applies without
    asking the reviewer again (``earlier_answer``, docs/RELIABILITY.md), then deletes."""
    from prefect import get_client
    from prefect.states import Scheduled

    import flows.activation_review as review_flow

    engine, url, skill_id = shadow
    run_id = _start(url, skill_id, timeout=600)
    _answer(run_id, {"decision": "reject", "reviewer": "alice", "reason": REASON})
    applying = review_flow.apply_decision

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the database went away")

    monkeypatch.setattr(review_flow, "apply_decision", down)
    with pytest.raises(ConnectionError):
        _execute(run_id)
    assert any(SECRET in v for v in stored_inputs(run_id).values())
    monkeypatch.setattr(review_flow, "apply_decision", applying)
    with get_client(sync_client=True) as client:  # `prefect flow-run retry`
        client.set_flow_run_state(UUID(run_id), Scheduled(), force=True)
    outcome = _execute(run_id)
    assert (outcome.decision, outcome.applied, outcome.status) == ("reject", True, "rejected")
    assert_gone(run_id, SECRET, TOKEN)
    assert "checked; my password is <secret> <secret>" in reasons(engine, skill_id)
