"""``skillflow edit | history | diff | rollback | export | import``: control over what the agent learned."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from sqlalchemy import Engine

from skillflow.cli.app import DbOption, JsonOption, app, console, engine_for, fail, print_json
from skillflow.cli.commands.lifecycle import ActorOption, IdArg, ReasonOption, _actor, _announce, resolve_id
from skillflow.cli.terminal import safe, visible
from skillflow.kernel.config import load_promotion_config
from skillflow.storage.skills import SkillRecord

STATUSES = ("candidate", "shadow", "active", "deprecated", "demoted", "rejected")


def _editor_text(initial: str) -> str:
    """Open ``$EDITOR`` (or ``$VISUAL``, else ``vi``) on ``initial``; the saved text."""
    editor = os.environ.get("EDITOR") or os.environ.get("VISUAL") or "vi"
    with tempfile.TemporaryDirectory(prefix="skillflow-edit-") as tmp:
        path = Path(tmp) / "SKILL.md"
        path.write_text(initial, encoding="utf-8")
        if subprocess.call([*shlex.split(editor), str(path)]) != 0:
            fail(f"editor {editor!r} exited with an error; nothing changed")
        from skillflow.lifecycle.transfer import read_skill_file
        from skillflow.promotion.skillmd import SkillMdError

        text = ""
        try:
            text = read_skill_file(path)
        except OSError as exc:
            fail(f"cannot read the edited file: {exc.strerror or exc}")
        except SkillMdError as exc:
            fail(f"cannot read the edited file: {exc}")
        return text


@app.command("edit")
def edit_cmd(
    skill_id: IdArg,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="The corrected SKILL.md, at most 1 MB (default: open $EDITOR on the current one)."),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (stored with the revision, cleaned and redacted).")] = "",
    actor: ActorOption = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Correct a SHADOW skill before activation: validated like a distilled one, stored as a new revision."""
    from skillflow.lifecycle.revisions import EditRefused, current_revision, edit_skill
    from skillflow.lifecycle.transfer import read_skill_file
    from skillflow.promotion.skillmd import SkillMdError
    from skillflow.storage.skills import get_skill

    engine = engine_for(db)
    full = resolve_id(engine, skill_id)
    with engine.connect() as conn:
        skill = get_skill(conn, full)
        seen = current_revision(conn, full)
    if file is not None:
        try:
            text = read_skill_file(file)
        except OSError as exc:  # its reason only: the message of an OSError repeats the path
            fail(f"cannot read {file}: {exc.strerror or exc}")
        except SkillMdError as exc:
            fail(f"cannot read {file}: {exc}")
    else:
        text = _editor_text(skill.content)
    try:
        result = edit_skill(
            engine, full, text, editor=_actor(actor), config=load_promotion_config(), reason=reason or None,
            expected_revision=seen,
        )  # fmt: skip
    except EditRefused as exc:
        if json:
            print_json({"skill_id": full, "applied": False, "reasons": exc.reasons})
            raise typer.Exit(1) from exc
        console.print("[red]edit refused[/red] (nothing stored):")
        for r in exc.reasons:
            console.print(f"  - {safe(r)}")
        raise typer.Exit(1) from exc
    if json:
        print_json({"skill_id": full, "applied": result.changed, "revision": result.revision, "diff": result.diff})
        return
    if not result.changed:
        console.print(f"no change: {safe(skill.name)} v{skill.version} stays at revision {result.revision}")
        return
    console.print(visible(result.diff, multiline=True), markup=False, highlight=False)
    console.print(
        f"stored revision {result.revision} of [cyan]{safe(skill.name)}[/cyan] v{skill.version}; activate it with "
        f"`skillflow activate {safe(full[:12])} --revision {result.revision}`"
    )


@app.command("history")
def history_cmd(skill_id: IdArg, db: DbOption = None, json: JsonOption = False) -> None:
    """Every version of the skill's class with its revisions and lifecycle events (status, actor, reason, date)."""
    from skillflow.lifecycle.history import history

    engine = engine_for(db)
    versions = history(engine, resolve_id(engine, skill_id))
    if json:
        print_json({"versions": versions})
        return
    table = Table(title="History", header_style="bold")
    for col in ("version", "skill", "when", "what", "status", "actor", "reason"):
        table.add_column(col, overflow="fold")
    for v in versions:
        rows = [(e["created_at"], e["event"], e["to_status"] or "", e["actor"], e["reason"] or "") for e in v["events"]]
        rows += [
            (r["created_at"], f"revision {r['revision']}", "", r["editor"], r["reason"] or "")
            for r in v["revisions"]
            if len(v["revisions"]) > 1
        ]
        version, sid = f"v{v['version']}", safe(v["skill_id"][:12])
        for at, what, status, actor, why in sorted(rows, key=lambda r: r[0]):
            cells = (safe(what), safe(status), safe(actor), safe(why))
            table.add_row(version, sid, f"{at:%Y-%m-%d %H:%M:%S}", *cells)
        table.add_row(version, sid, "now", "", safe(v["status"]), "", "", end_section=True)
    console.print(table)


