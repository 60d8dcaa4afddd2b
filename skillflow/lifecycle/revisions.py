"""Edit a skill before activation: revisions of one version, validated like a distilled skill, with their diff.

Storage (migration 007, docs/guide/lifecycle.md "Edit, history and rollback"): ``skillbox`` always holds the
newest revision of a version (so retrieval, injection and review read what was last validated), and
``skill_revisions`` keeps every revision: revision 1, the version as distilled or imported, is written when
the first edit lands. An edit is validated by :func:`skillflow.promotion.validation.validate_skill` against
evidence rebuilt from the version's source runs (so literals of those runs are still refused), is refused
as a whole when any check fails (the refused text is not stored: it may hold a literal), and otherwise lands
in one transaction with its ``edited`` event (editor, time, unified diff) and the rebuilt applicability
vectors. The text is stored in its canonical form (``skillmd.canonical_skill_md``: frontmatter comments
dropped) and the editor's reason cleaned (``redact.clean_reason``); a text over 1 MB is refused before it
is parsed. Two concurrent edits of one revision collide on the primary key: one lands, one is refused. An edit
that renames the skill to a name another live skill of the tenant holds is refused (``live_name_key``).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from skillflow.kernel.config import PromotionConfig, Settings, get_settings
from skillflow.kernel.models import ClassStats, EvidenceRun, SkillStatus, utcnow, with_article
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.redact import clean_reason
from skillflow.promotion.skillmd import SkillMdError, canonical_skill_md, parse_skill_md, procedure_tools
from skillflow.storage.aggregate import _steps_list, aggregate_classes, class_signature
from skillflow.storage.schema import skill_events, skill_revisions, skillbox, workflow_memory
from skillflow.storage.skills import SkillRecord, get_skill, live_name_key, name_holder, record_event

log = logging.getLogger("skillflow.lifecycle.revisions")

EDITABLE = (SkillStatus.SHADOW.value, SkillStatus.CANDIDATE.value)
MAX_SKILL_MD_BYTES = 1_000_000
MAX_DIFF_CHARS = 20_000


class EditRefused(ValueError):
    """The edit was not stored; ``reasons`` say why (they never quote a source value)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Revision:
    skill_id: str
    version: int
    revision: int
    name: str
    description: str
    content: str
    editor: str
    reason: str | None
    created_at: datetime


@dataclass(frozen=True)
class EditResult:
    skill_id: str
    revision: int
    changed: bool
    checks: dict[str, bool] = field(default_factory=dict)
    diff: str = ""


def content_sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=old_label, tofile=new_label
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


# -- evidence ------------------------------------------------------------------------------------------
def _source_runs(conn: Connection, skill: SkillRecord) -> tuple[list[EvidenceRun], list[EvidenceRun]]:
    ids = list(skill.source_workflow_ids or [])
    if not ids:
        return [], []
    wm = workflow_memory.c
    q = select(wm.id, wm.query, wm.steps, wm.outcome, wm.created_at).where(
        wm.agent_id == skill.agent_id, wm.user_id == skill.user_id, wm.id.in_(ids)
    )
    runs = [EvidenceRun(r.id, r.query, _steps_list(r.steps), r.outcome, r.created_at) for r in conn.execute(q)]
    return [r for r in runs if r.outcome == "success"], [r for r in runs if r.outcome == "failure"]


def self_signature(content: str, toolbox: list[str]) -> list[dict[str, Any]]:
    """For a skill without a source class (imported): its own procedure's tool order, as the judge's reference."""
    try:
        parsed = parse_skill_md(content)
    except SkillMdError:
        return []
    known = set(toolbox) | set(parsed.allowed_tools)
    return [{"tool": t, "errored": False} for t in procedure_tools(parsed.sections.get("Procedure", ""), known)]


def empty_stats(agent_id: str, user_id: str, canonical_hash: str) -> ClassStats:
    now = utcnow()
    return ClassStats(agent_id, user_id, canonical_hash, 0, 0, 0, 0, 0.0, 0, now, now, None)


def source_evidence(conn: Connection, skill: SkillRecord, content: str | None = None) -> Evidence:
    """The evidence a skill was validated against, rebuilt: its source runs, class signature and the toolbox.

    A skill with no source runs (imported) is judged against its own procedure (``self_signature``); the
    literal rule then has no source values to compare and relies on the generic shapes validation refuses.
    """
    from skillflow.promotion.staleness import registered_tools

    successes, failures = _source_runs(conn, skill)
    toolbox = registered_tools(conn, skill.agent_id)
    classes = aggregate_classes(conn, skill.agent_id, skill.user_id, canonical_hash=skill.canonical_hash)
    stats = classes[0] if classes else empty_stats(skill.agent_id, skill.user_id, skill.canonical_hash)
    signature = class_signature(conn, skill.agent_id, skill.user_id, skill.canonical_hash) if successes else []
    if not signature:
        signature = self_signature(content if content is not None else skill.content, toolbox)
    return Evidence(stats, signature, successes, failures, toolbox, version=skill.version)


