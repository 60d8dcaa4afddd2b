"""``skillflow cycle`` / ``distill`` (run the promotion flows) and ``skills`` / ``show`` (inspect the skillbox)."""

from __future__ import annotations

import json as jsonlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from sqlalchemy import select

from skillflow.cli.app import (
    AgentOption,
    DbOption,
    JsonOption,
    UserOption,
    app,
    console,
    database_url,
    engine_for,
    fail,
    flow_database,
    print_json,
    promotion_config,
)
from skillflow.cli.commands.lifecycle import IdArg, resolve_id
from skillflow.cli.errors import FAILED
from skillflow.cli.terminal import safe, visible
from skillflow.kernel.models import SkillStatus
from skillflow.storage.schema import skill_events, skillbox
from skillflow.storage.skills import SkillRecord, get_skill, list_skills

if TYPE_CHECKING:
    from skillflow.promotion.report import PromotionReport

BADGE = {
    "candidate": "[white on grey37] candidate [/]",
    "shadow": "[black on yellow] shadow [/]",
    "active": "[black on green] active [/]",
    "deprecated": "[white on grey23] deprecated [/]",
    "demoted": "[white on red] demoted [/]",
    "rejected": "[white on dark_red] rejected [/]",
}

SHORT = {"not_covered": "new", "executions": "N", "success_rate": "SR", "distinct_queries": "Q", "recency": "rec"}
GATE_LEGEND = "new: not covered by a live skill · N: executions · SR: success rate · Q: distinct queries · rec: recency"


def _quiet_prefect(json: bool) -> None:
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if json:  # keep stdout machine-readable
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values parse as JSON when they can (numbers, booleans, lists), else strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {pair!r}")
        try:
            out[key.strip()] = jsonlib.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def rule_line(summary: dict[str, Any]) -> str:
    """The calibration stage's rule in one line: live skills, whether it injects, each intent's floor (a request
    scoring below it gets no skill: docs/guide/runtime.md), its inner cross-validation on the tenant's history."""

    def floors(values: dict[str, Any]) -> str:
        return ", ".join(f"{k} never" if v is None else f"{k} ≥ {float(v):.3f}" for k, v in sorted(values.items()))

    inner = summary.get("inner") or {}
    line = (
        f"injection rule: {summary.get('live_skills', 0)} live skill(s), "
        f"{'injects' if summary.get('injects') else 'injects nothing'} ({summary.get('reason', '')})"
    )
    if summary.get("floors"):
        line += f"; floors {floors(summary['floors'])}"
    if summary.get("opening_floors"):
        line += f"; openings {floors(summary['opening_floors'])}"
    if inner:
        line += (
            f"; inner CV {inner.get('hits', 0)}/{inner.get('positives', 0)} hits, {inner.get('wrong', 0)} wrong, "
            f"{inner.get('false', 0)}/{inner.get('negatives', 0)} false"
        )
    return line


