"""``skillflow review`` of a skill whose review is already open names that run instead of starting another.

Before, a second ``skillflow review ID`` (a reviewer who lost the link, two reviewers) started a second run of
the ``activation-review`` deployment: two forms for one skill, the second ending "not awaiting review" once the
first was answered. A review is open while its run is Scheduled, Pending, Running or Paused (suspended); the run
a suspended review schedules at its timeout (``expires``) is not a review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.kernel.models import SkillStatus
from tests.support.lifecycle import database_with_skill

pytestmark = [pytest.mark.prefect]

DEPLOYMENT = "activation-review/activation-review"


def _review(db: str, skill_id: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["review", skill_id, "--db", db, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def _runs(skill_id: str) -> list[Any]:
    """Every flow run of ``skill_id`` on the server, read a page at a time (the server answers 200 at most)."""
    from prefect import get_client

    runs: list[Any] = []
    with get_client(sync_client=True) as client:
        while page := client.read_flow_runs(limit=200, offset=len(runs)):
            runs.extend(page)
    return [r for r in runs if (r.parameters.get("params") or {}).get("skill_id") == skill_id]


def _deploy() -> None:
    from flows.activation_review import activation_review

    activation_review.to_deployment(name="activation-review").apply()


def test_a_second_review_of_a_skill_names_the_open_run(prefect_harness: None, tmp_path: Path) -> None:
    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    first = _review(db, skill.id)
    assert first["started"] is True
    again = _review(db, skill.id)
    assert again["started"] is False and again["already_open"] is True, again
    assert again["flow_run_id"] == first["flow_run_id"]
    assert [str(r.id) for r in _runs(skill.id)] == [first["flow_run_id"]]

    text = CliRunner().invoke(app, ["review", skill.id, "--db", db])
    assert text.exit_code == 0, text.output
    assert "already open" in text.stdout and first["flow_run_id"] in text.stdout, text.stdout
    assert len(_runs(skill.id)) == 1


def test_a_review_that_ended_does_not_stop_a_new_one(prefect_harness: None, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.states import Cancelled

    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    first = _review(db, skill.id)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(UUID(first["flow_run_id"]), Cancelled(), force=True)
    second = _review(db, skill.id)
    assert second["started"] is True and second["flow_run_id"] != first["flow_run_id"]
    assert len(_runs(skill.id)) == 2


def test_another_skill_s_open_review_and_an_expiry_run_do_not_count(prefect_harness: None, tmp_path: Path) -> None:
    """An open review of another skill, and the run a suspended review scheduled at its timeout for this one
    (its ``expires`` parameter), leave this skill without an open review."""
    from prefect.deployments import run_deployment

    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    run_deployment(DEPLOYMENT, parameters={"params": {"skill_id": "another-skill"}}, timeout=0)
    expiry = {"skill_id": skill.id, "expires": {"flow_run_id": "00000000-0000-0000-0000-000000000001", "key": "k"}}
    run_deployment(DEPLOYMENT, parameters={"params": expiry}, timeout=0)
    started = _review(db, skill.id)
    assert started["started"] is True, started


def test_the_open_review_is_found_behind_a_page_of_other_skills_reviews(prefect_harness: None, tmp_path: Path) -> None:
    """Prefect answers a run query one page at a time (200 runs by default): this skill's open review, started
    after 200 open reviews of other skills, is still found, so no second form starts."""
    from prefect import get_client

    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        for n in range(200):
            client.create_flow_run_from_deployment(deployment.id, parameters={"params": {"skill_id": f"other-{n}"}})
    first = _review(db, skill.id)
    assert first["started"] is True, first
    again = _review(db, skill.id)
    assert again["started"] is False and again.get("already_open") is True, again
    assert again["flow_run_id"] == first["flow_run_id"]
    assert len(_runs(skill.id)) == 1


def test_two_reviews_started_at_one_instant_start_one_run(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commands that both found no open review (they read at the same instant) started two forms. The start is
    now idempotent on the skill's state: the second is handed the first's run."""
    import skillflow.cli.commands.lifecycle as lifecycle

    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    monkeypatch.setattr(lifecycle, "_open_review", lambda skill_id: None)  # both read before either started
    first, second = _review(db, skill.id), _review(db, skill.id)
    assert first["flow_run_id"] == second["flow_run_id"]
    assert [str(r.id) for r in _runs(skill.id)] == [first["flow_run_id"]]


def test_a_new_review_after_ended_ones_of_one_state_starts_each_time(prefect_harness: None, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.states import Cancelled

    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    _deploy()
    seen: list[str] = []
    for _ in range(3):  # the skill's state never changes: each ended review still lets a new one start
        run = _review(db, skill.id)
        assert run["started"] is True and run["flow_run_id"] not in seen
        seen.append(run["flow_run_id"])
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(UUID(run["flow_run_id"]), Cancelled(), force=True)
    assert len(_runs(skill.id)) == 3
