"""``skillflow import`` refuses a hand-written SKILL.md carrying literals (email, URL, phone) and stores nothing.

The structural ``no_literal`` check (skillflow/promotion/validation.py) refuses any literal in a skill, wherever
it came from; an imported skill has no source runs, so this check is what keeps a hand-written literal out.
A clean copy of the same hand-written skill imports, so the refusals are the literals' doing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lifecycle.transfer import import_skills
from skillflow.promotion.cycle import run_partition
from skillflow.storage.schema import skill_events, skillbox
from skillflow.storage.skills import get_skill, list_skills
from tests.support.promotion import AGENT, agent, record_cancel

pytestmark = pytest.mark.usefixtures("offline_providers")

LITERALS = {
    "email": "The booking desk is reached at jane.doe@example.com for every change.",
    "url": "The booking policy lives at https://bookings.example.com/policy/cancel.",
    "phone": "The booking desk answers on +1 415 555 0134 during office hours.",
}


def hand_written(engine: Engine) -> str:
    """A SKILL.md as a person would write it: a learned skill's text under a new name."""
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [sid] = run_partition(engine, AGENT, "u1", sf.config).promoted
    with engine.connect() as conn:
        content = get_skill(conn, str(sid)).content
    assert "name: cancel-reservation" in content
    return content.replace("name: cancel-reservation", "name: hand-cancel")


def write(folder: Path, content: str) -> None:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(content, encoding="utf-8")


def skill_rows(engine: Engine, user_id: str) -> tuple[int, int]:
    with engine.connect() as conn:
        skills = conn.scalar(select(func.count()).select_from(skillbox).where(skillbox.c.user_id == user_id))
        events = conn.scalar(select(func.count()).select_from(skill_events).where(skill_events.c.user_id == user_id))
    return int(skills or 0), int(events or 0)


def test_import_refuses_email_url_and_phone_literals_and_stores_nothing(engine: Engine, tmp_path: Path) -> None:
    content = hand_written(engine)
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    write(clean / "hand-cancel", content)
    for kind, line in LITERALS.items():
        write(dirty / kind, content.rstrip("\n") + "\n\n" + line + "\n")
    write(dirty / "all-three", content.rstrip("\n") + "\n\n" + "\n".join(LITERALS.values()) + "\n")

    config = agent(engine).config
    assert config is not None
    results = {r.folder: r for r in import_skills(engine, dirty, AGENT, "u3", actor="alice", config=config)}
    assert {k: r.decision for k, r in results.items()} == dict.fromkeys(["all-three", *LITERALS], "refused")
    for kind in LITERALS:
        reasons = [r for r in results[kind].reasons if "literal" in r and "only shapes are allowed" in r]
        assert reasons and kind in reasons[0], (kind, results[kind].reasons)
    [combined] = [r for r in results["all-three"].reasons if "only shapes are allowed" in r]
    assert all(kind in combined for kind in LITERALS), combined
    for result in results.values():  # reasons name kinds and counts, never the literal itself
        assert not any(v in " ".join(result.reasons) for v in ("jane.doe", "bookings.example", "555"))
    assert skill_rows(engine, "u3") == (0, 0)

    runner = CliRunner()
    url = engine.url.render_as_string(hide_password=False)
    cli = runner.invoke(app, ["import", str(dirty), "--agent-id", AGENT, "--user-id", "u3", "--db", url])
    assert cli.exit_code == 1 and "refused" in cli.output, cli.output
    assert "jane.doe" not in cli.output and "555 0134" not in cli.output
    assert skill_rows(engine, "u3") == (0, 0)

    # the control: the same hand-written skill without the literals is imported (as SHADOW)
    [ok] = import_skills(engine, clean, AGENT, "u4", actor="alice", config=config)
    assert ok.decision == "imported", ok.reasons
    with engine.connect() as conn:
        assert [s.status for s in list_skills(conn, AGENT, "u4")] == ["shadow"]


def test_a_later_releases_prompt_version_imports_and_look_alikes_do_not(engine: Engine, tmp_path: Path) -> None:
    """Regression: a skill exported by a release that ships a newer prompt (``prompt-version: distill-v7``) was
    refused on import — an unknown version was read as model text, and its digit as a literal. A version of a
    prompt this pipeline has, numbered 1–99, is stamped now; anything else in that field still reads as text."""
    content = hand_written(engine)
    assert 'prompt-version: "offline-v1"' in content
    later, odd = tmp_path / "later", tmp_path / "odd"
    for version in ("distill-v7", "judge-v12", "offline-v2"):
        write(
            later / version / "hand-cancel",
            content.replace('prompt-version: "offline-v1"', f'prompt-version: "{version}"'),
        )
    for i, version in enumerate(("distill-v123", "distill-vCUST88213ZK", "CUST88213ZK-v1", "distill-v7-CUST88213ZK",
                                 "distillx-v7", "distill-v07")):  # fmt: skip
        write(odd / f"odd-{i}", content.replace('prompt-version: "offline-v1"', f'prompt-version: "{version}"'))
    config = agent(engine).config
    assert config is not None
    for version in ("distill-v7", "judge-v12", "offline-v2"):  # one tenant each: one live skill per name
        [result] = import_skills(engine, later / version, AGENT, f"u4-{version}", actor="alice", config=config)
        assert result.decision == "imported", (version, result.reasons)
    refused = import_skills(engine, odd, AGENT, "u5", actor="alice", config=config)
    assert [r.decision for r in refused] == ["refused"] * 6, [r.reasons for r in refused]
    assert all(any("literal" in reason for reason in r.reasons) for r in refused), [r.reasons for r in refused]
    assert skill_rows(engine, "u5") == (0, 0)