def print_report(report: PromotionReport) -> None:
    """Rich tables: promoted, rejected with reasons, skipped, deprecated, review flags, the gate table."""
    title = f"{safe(report.agent_id)} / {safe(report.user_id)} — {safe(report.mode)} {report.cycle}" + (
        " (dry run)" if report.dry_run else ""
    )
    console.rule(title)
    if report.partition_skipped:
        console.print(f"partition skipped: {safe(report.partition_skipped)}")
        return
    console.print(f"candidates considered: {report.candidates_considered}")
    outcome = Table(show_header=True, header_style="bold", title="Decisions")
    outcome.add_column("decision")
    outcome.add_column("class / skill", style="cyan")
    outcome.add_column("reason", overflow="fold")
    for sid in report.promoted:
        outcome.add_row("[green]promoted[/]", safe(sid), "")
    for h in report.would_promote:
        outcome.add_row("[green]would promote[/]", safe(h[:12]), "dry run")
    for h, reasons in report.rejected:
        outcome.add_row("[red]rejected[/]", safe(h[:12]), safe("; ".join(reasons)))
    for h, reason in report.skipped:
        outcome.add_row("[yellow]skipped[/]", safe(h[:12]), safe(reason))
    for sid, reason in report.deprecated:
        outcome.add_row("[magenta]deprecated[/]", safe(sid), safe(reason))
    if outcome.row_count:
        console.print(outcome)
    for flag in report.review_flags:
        console.print(f"[bold]review:[/] {safe(flag)}")
    if report.applicability is not None:
        console.print(safe(rule_line(report.applicability)), soft_wrap=True)  # one line a script can find
    if not report.gates:
        return
    gates = Table(title="Gates", header_style="bold", caption=GATE_LEGEND)
    for col in ("class", "runs", "rate", "qry", "days"):
        gates.add_column(col, justify="left" if col == "class" else "right", style="cyan" if col == "class" else None)
    names = list(report.gates[0].checks)
    for name in names:
        gates.add_column(safe(SHORT.get(name, name)), justify="center")
    gates.add_column("score", justify="right")
    gates.add_column("decision", overflow="fold")
    for g in report.gates:
        marks = ["[green]✓[/]" if g.checks.get(n) else "[red]✗[/]" for n in names]
        score = "" if g.score is None else f"{g.score:.2f}"
        gates.add_row(
            safe(g.hash[:8]),
            str(g.executions),
            f"{g.success_rate:.2f}",
            str(g.distinct_queries),
            str(g.last_seen_days),
            *marks,
            score,
            safe(g.decision),
        )
    console.print(gates)


SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a promotion setting for this run, e.g. --set min_executions=3 (repeatable)."),
]


@app.command("cycle")
def cycle_cmd(
    db: DbOption = None,
    agent_id: AgentOption = None,
    user_id: UserOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Compute the report; write nothing.")] = False,
    json: JsonOption = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force/--respect-cadence", help="Run now (default) or only after promotion_every_n_runs new runs."
        ),
    ] = True,
    set_: SetOption = None,
) -> None:
    """Run the promotion-cycle flow: sweep → gates → rank → distill → validate → store, per partition."""
    try:
        overrides = parse_sets(set_ or [])
    except ValueError as exc:
        fail(str(exc))
    promotion_config(overrides)  # a typo or a bad value fails here, before any flow starts
    _require_providers()
    url = database_url(db)
    engine_for(url).dispose()  # migrate first
    _quiet_prefect(json)
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    with flow_database(url) as recorded:
        params = PromotionCycleParams(
            database_url=recorded,
            agent_id=agent_id,
            user_id=user_id,
            dry_run=dry_run,
            config_overrides=overrides,
            force=force,
        )
        reports = promotion_cycle(params)
    if json:
        print_json({"reports": [r.model_dump(mode="json") for r in reports]})
        return
    if not reports:
        console.print("No partition with stored runs matched.")
    for report in reports:
        print_report(report)


def _require_providers() -> None:
    """The configured distiller and judge can be built (their keys are set), or one error line naming the variable."""
    from skillflow.promotion.backends import check_providers
    from skillflow.promotion.llm import ProviderNotConfigured

    try:
        check_providers()
    except ProviderNotConfigured as exc:
        fail(str(exc))


