"""A skill the pipeline named ``<name>-<class hash prefix>`` (its name was taken) can be edited.

Found by an outside audit on τ-bench (2026-12-05): two classes distil to ``cancel-reservation``; the second lands
as ``cancel-reservation-1ff42e``, and the literal check then read the pipeline's own suffix as an id, so every
edit (the CLI's or the review form's) and every export → import of that skill was refused ("contains 2 literal(s)
(id)"): a reviewer could only activate it as it was or reject it. A suffix that is the skill's own class-hash
prefix is the pipeline's, not a run's; any other id in a name is still refused. An import reads no class hash
(an imported SKILL.md is the untrusted side), so such a skill is imported after its suffix is removed from its name
(docs/guide/lifecycle.md).
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from skillflow.lifecycle.revisions import EditRefused, edit_skill
from skillflow.promotion.cycle import run_partition
from skillflow.storage.skills import get_skill
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


def _two_cancel_classes(engine: Engine) -> tuple[object, str]:
    """Two classes the offline distiller names alike: the second lands with its class-hash prefix as a suffix."""
    sf = agent(engine, require_shadow=True)
    for i in range(6):
        record_cancel(sf, "u1", i)
    assert run_partition(engine, AGENT, "u1", sf.config).promoted
    for i in range(6):  # the same write without the read before it: another class, the same intent
        rid = f"ZR{4100 + i}Q"
        result = sf.record_run(
            f"cancel reservation {rid} right away please" if i % 2 else f"please cancel booking {rid} now",
            "u1",
            [{"tool": "cancel_reservation", "arguments": {"reservation_id": rid}, "result": {"status": "cancelled"}}],
            strict=True,
        )
        assert result.stored
    [second] = run_partition(engine, AGENT, "u1", sf.config).promoted
    with engine.connect() as conn:
        skill = get_skill(conn, second)
    assert skill.name.endswith("-" + skill.canonical_hash[:6]), skill.name
    return sf, second


def test_a_suffixed_skill_can_be_edited(engine: Engine) -> None:
    sf, sid = _two_cancel_classes(engine)
    with engine.connect() as conn:
        skill = get_skill(conn, sid)
    changed = skill.content.replace("Check each result", "Confirm with the user, then check each result")
    assert changed != skill.content
    result = edit_skill(engine, sid, changed, editor="alice", config=sf.config, reason="ask first")
    assert result.changed
    with engine.connect() as conn:
        assert get_skill(conn, sid).name == skill.name  # the edit keeps the landed name


def test_an_id_in_a_name_that_is_not_the_class_hash_is_still_refused(engine: Engine) -> None:
    sf, sid = _two_cancel_classes(engine)
    with engine.connect() as conn:
        skill = get_skill(conn, sid)
    other = skill.content.replace(skill.name, skill.name[:-6] + "9f3e2a")
    assert other != skill.content
    with pytest.raises(EditRefused, match="literal"):
        edit_skill(engine, sid, other, editor="alice", config=sf.config, reason="rename")