@app.command("diff")
def diff_cmd(
    skill_id: IdArg,
    a: Annotated[str | None, typer.Argument(help="Older side: N (revision of this version), vN or vN.M.")] = None,
    b: Annotated[str | None, typer.Argument(help="Newer side (default: the newest revision).")] = None,
    db: DbOption = None,
) -> None:
    """Unified diff of two revisions (default: the newest against the one before, or the previous version)."""
    from skillflow.lifecycle.history import diff_refs

    engine = engine_for(db)
    try:
        text = diff_refs(engine, resolve_id(engine, skill_id), a, b)
    except ValueError as exc:
        fail(str(exc))
        return
    typer.echo(visible(text, multiline=True) or "(no differences)", nl=not text)


@app.command("rollback")
def rollback_cmd(
    skill_id: IdArg,
    to: Annotated[str, typer.Option("--to", help="The earlier version to make ACTIVE again: N or vN.")],
    reason: ReasonOption,
    actor: ActorOption = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Make an earlier version of the class ACTIVE again (tools re-checked); the current one leaves with the reason."""
    from skillflow.lifecycle.decisions import ActivationRefused
    from skillflow.lifecycle.rollback import rollback_skill
    from skillflow.storage.skills import InvalidTransition

    digits = to[1:] if to[:1] in ("v", "V") else to  # `v2` as `diff` and `history` write versions
    if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
        fail(f"--to {visible(to)!r}: a version is N or vN (N ≥ 1)")
    engine = engine_for(db)
    full = resolve_id(engine, skill_id)
    try:
        skill = rollback_skill(
            engine, full, int(digits), actor=_actor(actor), reason=reason, config=load_promotion_config()
        )
    except ActivationRefused as exc:
        fail("rollback refused: " + "; ".join(exc.reasons))
        return
    except (InvalidTransition, ValueError) as exc:
        fail(str(exc))
        return
    if json:
        print_json({"skill_id": skill.id, "version": skill.version, "status": skill.status})
    else:
        console.print(
            f"rolled back: [cyan]{safe(skill.name)}[/cyan] v{skill.version} ({safe(skill.id)}) is {safe(skill.status)}"
        )
    # Also when it rolled back to the ACTIVE version itself (nothing changed): the rollback that made it ACTIVE
    # is sent again, under its lifecycle row's id and with the payload read from that row.
    _announce(engine, "skillflow.skill.rolled_back", skill, lambda row: _rollback_payload(engine, skill, row))


def _rollback_payload(engine: Engine, skill: SkillRecord, row: Any) -> dict[str, Any]:
    """The rollback's event payload, from its lifecycle row (``details.replaced`` / ``replaced_status``).

    A row written before ``replaced_status`` was stored gives the replaced version's status now.
    """
    from skillflow.storage.skills import get_skill

    details = row.details or {}
    replaced, status = details.get("replaced"), details.get("replaced_status")
    if replaced and replaced != skill.id and not status:
        with engine.connect() as conn:
            status = get_skill(conn, replaced).status
    extra = {"replaced": replaced, "replaced_status": status} if replaced and replaced != skill.id else {}
    return {"decision": "rollback", "version": skill.version, **extra}


@app.command("export")
def export_cmd(
    dest: Annotated[Path, typer.Argument(help="Folder to write <name>/SKILL.md + skillflow.json into.")],
    status: Annotated[
        list[str] | None, typer.Option("--status", help="Statuses to export (repeatable; default: active).")
    ] = None,
    agent_id: Annotated[str | None, typer.Option("--agent-id", help="Only this agent.")] = None,
    user_id: Annotated[str | None, typer.Option("--user-id", help="Only this user.")] = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Write skills in the Agent Skills format (one folder per skill, passing `agentskills validate`)."""
    from skillflow.lifecycle.transfer import ExportConflict, export_skills

    statuses = status or ["active"]
    bad = [s for s in statuses if s not in STATUSES]
    if bad:
        fail(f"unknown status {', '.join(bad)}; expected one of {', '.join(STATUSES)}")
    try:
        done = export_skills(engine_for(db), dest, statuses, agent_id, user_id)
    except ExportConflict as exc:
        fail(str(exc))
        return
    if json:
        print_json({"exported": [{"skill_id": e.skill_id, "name": e.name, "folder": str(e.folder)} for e in done]})
        return
    for e in done:
        console.print(f"{safe(e.folder)}  ({safe(e.skill_id)})")
    console.print(f"exported {len(done)} skill(s) to {safe(dest)}")


@app.command("import")
def import_cmd(
    src: Annotated[Path, typer.Argument(help="A skill folder (with SKILL.md) or a folder of skill folders.")],
    agent_id: Annotated[str, typer.Option("--agent-id", help="The agent the skills are for.")],
    user_id: Annotated[str, typer.Option("--user-id", help="The user the skills are for.")],
    actor: ActorOption = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Bring Agent Skills in as SHADOW skills (same validation; activation still needs a reviewer)."""
    from skillflow.lifecycle.transfer import import_skills

    engine = engine_for(db)
    try:
        results = import_skills(
            engine, src, agent_id, user_id, actor=_actor(actor), config=load_promotion_config()
        )  # fmt: skip
    except FileNotFoundError as exc:
        fail(str(exc))
        return
    if json:
        print_json({"results": [r.__dict__ for r in results]})
    else:
        for r in results:
            tail = f" ({safe(r.skill_id)})" if r.skill_id else ""
            console.print(f"{safe(r.folder)}: {safe(r.decision)}{tail}")
            for reason in r.reasons:
                console.print(f"  - {safe(reason)}")
    if any(r.decision == "refused" for r in results):
        raise typer.Exit(1)