@app.command("distill")
def distill_cmd(
    canonical_hash: Annotated[str, typer.Argument(help="Class hash, or a prefix unique in the tenant (≥ 4 chars).")],
    agent_id: Annotated[str, typer.Option("--agent-id", help="The agent.")],
    user_id: Annotated[str, typer.Option("--user-id", help="The user.")],
    db: DbOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Compute the report; write nothing.")] = False,
    json: JsonOption = False,
) -> None:
    """ "Distill now": run the distill-class flow for one class — the same gates and validation as a cycle."""
    from skillflow.promotion.cycle import resolve_hash

    promotion_config()
    _require_providers()
    url = database_url(db)
    engine = engine_for(url)
    if len(canonical_hash) < 4:
        fail(f"a class hash prefix needs at least 4 characters, got {visible(canonical_hash)!r}")
    try:
        full = resolve_hash(engine, agent_id, user_id, canonical_hash)
    except ValueError as exc:
        fail(str(exc))
    finally:
        engine.dispose()
    if full is None:
        fail(
            f"no trajectory class {visible(canonical_hash)!r} among the runs of {visible(agent_id)}/{visible(user_id)}",
            FAILED,
        )
    _quiet_prefect(json)
    from flows.distill_class import DistillClassParams, distill_class

    with flow_database(url) as recorded:
        params = DistillClassParams(
            database_url=recorded, agent_id=agent_id, user_id=user_id, canonical_hash=full, dry_run=dry_run
        )
        report = distill_class(params)
    if json:
        print_json(report.model_dump(mode="json"))
        return
    print_report(report)


def _activation(skill: SkillRecord) -> str:
    stats = skill.stats or {}
    active, shadow = stats.get("active") or {}, stats.get("shadow") or {}
    if active.get("activations"):
        rolling = active.get("rolling_success_rate")
        roll = "" if rolling is None else f", rolling {rolling:.2f}"
        return f"{active.get('successes', 0)}/{active['activations']} ok{roll}"
    if shadow.get("observations"):
        return f"shadow: {shadow.get('trajectory_matches', 0)}/{shadow['observations']} matched"
    return "—"


def _baseline(skill: SkillRecord) -> str:
    b = skill.baseline or {}
    if "success_rate" not in b:
        return "—"
    return f"{b['success_rate']:.2f} over {b.get('executions', '?')}"


def _badge(status: str) -> str:
    return BADGE.get(status) or safe(status)


def _skill_json(skill: SkillRecord, full: bool = False) -> dict[str, Any]:
    return {k: v for k, v in skill.__dict__.items() if full or k != "content"}


@app.command("skills")
def skills_cmd(
    db: DbOption = None,
    agent_id: AgentOption = None,
    user_id: UserOption = None,
    status: Annotated[
        list[SkillStatus] | None, typer.Option("--status", help="Only skills in this status (repeatable).")
    ] = None,
    json: JsonOption = False,
) -> None:
    """List learned skills: status badge, version, role, activation stats, baseline."""
    engine = engine_for(db)
    filters = [f"--{name} {value}" for name, value in (("agent-id", agent_id), ("user-id", user_id)) if value]
    filters += [f"--status {s.value}" for s in status or ()]
    with engine.connect() as conn:
        skills = list_skills(conn, agent_id, user_id, statuses=status or None)
        filtered_out = bool(filters and not skills and conn.execute(select(skillbox.c.id).limit(1)).first())
    engine.dispose()
    if json:
        print_json({"skills": [_skill_json(s) for s in skills]})
        return
    if filtered_out:
        console.print(
            f"No skill matches {safe(' '.join(filters))} (other skills exist; `skillflow skills` lists them all)."
        )
        return
    if not skills:
        console.print("No skills yet (run `skillflow cycle`).")
        return
    table = Table(title="Skills", header_style="bold")
    for col in ("id", "agent", "user", "name", "status", "v", "role", "class", "activations", "baseline", "updated"):
        table.add_column(
            col,
            style="cyan" if col == "id" else None,
            justify="right" if col == "v" else "left",
            no_wrap=col == "id",
            min_width=12 if col == "id" else None,  # the id other commands take, whole on a narrow terminal
        )
    for s in skills:
        table.add_row(
            safe(s.id[:12]),
            safe(s.agent_id),
            safe(s.user_id),
            safe(s.name),
            _badge(s.status),
            str(s.version),
            safe(s.injection_role),
            safe(s.canonical_hash[:12]),
            safe(_activation(s)),
            safe(_baseline(s)),
            f"{s.updated_at:%Y-%m-%d %H:%M}",
        )
    console.print(table)


