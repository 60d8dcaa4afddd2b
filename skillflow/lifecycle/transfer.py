"""Export skills as Agent Skills folders and import hand-written or exported ones as SHADOW skills.

Export writes ``DIR/<name>/SKILL.md`` (the stored text, byte for byte) and ``DIR/<name>/skillflow.json``
(provenance, version, revision, evidence summary: counts and rates, never runs). The folder name is the
skill name, as ``agentskills validate`` requires, so two exported skills may not share a name: narrow the
export with ``--agent-id``/``--user-id``/``--status``. Import reads a folder with a ``SKILL.md`` or a folder
of such folders (a file over 1 MB is refused before it is read); the frontmatter is rewritten in its
canonical form (comments dropped, docs/SECURITY.md) and each skill goes through ``validate_skill`` like a
distilled one (source ``imported``: no source runs, no source class) and lands as SHADOW, so activation
still needs a reviewer. An imported skill's class key is ``imported-`` plus a hash of its name; importing
the same text again is a no-op. A name another live skill of the tenant holds (distilled or imported)
refuses the import: live names are unique per tenant. The exporter's ``skill_id`` is recorded only when it
has the id format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from skillflow.kernel.config import PromotionConfig, Settings, get_settings
from skillflow.kernel.errors import InputError
from skillflow.kernel.models import InjectionRole, SkillStatus
from skillflow.kernel.textnorm import tenant_problem
from skillflow.lifecycle.revisions import (
    MAX_SKILL_MD_BYTES,
    content_sha,
    current_revision,
    empty_stats,
    self_signature,
)
from skillflow.promotion.evidence import Evidence
from skillflow.promotion.skillmd import SkillMdError, canonical_skill_md, parse_skill_md, shown_name
from skillflow.storage.skills import (
    SkillRecord,
    insert_skill,
    list_skills,
    live_skill_for_class,
    name_holder,
    record_event,
)

log = logging.getLogger("skillflow.lifecycle.transfer")

METADATA_FILE = "skillflow.json"
FORMAT = "skillflow-export/1"
SOURCE_IMPORTED = "imported"
MAX_METADATA_BYTES = 100_000
SKILL_ID = re.compile(r"[0-9a-f]{32}")  # kernel.models.new_id: uuid4 hex


class ExportConflict(ValueError):
    """Two skills of one export share a name (their folder); the message names them."""


@dataclass(frozen=True)
class Exported:
    skill_id: str
    name: str
    folder: Path


@dataclass
class Imported:
    folder: str
    decision: str  # "imported" | "unchanged" | "refused"
    skill_id: str | None = None
    reasons: list[str] = field(default_factory=list)


def import_class_key(name: str) -> str:
    """The class key of an imported skill (64 chars, never a canonical hash: those are plain hex)."""
    return "imported-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:55]


def _metadata(skill: SkillRecord, revision: int) -> dict[str, Any]:
    baseline = skill.baseline or {}
    active = (skill.stats or {}).get("active") or {}
    return {
        "format": FORMAT,
        "skill_id": skill.id,
        "agent_id": skill.agent_id,
        "user_id": skill.user_id,
        "name": skill.name,
        "version": skill.version,
        "revision": revision,
        "status": skill.status,
        "injection_role": skill.injection_role,
        "source": SOURCE_IMPORTED if skill.distiller == SOURCE_IMPORTED else "distilled",
        "canonical_hash": None if skill.canonical_hash.startswith("imported-") else skill.canonical_hash,
        "distiller": skill.distiller,
        "prompt_version": skill.prompt_version,
        "created_at": skill.created_at.isoformat(),
        "activated_at": skill.activated_at.isoformat() if skill.activated_at else None,
        "content_sha256": content_sha(skill.content),
        "evidence": {
            "source_runs": len(skill.source_workflow_ids or []),
            "baseline_executions": baseline.get("executions"),
            "baseline_success_rate": baseline.get("success_rate"),
            "validation": dict(skill.validation or {}),
            "active": {k: active.get(k) for k in ("activations", "rolling_success_rate")},
        },
    }


def export_skills(
    engine: Engine,
    dest: Path,
    statuses: Iterable[str] = (SkillStatus.ACTIVE.value,),
    agent_id: str | None = None,
    user_id: str | None = None,
) -> list[Exported]:
    """Write every matching skill as an Agent Skills folder; raises :class:`ExportConflict` before writing."""
    with engine.connect() as conn:
        skills = list_skills(conn, agent_id, user_id, list(statuses))
        revisions = {s.id: current_revision(conn, s.id) for s in skills}
    by_name: dict[str, list[SkillRecord]] = {}
    for s in skills:
        by_name.setdefault(s.name, []).append(s)
    clashes = {n: group for n, group in by_name.items() if len(group) > 1}
    if clashes:
        detail = "; ".join(f"{n}: {', '.join(f'{s.id[:12]} v{s.version}' for s in g)}" for n, g in clashes.items())
        raise ExportConflict(
            f"skills share a folder name ({detail}); narrow with --agent-id/--user-id/--status"
        )  # fmt: skip
    # The destination is checked with nothing to write too: an unusable one said "exported 0 skill(s)" (exit 0)
    # and failed only with skills (docs/guide/lifecycle.md, "Export and import").
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Exported] = []
    for s in skills:
        folder = dest / s.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_bytes(s.content.encode("utf-8"))
        meta = json.dumps(_metadata(s, revisions[s.id]), indent=2, sort_keys=True, default=str) + "\n"
        (folder / METADATA_FILE).write_text(meta, encoding="utf-8")
        out.append(Exported(s.id, s.name, folder))
    log.info("exported %d skill(s)", len(out))
    return out


def skill_folders(src: Path) -> list[Path]:
    """``src`` itself when it holds a SKILL.md, else its sub-folders that do (sorted)."""
    if (src / "SKILL.md").is_file():
        return [src]
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a folder")
    return sorted(p for p in src.iterdir() if p.is_dir() and (p / "SKILL.md").is_file())


def read_skill_file(path: Path, cap: int = MAX_SKILL_MD_BYTES) -> str:
    """A SKILL.md's text, refused before it is read when larger than ``cap`` bytes: a regular file by its
    size, anything else (a pipe, a device) by a read that stops at ``cap + 1`` bytes. Raises
    ``SkillMdError`` (too large, not UTF-8) or ``OSError``."""
    too_large = SkillMdError(f"{path.name} is larger than {cap} bytes")
    with path.open("rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > cap:
            raise too_large
        data = f.read(cap + 1)
    if len(data) > cap:
        raise too_large
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillMdError(f"{path.name} is not UTF-8") from exc


def _origin(folder: Path) -> str | None:
    """The exporting skill's id from ``skillflow.json``, kept only when it has the id format (uuid4 hex)."""
    path = folder / METADATA_FILE
    try:
        value = json.loads(read_skill_file(path, MAX_METADATA_BYTES)).get("skill_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and SKILL_ID.fullmatch(value) else None


def _tenant(name: str, value: str) -> str:
    if problem := tenant_problem(name, value):
        raise InputError(problem)
    return value


def import_skill(
    engine: Engine,
    folder: Path,
    agent_id: str,
    user_id: str,
    *,
    actor: str,
    config: PromotionConfig,
    settings: Settings | None = None,
    embedder_name: str | None = None,
) -> Imported:
    """Validate one folder's SKILL.md and store it as a SHADOW skill of the tenant (or say why not).

    A tenant id capture would refuse (a control character, NUL, a lone surrogate: two such tenants could share
    a live key) is refused here too, with ``InputError`` naming it."""
    from skillflow.injection.embeddings import get_embedder
    from skillflow.injection.retrieval import write_skill_vectors
    from skillflow.promotion.backends import get_judge
    from skillflow.promotion.staleness import registered_tools
    from skillflow.promotion.validation import validate_skill

    agent_id, user_id = _tenant("agent_id", agent_id), _tenant("user_id", user_id)
    label = folder.name
    try:
        content = canonical_skill_md(read_skill_file(folder / "SKILL.md"))
        parsed = parse_skill_md(content)
    except SkillMdError as exc:
        return Imported(label, "refused", reasons=[f"SKILL.md: {exc}"])
    except OSError as exc:
        return Imported(label, "refused", reasons=[f"SKILL.md: cannot be read ({type(exc).__name__})"])
    key = import_class_key(parsed.name)
    with engine.connect() as conn:
        for existing in list_skills(conn, agent_id, user_id, canonical_hash=key):
            if existing.content == content:
                return Imported(label, "unchanged", existing.id)
        live = live_skill_for_class(conn, agent_id, user_id, key) or name_holder(conn, agent_id, user_id, parsed.name)
        toolbox = registered_tools(conn, agent_id)
    if live is not None:
        reason = f"a live skill named {parsed.name} exists ({live.id}, {live.status}); edit it with `skillflow edit`"
        return Imported(label, "refused", live.id, [reason])
    settings = settings or get_settings()
    evidence = Evidence(empty_stats(agent_id, user_id, key), self_signature(content, toolbox), [], [], toolbox)
    result = validate_skill(content, evidence, get_judge(settings), config.skill_max_content_chars)
    if not result.ok or result.content != content:
        return Imported(label, "refused", reasons=list(result.reasons) or ["SKILL.md: not in canonical form"])
    embedder = get_embedder(embedder_name or settings.embedder)
    try:
        with engine.begin() as conn:
            skill = insert_skill(
                conn, agent_id=agent_id, user_id=user_id, canonical_hash=key, name=parsed.name,
                description=parsed.description, content=content, status=SkillStatus.SHADOW,
                injection_role=InjectionRole.USER, preconditions=list(parsed.preconditions),
                tools=list(parsed.allowed_tools), trigger_queries=[], source_workflow_ids=[],
                validation=dict(result.checks), prompt_version="agentskills", distiller=SOURCE_IMPORTED,
                embedding_model=embedder.model_id, actor=actor,
            )  # fmt: skip
            record_event(
                conn, skill, "imported", actor=actor, to_status=skill.status,
                details={"source": SOURCE_IMPORTED, "folder": shown_name(label), "content_sha256": content_sha(content),
                         "origin_skill_id": _origin(folder)},
            )  # fmt: skip
            write_skill_vectors(conn, skill, embedder, config.max_trigger_queries)
    except IntegrityError:  # a concurrent import of the same skill landed first
        with engine.connect() as conn:
            same = [s.id for s in list_skills(conn, agent_id, user_id, canonical_hash=key) if s.content == content]
        if same:
            return Imported(label, "unchanged", same[0])
        return Imported(label, "refused", reasons=["a live skill of the same name landed concurrently"])
    log.info("imported skill %s (shadow) for %s/%s", skill.id, agent_id, user_id)
    return Imported(label, "imported", skill.id)


def import_skills(
    engine: Engine,
    src: Path,
    agent_id: str,
    user_id: str,
    *,
    actor: str,
    config: PromotionConfig,
    settings: Settings | None = None,
) -> list[Imported]:
    """Import every skill folder under ``src`` (see :func:`skill_folders`); one result per folder."""
    agent_id, user_id = _tenant("agent_id", agent_id), _tenant("user_id", user_id)  # before any folder is read
    return [
        import_skill(engine, folder, agent_id, user_id, actor=actor, config=config, settings=settings)
        for folder in skill_folders(src)
    ]