# -- revisions -----------------------------------------------------------------------------------------
def current_revision(conn: Connection, skill_id: str) -> int:
    """The revision ``skillbox`` holds: the newest stored one, or 1 for a version never edited."""
    value = conn.execute(
        select(func.max(skill_revisions.c.revision)).where(skill_revisions.c.skill_id == skill_id)
    ).scalar()
    return int(value or 1)


def _creator(conn: Connection, skill: SkillRecord) -> str:
    actor = conn.execute(
        select(skill_events.c.actor)
        .where(skill_events.c.skill_id == skill.id, skill_events.c.event == "created")
        .order_by(skill_events.c.created_at)
        .limit(1)
    ).scalar()
    return str(actor or skill.distiller)


def list_revisions(conn: Connection, skill: SkillRecord) -> list[Revision]:
    """Every revision of one version, oldest first (revision 1 alone when it was never edited)."""
    rows = list(
        conn.execute(
            select(skill_revisions)
            .where(
                skill_revisions.c.skill_id == skill.id,
                skill_revisions.c.agent_id == skill.agent_id,
                skill_revisions.c.user_id == skill.user_id,
            )
            .order_by(skill_revisions.c.revision)
        ).mappings()
    )
    if not rows:
        return [
            Revision(
                skill.id, skill.version, 1, skill.name, skill.description, skill.content, _creator(conn, skill), None,
                skill.created_at,
            )
        ]  # fmt: skip
    return [
        Revision(
            skill.id, skill.version, int(r["revision"]), r["name"], r["description"], r["content"], r["editor"],
            r["reason"], r["created_at"],
        )
        for r in rows
    ]  # fmt: skip


def _insert_revision(
    conn: Connection, skill: SkillRecord, revision: int, content: str, editor: str, reason: str | None, at: datetime,
    checks: dict[str, bool] | None,
) -> None:  # fmt: skip
    parsed_name, parsed_desc = skill.name, skill.description
    try:
        parsed = parse_skill_md(content)
        parsed_name, parsed_desc = parsed.name, parsed.description
    except SkillMdError:
        pass
    conn.execute(
        insert(skill_revisions).values(
            skill_id=skill.id,
            revision=revision,
            agent_id=skill.agent_id,
            user_id=skill.user_id,
            name=parsed_name,
            description=parsed_desc,
            content=content,
            editor=editor[:255],
            reason=(reason or None) and reason[:1000],
            created_at=at,
            validation=checks,
        )
    )


def provenance_changed(before: str, after: str) -> list[str]:
    """The provenance keys (source, version, canonical-hash, distiller, prompt-version) whose value an edit
    changes, adds or removes: the pipeline stamps them, a reviewer corrects only what the model wrote
    (docs/guide/lifecycle.md)."""
    from skillflow.promotion.validation import PROVENANCE_KEYS

    try:
        old, new = parse_skill_md(before).metadata, parse_skill_md(after).metadata
    except SkillMdError:
        return []  # an unreadable text is refused by validation with its own reason
    return sorted(k for k in PROVENANCE_KEYS if old.get(k) != new.get(k))