@app.command("show")
def show_cmd(
    skill_id: IdArg,
    db: DbOption = None,
    json: JsonOption = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the review page with its charts as one HTML file.")
    ] = None,
) -> None:
    """Show one skill: its SKILL.md and evidence (source class stats, validation checks, lifecycle events)."""
    from skillflow.storage.aggregate import aggregate_classes

    engine = engine_for(db)
    full = resolve_id(engine, skill_id)  # the one rule of every command: the id or a prefix of 6 characters or more
    with engine.connect() as conn:
        skill = get_skill(conn, full)
        current = aggregate_classes(conn, skill.agent_id, skill.user_id, skill.canonical_hash)
        events = list(
            conn.execute(
                select(skill_events).where(skill_events.c.skill_id == skill.id).order_by(skill_events.c.created_at)
            ).mappings()
        )
    if html is not None:
        from skillflow.kernel.config import load_promotion_config
        from skillflow.lifecycle.review import gather_evidence, render_html

        page = render_html(gather_evidence(engine, skill.id, load_promotion_config()))
        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(page, encoding="utf-8")
        console.print(f"review page: {safe(html.resolve())}")
    engine.dispose()
    klass = current[0].__dict__ if current else None
    if json:
        print_json({"skill": _skill_json(skill, full=True), "class_now": klass, "events": [dict(e) for e in events]})
        return
    console.rule(f"{safe(skill.name)} v{skill.version}  {_badge(skill.status)}  role={safe(skill.injection_role)}")
    tenant = f"{safe(skill.agent_id)}/{safe(skill.user_id)}"
    console.print(f"id {safe(skill.id)}  tenant {tenant}  class {safe(skill.canonical_hash[:12])}")
    console.print(
        f"distiller {safe(skill.distiller)} ({safe(skill.prompt_version)}), "
        f"embeddings {safe(skill.embedding_model or '—')}"
    )
    if skill.demotion_reason:
        console.print(f"[red]retired:[/] {safe(skill.demotion_reason)}")
    content = visible(skill.content, multiline=True)  # no markup in Syntax: raw keeps <shape>s, controls shown
    console.print(Panel(Syntax(content, "markdown", word_wrap=True), title="SKILL.md"))
    evidence = Table(title="Evidence", show_header=False)
    evidence.add_column("what", style="bold")
    evidence.add_column("value", overflow="fold")
    b = skill.baseline or {}
    evidence.add_row(
        "baseline (frozen)", safe(f"{_baseline(skill)}; window {b.get('window_start')} → {b.get('window_end')}")
    )
    if klass:
        evidence.add_row(
            "class now",
            f"{klass['executions']} runs, success {klass['success_rate']:.2f}, {klass['distinct_queries']} queries",
        )
    evidence.add_row("source runs", str(len(skill.source_workflow_ids or [])))
    evidence.add_row("trigger queries", str(len(skill.trigger_queries or [])))
    evidence.add_row("tools", safe(", ".join(map(str, skill.tools or []))))
    evidence.add_row("activation", safe(_activation(skill)))
    checks = skill.validation or {}
    evidence.add_row("validation", safe(" ".join(f"{k}:{'✓' if v else '✗'}" for k, v in checks.items()) or "—"))
    console.print(evidence)
    table = Table(title="Events", header_style="bold")
    for col in ("when", "event", "from", "to", "actor", "reason", "flow run"):
        table.add_column(col, overflow="fold")
    for e in events:
        table.add_row(
            f"{e['created_at']:%Y-%m-%d %H:%M:%S}",
            safe(e["event"]),
            safe(e["from_status"] or ""),
            safe(e["to_status"] or ""),
            safe(e["actor"]),
            safe(e["reason"] or ""),
            safe((e["flow_run_id"] or "")[:12]),
        )
    console.print(table)
