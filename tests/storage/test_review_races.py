"""Two decisions on one skill at once: exactly one applies, the other is refused (SQLite and PostgreSQL).

Human review is the boundary between a learned skill and a prompt (README, "The Prefect UI and deployments"):
a rejection, or an edit the reviewer never saw, must not be overwritten by a decision that read the skill just
before it. Each test lets the second decision commit inside the first one's window — between its checks and its
write — by running it from the hook the first one passes there; before the fix, the first one's write landed
anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.lifecycle import revisions
from skillflow.lifecycle.decisions import activate_skill, reject_skill
from skillflow.lifecycle.revisions import EditRefused, edit_skill
from skillflow.promotion.cycle import run_partition
from skillflow.storage import skills
from skillflow.storage.skills import InvalidTransition, get_skill
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")


def shadow_skill(engine: Engine) -> tuple[Any, str]:
    sf = agent(engine, require_shadow=True)
    for i in range(6):
        record_cancel(sf, "u1", i, when=utcnow() - timedelta(minutes=60) + timedelta(seconds=i))
    report = run_partition(engine, AGENT, "u1", sf.config)
    assert report.promoted, report.rejected
    return sf, report.promoted[0]


def edited(content: str) -> str:
    return content.replace("stop and ask the user when it contradicts the request", "note it and go on")


@contextmanager
def meanwhile(monkeypatch: pytest.MonkeyPatch, module: Any, action: Callable[[], Any]) -> Iterator[list[Any]]:
    """Run ``action`` (its own transaction, committed) the first time ``module.name_holder`` is called: after
    the caller's checks, before its write."""
    done: list[Any] = []
    real = module.name_holder

    def hook(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(action())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "name_holder", hook)
    yield done
    monkeypatch.setattr(module, "name_holder", real)


def status(engine: Engine, skill_id: str) -> tuple[str, str]:
    with engine.connect() as conn:
        record = get_skill(conn, skill_id)
    return record.status, record.content


def test_a_rejection_landing_during_an_activation_stands(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf, sid = shadow_skill(engine)
    reject = lambda: reject_skill(engine, sid, "unsafe procedure", actor="bob")  # noqa: E731
    with meanwhile(monkeypatch, skills, reject) as done, pytest.raises(InvalidTransition, match="changed"):
        activate_skill(engine, sid, actor="alice", config=sf.config)
    assert done and status(engine, sid)[0] == SkillStatus.REJECTED.value
    assert sf.prepare("Please cancel my reservation R1", "u1").skill_ids == ()


def test_an_edit_landing_during_an_activation_of_the_reviewed_revision_refuses_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sf, sid = shadow_skill(engine)
    reviewed = status(engine, sid)[1]
    edit = lambda: edit_skill(engine, sid, edited(reviewed), editor="mallory", config=sf.config)  # noqa: E731
    with meanwhile(monkeypatch, skills, edit) as done, pytest.raises(InvalidTransition, match="changed"):
        activate_skill(engine, sid, actor="alice", config=sf.config, revision=1)
    assert done and done[0].changed
    assert status(engine, sid) == (SkillStatus.SHADOW.value, edited(reviewed))  # edited, never activated


def test_an_activation_landing_during_an_edit_refuses_the_edit(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    sf, sid = shadow_skill(engine)
    reviewed = status(engine, sid)[1]
    activate = lambda: activate_skill(engine, sid, actor="alice", config=sf.config, revision=1)  # noqa: E731
    with meanwhile(monkeypatch, revisions, activate) as done, pytest.raises(EditRefused, match="changed"):
        edit_skill(engine, sid, edited(reviewed), editor="mallory", config=sf.config)
    assert done and status(engine, sid) == (SkillStatus.ACTIVE.value, reviewed)  # the reviewed text is live
