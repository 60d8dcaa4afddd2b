"""Version history of a skill's class, and unified diffs between any two revisions (docs/guide/lifecycle.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, select

from skillflow.lifecycle.revisions import Revision, content_sha, list_revisions, unified_diff
from skillflow.storage.schema import skill_events
from skillflow.storage.skills import SkillRecord, get_skill, list_skills


def class_versions(conn: Connection, skill: SkillRecord) -> list[SkillRecord]:
    return list_skills(conn, skill.agent_id, skill.user_id, canonical_hash=skill.canonical_hash)


def history(engine: Engine, skill_id: str) -> list[dict[str, Any]]:
    """Every version of the skill's class with its revisions and lifecycle events (oldest first)."""
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        out = []
        for version in class_versions(conn, skill):
            events = conn.execute(
                select(skill_events)
                .where(
                    skill_events.c.skill_id == version.id,
                    skill_events.c.agent_id == version.agent_id,
                    skill_events.c.user_id == version.user_id,
                )
                .order_by(skill_events.c.created_at, skill_events.c.id)
            ).mappings()
            out.append(
                {
                    "skill_id": version.id,
                    "version": version.version,
                    "name": version.name,
                    "status": version.status,
                    "injection_role": version.injection_role,
                    "created_at": version.created_at,
                    "activated_at": version.activated_at,
                    "demoted_at": version.demoted_at,
                    "reason": version.demotion_reason,
                    "revisions": [
                        {
                            "revision": r.revision,
                            "editor": r.editor,
                            "reason": r.reason,
                            "created_at": r.created_at,
                            "content_sha256": content_sha(r.content),
                        }
                        for r in list_revisions(conn, version)
                    ],
                    "events": [
                        {k: e[k] for k in ("created_at", "event", "from_status", "to_status", "actor", "reason")}
                        for e in events
                    ],
                }
            )
        return out


def resolve_ref(conn: Connection, skill: SkillRecord, ref: str) -> Revision:
    """``"3"`` (revision 3 of this version), ``"v2"`` (version 2's newest revision) or ``"v2.1"``."""
    text = ref.strip().lower()
    target = skill
    rev: int | None
    if text.startswith("v"):
        number, _, rest = text[1:].partition(".")
        if not number.isdigit() or (rest and not rest.isdigit()):
            raise ValueError(f"bad revision reference {ref!r}: use N, vN or vN.M")
        found = [s for s in class_versions(conn, skill) if s.version == int(number)]
        if not found:
            raise ValueError(f"the class has no version {number}")
        target, rev = found[0], int(rest) if rest else None
    elif text.isdigit():
        rev = int(text)
    else:
        raise ValueError(f"bad revision reference {ref!r}: use N, vN or vN.M")
    revisions = list_revisions(conn, target)
    if rev is None:
        return revisions[-1]
    for r in revisions:
        if r.revision == rev:
            return r
    raise ValueError(f"version {target.version} has no revision {rev} (it has 1..{revisions[-1].revision})")


def diff_refs(engine: Engine, skill_id: str, a: str | None = None, b: str | None = None) -> str:
    """Unified diff of two revisions; by default the newest revision against the one before it (or the
    previous version's newest revision when this version was never edited)."""
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        revisions = list_revisions(conn, skill)
        new = resolve_ref(conn, skill, b) if b else revisions[-1]
        if a:
            old = resolve_ref(conn, skill, a)
        elif len(revisions) > 1:
            old = revisions[-2]
        else:
            earlier = [s for s in class_versions(conn, skill) if s.version < skill.version]
            if not earlier:
                raise ValueError("nothing to compare: one version with one revision (give two references)")
            old = list_revisions(conn, earlier[-1])[-1]
    return unified_diff(
        old.content, new.content, f"v{old.version}.{old.revision} ({old.skill_id})",
        f"v{new.version}.{new.revision} ({new.skill_id})",
    )  # fmt: skip
