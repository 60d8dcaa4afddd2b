"""``skillflow review`` against a Prefect server that answers but has no deployments (found walking the README:
it said ``could not start activation-review/activation-review: ObjectNotFound: None``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.cli.uicheck import local_prefect_server
from skillflow.kernel.models import SkillStatus
from tests.support.lifecycle import database_with_skill

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


def test_a_review_without_its_deployment_says_how_to_register_it(tmp_path: Path) -> None:
    db, skill = database_with_skill(tmp_path / "x.db", SkillStatus.SHADOW)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with local_prefect_server(tmp_path / "prefect") as api, temporary_settings({PREFECT_API_URL: api}):
        result = CliRunner().invoke(app, ["review", skill.id, "--db", db], env={"PREFECT_API_URL": api})
    assert result.exit_code == 1, (result.output, result.exception)
    line = result.stderr.strip().splitlines()[-1]
    assert "has no such deployment" in line and "skillflow serve" in line and "skillflow deploy" in line, line
