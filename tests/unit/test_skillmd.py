"""SKILL.md: strict parsing, deterministic rendering, and agreement with the reference validator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skillflow.promotion.distill import OfflineDistiller
from skillflow.promotion.skillmd import SkillMdError, parse_skill_md, render_skill_md, slugify, with_metadata
from tests.support.llm import cancel_evidence, errored_failure

AGENTSKILLS = Path(sys.executable).with_name("agentskills")

SECTIONS = {
    "When to apply": "- The user asks to cancel a reservation.\n\n**When NOT to apply:** other intents.",
    "Procedure": "1. Call `get_reservation_details` with `reservation_id`: <id>.",
    "Failure modes observed": "None observed in the sampled runs.",
    "Worked example": 'Request (redacted): "cancel <id>"',
}


def _render(**kw: object) -> str:
    args: dict[str, object] = {
        "name": "cancel-reservation",
        "description": 'Use when the user asks to cancel a reservation: "now", é — ok.',
        "allowed_tools": ["get_reservation_details", "cancel_reservation"],
        "preconditions": ["the user has given a <id> for `reservation_id`", "the reservation is not flown yet"],
        "metadata": {"source": "learned", "version": "2", "canonical-hash": "ab12"},
        "sections": SECTIONS,
    }
    args.update(kw)
    return render_skill_md(**args)  # type: ignore[arg-type]  # test helper passes the documented kwargs


def agentskills_validate(skill_md: str, root: Path) -> subprocess.CompletedProcess[str]:
    """Write the skill to ``root/<name>/SKILL.md`` (the directory must equal the name) and run the validator."""
    try:
        name = parse_skill_md(skill_md).name
    except SkillMdError:
        name = "unparsable"
    skill_dir = root / name
    skill_dir.mkdir(parents=True, exist_ok=True)
    (skill_dir / "SKILL.md").write_text(skill_md, encoding="utf-8")
    return subprocess.run([str(AGENTSKILLS), "validate", str(skill_dir)], capture_output=True, text=True, check=False)


def test_render_parse_round_trip() -> None:
    parsed = parse_skill_md(_render())
    assert parsed.name == "cancel-reservation"
    assert parsed.description == 'Use when the user asks to cancel a reservation: "now", é — ok.'
    assert parsed.allowed_tools == ["get_reservation_details", "cancel_reservation"]
    assert parsed.preconditions == [
        "the user has given a <id> for `reservation_id`",
        "the reservation is not flown yet",
    ]
    assert parsed.metadata["version"] == "2" and parsed.metadata["source"] == "learned"
    assert parsed.metadata["precondition-1"].startswith("the user has given")
    assert list(parsed.sections) == list(SECTIONS)
    assert parsed.sections["Procedure"] == SECTIONS["Procedure"]
    assert _render() == _render()  # deterministic


def test_rendered_and_distilled_skills_pass_the_reference_validator(tmp_path: Path) -> None:
    assert agentskills_validate(_render(), tmp_path / "a").returncode == 0
    outcome = OfflineDistiller().distill(cancel_evidence(failures=[errored_failure()]), 4000)
    assert outcome.skill_md is not None
    result = agentskills_validate(outcome.skill_md, tmp_path / "b")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("name: x\n", "must start with YAML frontmatter"),
        ("---\nname: x\ndescription: y\n", "not closed"),
        ("---\nname: Cancel\ndescription: y\n---\n", "lowercase"),
        ("---\nname: cancel--it\ndescription: y\n---\n", "single hyphens"),
        ("---\nname: " + "a" * 65 + "\ndescription: y\n---\n", "longer than 64"),
        ("---\nname: x\n---\n", "description"),
        ("---\ndescription: y\n---\n", "name"),
        ("---\nname: x\ndescription: y\npreconditions: z\n---\n", "unexpected frontmatter key: preconditions"),
        ("---\nname: x\ndescription: y\nallowed-tools: [a, b]\n---\n", "must be a string"),
        ("---\nname: x\ndescription: y\nallowed-tools:\n  - a\n---\n", "must be a string"),
        ("---\nname: x\ndescription: y\nmetadata: {a: b}\n---\n", "block-style"),
        ("---\nname: x\ndescription: y\nmetadata: z\n---\n", "mapping"),
        ("---\nname: x\ndescription: y\nmetadata:\n  k:\n    - v\n---\n", "must be a string"),
        ("---\nname: x\ndescription: [y]\n---\n", "must be a string"),
        ("---\nname: x\ndescription: 'unterminated\n---\n", "invalid YAML"),
        ("---name: x\ndescription: y\n---\n", "own lines"),
    ],
)
def test_parse_errors(text: str, reason: str) -> None:
    with pytest.raises(SkillMdError, match=reason):
        parse_skill_md(text)


@pytest.mark.parametrize(
    "front",
    ["name: x\ndescription: y\npreconditions: z\n", "name: x\ndescription: y\nallowed-tools: [a, b]\n"],
)
def test_reference_validator_rejects_what_we_reject(front: str, tmp_path: Path) -> None:
    text = f"---\n{front}---\n\nbody\n"
    with pytest.raises(SkillMdError):
        parse_skill_md(text)
    skill_dir = tmp_path / "x"
    skill_dir.mkdir()
    (skill_dir / "SKILL.md").write_text(text, encoding="utf-8")
    result = subprocess.run([str(AGENTSKILLS), "validate", str(skill_dir)], capture_output=True, text=True, check=False)
    assert result.returncode != 0


def test_semicolon_preconditions_are_accepted() -> None:
    text = '---\nname: x\ndescription: "y"\nmetadata:\n  preconditions: "a <id> is known; the user confirmed"\n---\n'
    assert parse_skill_md(text).preconditions == ["a <id> is known", "the user confirmed"]


def test_render_refuses_invalid_input() -> None:
    with pytest.raises(SkillMdError):
        _render(name="Not Valid")
    with pytest.raises(SkillMdError):
        _render(description="a --- b")
    with pytest.raises(SkillMdError):
        _render(description=" ")


def test_with_metadata_merges_provenance_and_keeps_the_body() -> None:
    text = _render(metadata={"source": "llm-said-so", "version": "9"})
    stamped = with_metadata(text, {"source": "learned", "version": "1", "prompt-version": "distill-v1"})
    parsed = parse_skill_md(stamped)
    assert parsed.metadata["source"] == "learned" and parsed.metadata["version"] == "1"
    assert parsed.metadata["prompt-version"] == "distill-v1"
    assert parsed.preconditions == parse_skill_md(text).preconditions
    assert parsed.body == parse_skill_md(text).body


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("Cancel a Reservation!", "cancel-a-reservation"),
        ("--x__y--", "x-y"),
        ("", "learned-skill"),
        ("a" * 80, "a" * 64),
    ],
)
def test_slugify(text: str, slug: str) -> None:
    assert slugify(text) == slug