def edit_skill(
    engine: Engine,
    skill_id: str,
    content: str,
    *,
    editor: str,
    config: PromotionConfig,
    reason: str | None = None,
    expected_revision: int | None = None,
    settings: Settings | None = None,
    flow_run_id: str | None = None,
    embedder_name: str | None = None,
) -> EditResult:
    """Validate ``content`` like a distilled skill and store it as the next revision; raises :class:`EditRefused`.

    The same text again changes nothing (``changed=False``). ``expected_revision`` (the revision the editor
    saw) refuses an edit made on top of a revision that has since changed.
    """
    from skillflow.injection.embeddings import get_embedder
    from skillflow.injection.retrieval import write_skill_vectors
    from skillflow.promotion.backends import get_judge
    from skillflow.promotion.validation import validate_skill

    editor = editor.strip() or "unknown editor"
    if len(content) > MAX_SKILL_MD_BYTES:  # before any parse, diff or query: their cost grows with the text
        raise EditRefused([f"the SKILL.md is larger than {MAX_SKILL_MD_BYTES} bytes"])
    with contextlib.suppress(SkillMdError):  # an unparsable text is refused below with the parse reason
        content = canonical_skill_md(content)
    reason = clean_reason(reason) if reason else None
    with engine.connect() as conn:
        skill = get_skill(conn, skill_id)
        current = current_revision(conn, skill.id)
        evidence = source_evidence(conn, skill, content)
    if skill.status not in EDITABLE:
        raise EditRefused(
            [f"cannot edit {with_article(skill.status)} skill: only shadow or candidate skills are edited"]
        )
    if expected_revision is not None and expected_revision != current:
        raise EditRefused([f"revision {expected_revision} is no longer current (now {current}); re-read it"])
    if content == skill.content:
        return EditResult(skill.id, current, False)
    settings = settings or get_settings()
    result = validate_skill(content, evidence, get_judge(settings), config.skill_max_content_chars)
    if result.ok and (moved := provenance_changed(skill.content, content)):
        reason = f"provenance is stamped by the pipeline and cannot be edited ({', '.join(moved)})"
        result = replace(result, ok=False, reasons=[reason])
    if not result.ok or result.parsed is None or result.content != content:
        with engine.begin() as conn:
            record_event(
                conn, skill, "edit_refused", actor=editor, from_status=skill.status, to_status=skill.status,
                reason="; ".join(result.reasons) or "not in canonical form", flow_run_id=flow_run_id,
                details={"revision": current, "checks": dict(result.checks)},
            )  # fmt: skip
        log.info("edit of skill %s refused (%d reasons)", skill.id, len(result.reasons))
        raise EditRefused(list(result.reasons) or ["the SKILL.md is not in canonical form"])
    parsed = result.parsed
    new = current + 1
    diff = unified_diff(skill.content, content, f"{skill.id}@{current}", f"{skill.id}@{new}")
    embedder = get_embedder(embedder_name or settings.embedder)
    now = utcnow()
    try:
        with engine.begin() as conn:
            fresh = get_skill(conn, skill.id)
            if fresh.status not in EDITABLE or current_revision(conn, skill.id) != current:
                raise EditRefused(["the skill changed while the edit was validated; re-read it and edit again"])
            holder = name_holder(conn, fresh.agent_id, fresh.user_id, parsed.name)
            if holder is not None and holder.id != fresh.id:
                raise EditRefused([_name_taken(parsed.name, holder)])
            if current == 1 and not _has_revisions(conn, skill.id):
                _insert_revision(
                    conn, fresh, 1, fresh.content, _creator(conn, fresh), None, fresh.updated_at, fresh.validation
                )
            _insert_revision(conn, fresh, new, content, editor, reason, now, dict(result.checks))
            landed = conn.execute(
                update(skillbox)
                .where(  # compare-and-set: a decision committed since ``fresh`` was read refuses the edit
                    skillbox.c.id == skill.id,
                    skillbox.c.status.in_(EDITABLE),
                    skillbox.c.updated_at == fresh.updated_at,
                )
                .values(
                    name=parsed.name,
                    live_name_key=live_name_key(fresh.agent_id, fresh.user_id, parsed.name),  # EDITABLE = live
                    description=parsed.description,
                    content=content,
                    preconditions=list(parsed.preconditions),
                    tools=list(parsed.allowed_tools),
                    validation=dict(result.checks),
                    updated_at=now,
                )
            ).rowcount
            if landed != 1:
                raise EditRefused(["the skill changed while the edit was validated; re-read it and edit again"])
            updated = get_skill(conn, skill.id)
            record_event(
                conn, updated, "edited", actor=editor, from_status=updated.status, to_status=updated.status,
                reason=reason, flow_run_id=flow_run_id,
                details={"revision": new, "previous_revision": current, "diff": diff[:MAX_DIFF_CHARS],
                         "content_sha256": content_sha(content), "checks": dict(result.checks)},
            )  # fmt: skip
            write_skill_vectors(conn, updated, embedder, config.max_trigger_queries)
    except IntegrityError as exc:  # a concurrent edit took this revision number first, or a store the name
        with engine.connect() as conn:
            holder = name_holder(conn, skill.agent_id, skill.user_id, parsed.name)
        if holder is not None and holder.id != skill.id:
            raise EditRefused([_name_taken(parsed.name, holder)]) from exc
        raise EditRefused([f"revision {new} was written concurrently; re-read the skill and edit again"]) from exc
    log.info("skill %s edited: revision %d -> %d by %s", skill.id, current, new, editor)
    return EditResult(skill.id, new, True, dict(result.checks), diff)


def _name_taken(name: str, holder: SkillRecord) -> str:
    return (
        f"name {name} is used by live skill {holder.id} (v{holder.version}, {holder.status}) of the tenant; "
        "choose another name"
    )


def _has_revisions(conn: Connection, skill_id: str) -> bool:
    q = select(skill_revisions.c.revision).where(skill_revisions.c.skill_id == skill_id).limit(1)
    return conn.execute(q).first() is not None
