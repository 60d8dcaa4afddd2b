"""``skillflow review`` against a Prefect server that answers but has no deployments (found walking the README:
it said ``could not start activation-review/activation-review: ObjectNotFound: None``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.cli.uicheck import local_prefect_server
from skillflow.kernel.models import SkillStatus
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.skills import insert_skill

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


def test_a_review_without_its_deployment_says_how_to_register_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    engine = make_engine(db)
    migrate(engine)
    with engine.begin() as conn:
        skill = insert_skill(
            conn, agent_id="a", user_id="u", canonical_hash="h", name="cancel-reservation",
            description="Cancel a reservation", content="---\nname: cancel-reservation\n---\nbody\n",
            status=SkillStatus.SHADOW,
        )  # fmt: skip
    engine.dispose()
    with local_prefect_server(tmp_path / "prefect") as api:
        result = CliRunner().invoke(app, ["review", skill.id, "--db", db], env={"PREFECT_API_URL": api})
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "has no such deployment" in line and "skillflow serve" in line and "skillflow deploy" in line
