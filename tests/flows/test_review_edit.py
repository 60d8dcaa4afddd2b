"""The review form's edit decision: a refused edit comes back with its reasons and changes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from skillflow.storage.schema import skill_events
from skillflow.storage.skills import get_skill
from tests.flows.test_lifecycle_flows import _review, _skill

pytestmark = pytest.mark.prefect


def test_review_form_edit_is_validated_and_a_refusal_changes_nothing(
    prefect_harness: None, sqlite_engine: Engine
) -> None:
    skill = _skill(sqlite_engine)
    bad = "no frontmatter, and mail me at someone@example.com\n"
    outcome = _review(
        str(sqlite_engine.url), skill.id, {"decision": "edit", "reviewer": "alice", "reason": "fix", "skill_md": bad}
    )
    assert outcome.decision == "edit" and outcome.applied is False and outcome.revision == 1
    assert any("frontmatter" in r for r in outcome.reasons)
    with sqlite_engine.connect() as conn:
        assert get_skill(conn, skill.id).content == skill.content
        refused = (
            conn.execute(
                select(skill_events).where(skill_events.c.skill_id == skill.id, skill_events.c.event == "edit_refused")
            )
            .mappings()
            .one()
        )
    assert refused["actor"] == "alice" and "example.com" not in str(refused["reason"]) + str(refused["details"])
