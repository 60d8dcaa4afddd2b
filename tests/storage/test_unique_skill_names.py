"""Live skill names are unique per tenant: a taken name gets a deterministic suffix at landing."""

from __future__ import annotations

from sqlalchemy import Engine

from skillflow.kernel.models import SkillStatus
from skillflow.promotion.landing import renamed, unique_name
from skillflow.promotion.skillmd import parse_skill_md
from skillflow.storage.skills import insert_skill, transition

CONTENT = '---\nname: cancel-reservation\ndescription: "Use when a customer cancels."\n---\n\n## Steps\n1. x\n'


def _skill(conn: object, chash: str, name: str, user: str = "u", status: SkillStatus = SkillStatus.ACTIVE) -> str:
    return insert_skill(
        conn,  # type: ignore[arg-type]
        agent_id="a",
        user_id=user,
        canonical_hash=chash,
        name=name,
        description="d",
        content=CONTENT,
        status=status,
    ).id


def test_a_taken_live_name_gets_the_class_hash_prefix(engine: Engine) -> None:
    h1, h2, h3 = "1" * 64, "abcdef" + "2" * 58, "abcdef" + "3" * 58
    with engine.begin() as conn:
        first = _skill(conn, h1, "cancel-reservation")
        _skill(conn, "9" * 64, "cancel-reservation", user="other")  # another tenant's name is not taken
        assert unique_name(conn, "a", "u", "cancel-reservation", h1) == "cancel-reservation"  # its own class
        assert unique_name(conn, "a", "other", "book-flight", h2) == "book-flight"
        name = unique_name(conn, "a", "u", "cancel-reservation", h2)
        assert name == "cancel-reservation-abcdef" == unique_name(conn, "a", "u", "cancel-reservation", h2)
        _skill(conn, h2, name)
        # The next class whose 6-character prefix collides gets a longer one.
        assert unique_name(conn, "a", "u", "cancel-reservation", h3) == "cancel-reservation-abcdef333333"
        long = "x" * 64
        _skill(conn, "4" * 64, long)
        longer = unique_name(conn, "a", "u", long, h3)
        assert longer is not None and len(longer) == 64 and longer.endswith("-abcdef")
        # A retired skill frees its name.
        transition(conn, first, SkillStatus.DEMOTED, actor="test", reason="drift")
        assert unique_name(conn, "a", "u", "cancel-reservation", h3) == "cancel-reservation"


def test_renaming_rewrites_only_the_frontmatter_name() -> None:
    new = renamed(CONTENT.replace("## Steps", "## Steps\nname: cancel-reservation"), "cancel-reservation", "c-1a")
    assert parse_skill_md(new).name == "c-1a"
    assert new.count("name: cancel-reservation") == 1  # the body is untouched
    quoted = CONTENT.replace("name: cancel-reservation", "name: 'cancel-reservation'")
    assert parse_skill_md(renamed(quoted, "cancel-reservation", "c-2b")).name == "c-2b"
