"""``skillflow demo``: the whole loop on the embedded default, with real Prefect flow runs.

Simulated runs and multi-turn conversations (or the τ-bench corpus) → promotion cycle (skills land in
SHADOW) → more runs → shadow evaluation → readiness → activation (user; the applicability rule is refit at
once) → a multi-turn conversation gets its skill just before the write, an unrelated request gets none →
injection per provider → a tool breaks → drift demotion (stamps cleared, raw runs visible again) → the
tool is fixed → re-qualification → v2 → data quality and status.
This module composes flows, so it lives in the CLI layer (the domain package never imports prefect).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url

from skillflow.cli.terminal import safe, visible
from skillflow.kernel.config import load_promotion_config, pinned_environment
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.runtime import Skillflow
from skillflow.storage.aggregate import aggregate_classes
from skillflow.storage.engine import make_engine, recordable_url, shown_url
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import workflow_memory
from skillflow.storage.skills import SkillRecord, get_skill, list_skills

AGENT = "sim-airline"
BUSINESS, EXECUTION = "business", "execution-only"
CANCEL = "get_user_details > get_reservation_details > cancel_reservation"
DECLINED = "search_direct_flight > book_reservation"
console = Console(emoji=False)  # every stored value goes through terminal.safe


DEMO_SETTINGS = {
    "SKILLFLOW_PROMOTION__REQUIRE_SHADOW": "true",
    "SKILLFLOW_PROMOTION__SHADOW_EVALUATION_ENABLED": "true",
}


class Demo:
    def __init__(self, db: str, total_steps: int) -> None:
        self.db = db
        self.engine: Engine = make_engine(db)
        self.total = total_steps
        self.n = 0
        self.started = time.monotonic()
        self.config = load_promotion_config()

    def step(self, title: str) -> None:
        self.n += 1
        console.rule(f"[bold cyan][{self.n}/{self.total}] {title}[/]  ({time.monotonic() - self.started:.0f}s)")


TAU_AGENTS = {"execution": "tau-bench-airline-execution", "reward": "tau-bench-airline"}  # one per outcome
DEMO_AGENTS = (AGENT, *TAU_AGENTS.values())  # the only agents a demo database holds


def _fresh_database(db: str) -> None:
    """Remove the demo's SQLite file before a run, refusing a file that is not a demo's: one holding another
    agent's runs or skills, or not a skillflow database at all (``--db`` pointed at real data). A server database
    cannot be recreated, so the demo runs only on an empty one: any skillflow row there (another tenant's, or an
    earlier demo's, whose walkthrough would then describe what did not happen) is refused."""
    from skillflow.cli.errors import CliError

    url = make_url(db)
    if url.get_backend_name() != "sqlite":
        if _holds_rows(db):
            raise CliError(
                f"--db {safe(url.render_as_string(hide_password=True))}: the database already holds skillflow data; "
                "the demo cannot recreate a server database, so give it an empty database or schema (or a new "
                "SQLite file, the default)"
            )
        return
    if not url.database or url.database == ":memory:":
        return
    path = Path(url.database)
    if path.exists() and not _demo_database(path):
        raise CliError(
            f"--db {db!r}: {path} holds data that is not the demo's (runs or skills of other agents, or not a "
            "skillflow database); the demo recreates its database, so give it a new file or the default"
        )
    for suffix in ("", "-wal", "-shm"):
        Path(url.database + suffix).unlink(missing_ok=True)


def _holds_rows(db: str) -> bool:
    """Whether the server database at ``db`` has a row in any table that names an agent."""
    from sqlalchemy import inspect

    from skillflow.storage.schema import agent_tools, skillbox

    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            present = set(inspect(conn).get_table_names())
            return any(
                conn.execute(select(t.c.agent_id).limit(1)).first() is not None
                for t in (workflow_memory, skillbox, agent_tools)
                if t.name in present
            )
    finally:
        engine.dispose()


def _demo_database(path: Path) -> bool:
    """Whether the SQLite file at ``path`` is empty or holds nothing but the demo's agents."""
    import sqlite3

    if path.is_file() and path.stat().st_size == 0:
        return True
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        marks = ",".join("?" for _ in DEMO_AGENTS)
        for table in ("workflow_memory", "skillbox", "agent_tools"):
            if (
                table in tables
                and conn.execute(
                    f"SELECT 1 FROM {table} WHERE agent_id NOT IN ({marks}) LIMIT 1", DEMO_AGENTS
                ).fetchone()
            ):
                return False
        return not tables or "workflow_memory" in tables
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _class_table(engine: Engine, agent_id: str, user_id: str, limit: int = 12) -> Table:
    with engine.connect() as conn:
        classes = sorted(aggregate_classes(conn, agent_id, user_id), key=lambda c: -c.executions)
    table = Table(title=f"trajectory classes — {safe(agent_id)}/{safe(user_id)}", show_lines=False)
    for col in ("hash", "runs", "success", "rate", "queries", "tool sequence"):
        table.add_column(col, justify="right" if col in ("runs", "success", "rate", "queries") else "left")
    for c in classes[:limit]:
        table.add_row(
            c.canonical_hash[:12],
            str(c.executions),
            str(c.successes),
            f"{c.success_rate:.2f}",
            str(c.distinct_queries),
            safe((c.tool_sequence or "")[:70]),
        )
    if len(classes) > limit:
        table.caption = f"… and {len(classes) - limit} smaller classes"
    return table


def _report_table(report: Any) -> Table:
    table = Table(title=f"promotion report — {safe(report.agent_id)}/{safe(report.user_id)} (cycle {report.cycle})")
    for col in ("class", "runs", "rate", "queries", "decision", "reason"):
        table.add_column(col)
    for row in sorted(report.gates, key=lambda r: -r.executions)[:12]:
        table.add_row(
            safe(row.hash),
            str(row.executions),
            f"{row.success_rate:.2f}",
            str(row.distinct_queries),
            safe(row.decision),
            safe(row.reason or ""),
        )
    table.caption = (
        f"promoted {len(report.promoted)} · rejected {len(report.rejected)} · skipped {len(report.skipped)} · "
        f"considered {report.candidates_considered}"
    )
    return table


def _by_sequence(engine: Engine, user_id: str, sequence: str) -> Any:
    with engine.connect() as conn:
        return next((c for c in aggregate_classes(conn, AGENT, user_id) if c.tool_sequence == sequence), None)


def _gate_row(report: Any, canonical_hash: str | None) -> Any:
    return next((r for r in report.gates if r.canonical_hash == canonical_hash), None)


def _skill_for(engine: Engine, user_id: str, sequence: str, statuses: tuple[SkillStatus, ...]) -> SkillRecord | None:
    cls = _by_sequence(engine, user_id, sequence)
    if cls is None:
        return None
    with engine.connect() as conn:
        found = list_skills(conn, AGENT, user_id, statuses, canonical_hash=cls.canonical_hash)
    return found[-1] if found else None


def _cycle(demo: Demo, user_id: str) -> Any:
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    reports = promotion_cycle(
        PromotionCycleParams(database_url=recordable_url(demo.db), agent_id=AGENT, user_id=user_id, force=True)
    )
    return reports[0]


def _traffic(sf: Skillflow, n: int, seed: int, user_id: str, **kwargs: Any) -> Any:
    """Runs that happen from now on (a few ms apart), so they are newer than any skill or demotion."""
    from skillflow.lab.simulator import simulate_runs

    return simulate_runs(sf, n, seed, user_id=user_id, start=utcnow(), step=timedelta(milliseconds=2), **kwargs)


def _stamped(engine: Engine, skill_id: str) -> int:
    with engine.connect() as conn:
        q = select(func.count()).select_from(workflow_memory).where(workflow_memory.c.promoted_skill_id == skill_id)
        return int(conn.execute(q).scalar() or 0)


def _hint_for(sf: Skillflow, user_id: str, sequence: tuple[str, ...]) -> Any:
    """The simulated agent's model follows the procedure of an injected skill (what injection is for)."""
    from skillflow.lab.simulator import SkillHint

    def hook(query: str) -> SkillHint:
        prepared = sf.prepare(query, user_id)
        if not prepared.skill_ids:
            return SkillHint()
        return SkillHint(skill_ids=prepared.skill_ids, preferred=sequence)

    return hook


def run_simulated(db: str) -> None:
    from flows.data_quality import DataQualityParams, data_quality
    from flows.drift_demotion import DriftDemotionParams, drift_demotion
    from flows.shadow_evaluation import ShadowEvaluationParams, shadow_evaluation
    from skillflow.lab.simulator import business_outcome, simulate_conversations, simulate_runs
    from skillflow.lifecycle.readiness import get_shadow_readiness

    demo = Demo(db, 12)
    demo.step("fresh database: every migration, recorded")
    _fresh_database(db)
    console.print(f"applied: {', '.join(migrate(demo.engine))}  on {safe(shown_url(db))}")

    demo.step("400 simulated runs per tenant (+150 multi-turn conversations), through the capture API")
    biz = Skillflow(
        agent_id=AGENT, engine=demo.engine, workflow_outcome_evaluator=business_outcome, continual_learning=True
    )
    exe = Skillflow(agent_id=AGENT, engine=demo.engine, continual_learning=True)
    start = utcnow() - timedelta(hours=8)
    for sf, user in ((biz, BUSINESS), (exe, EXECUTION)):
        rep = simulate_runs(sf, 400, 7, user_id=user, start=start, step=timedelta(minutes=1))
        console.print(f"{user:>15}: {rep.stored} runs stored, {rep.with_identity} with a trajectory identity")
    conv = simulate_conversations(biz, 150, 7, user_id=BUSINESS, start=start + timedelta(seconds=30))
    console.print(
        f"{BUSINESS:>15}: {conv.runs} conversations (greeting, request, reads, confirmation, write) → "
        f"{conv.stored} procedure runs via record_conversation"
    )
    console.print(_class_table(demo.engine, AGENT, BUSINESS))

    demo.step("promotion cycle — same traffic, two outcome definitions")
    exec_report = _cycle(demo, EXECUTION)
    biz_report = _cycle(demo, BUSINESS)
    console.print(_report_table(biz_report))
    declined_biz = _by_sequence(demo.engine, BUSINESS, DECLINED)
    declined_exe = _by_sequence(demo.engine, EXECUTION, DECLINED)
    row_exe = _gate_row(exec_report, declined_exe.canonical_hash if declined_exe else None)
    row_biz = _gate_row(biz_report, declined_biz.canonical_hash if declined_biz else None)
    if row_exe and row_biz:
        console.print(
            Panel(
                f"search_direct_flight > book_reservation (the payment is sometimes declined; no tool raises)\n"
                f"  execution-only outcome: success rate {row_exe.success_rate:.2f} → {safe(row_exe.decision)}"
                f"{' (' + safe(row_exe.reason) + ')' if row_exe.reason else ''}\n"
                f"  business outcome evaluator: success rate {row_biz.success_rate:.2f} → {safe(row_biz.decision)}"
                f"{' (' + safe(row_biz.reason) + ')' if row_biz.reason else ''}",
                title="what the workflow_outcome_evaluator changes",
            )
        )
    skill = _skill_for(demo.engine, BUSINESS, CANCEL, (SkillStatus.SHADOW,))
    if skill is None:
        from skillflow.cli.errors import CliError

        raise CliError("no cancel-reservation skill waits in shadow after the cycle; the demo stops here")
    title = f"{safe(skill.name)} v{skill.version} — {safe(skill.status)}, role {safe(skill.injection_role)}"
    console.print(Panel(Syntax(visible(skill.content, multiline=True), "markdown", word_wrap=True), title=title))

    demo.step("new traffic → shadow evaluation (no LLM, no tool, no injection)")
    _traffic(biz, 150, 11, BUSINESS)
    drained = shadow_evaluation(ShadowEvaluationParams(database_url=recordable_url(db)))
    console.print(
        f"evaluated {drained.evaluated_runs} runs → {drained.records} shadow records "
        f"({drained.no_candidate} runs matched no shadow skill)"
    )
    with demo.engine.connect() as conn:
        readiness = get_shadow_readiness(conn, skill.id, demo.config)
    console.print(f"readiness of {safe(skill.name)} (advisory): {safe(readiness)}")
    console.print(
        "readiness never activates anything: a mismatch may be a valid alternative procedure; "
        "the reviewer reads the SKILL.md and this evidence and decides."
    )

    demo.step("review: activate at user authority (`skillflow activate ID --role user`)")
    from skillflow.cli.commands.lifecycle import activate_cmd

    console.print(f"$ skillflow activate {safe(skill.id[:12])} --role user --actor demo-reviewer")
    activate_cmd(skill_id=skill.id, role="user", actor="demo-reviewer", db=db, json=False)
    with demo.engine.connect() as conn:
        active = get_skill(conn, skill.id)
    console.print(
        f"{safe(active.name)} v{active.version}: {safe(active.status)}, role {safe(active.injection_role)}; "
        f"{_stamped(demo.engine, skill.id)} runs of its class stamped (suppressed from workflow retrieval)"
    )
    console.print(safe(_rule_line(demo.engine, BUSINESS), multiline=True))

    demo.step("a multi-turn conversation gets its skill just before the write; an unrelated request gets none")
    _conversation_step(biz)

    demo.step("injection: the request for a new matching query, per provider")
    query = "Please cancel my reservation K3X9PQ. My user id is lena_kim_4242."
    for provider in ("openai", "anthropic", "ollama"):
        prepared = biz.prepare(query, BUSINESS, provider=provider)
        roles = [m["role"] for m in prepared.request["messages"]]
        top = " + top-level system=" if "system" in prepared.request else ""
        scores = ", ".join(f"{s.name} {s.score:.2f}" for s in prepared.skills)
        console.print(safe(f"{provider:>9}: messages {roles}{top}; skills rendered: {scores or 'none'}"))
    prepared = biz.prepare(query, BUSINESS, provider="openai")
    text = prepared.request["messages"][-1]["content"]
    shown = Text(visible(text if len(text) < 1400 else text[:1400] + "\n…", multiline=True))
    console.print(Panel(shown, title="final user message (openai)"))

    demo.step("the agent runs with the skill in context; drift monitoring")
    sequence = tuple(CANCEL.split(" > "))
    hook = _hint_for(biz, BUSINESS, sequence)
    rep = _traffic(biz, 120, 21, BUSINESS, skills_for_query=hook)
    drift = drift_demotion(DriftDemotionParams(database_url=recordable_url(db)))
    mine = next((s for s in drift.skills if s.skill_id == skill.id), None)
    if mine is not None:
        console.print(
            f"{rep.stored} runs; {safe(skill.name)}: {safe(mine.decision)}, {mine.activations} activations, "
            f"rolling success {mine.rolling_success_rate} vs baseline {mine.baseline_success_rate}"
        )

    demo.step("a tool breaks: cancel_reservation starts failing → drift demotion")
    before = _stamped(demo.engine, skill.id)
    _traffic(biz, 80, 31, BUSINESS, skills_for_query=hook, break_tool=("cancel_reservation", 0))
    drift_demotion(DriftDemotionParams(database_url=recordable_url(db)))
    with demo.engine.connect() as conn:
        demoted = get_skill(conn, skill.id)
    released = [
        r
        for r in biz.retrieve_workflows_by_query(query, BUSINESS, k=1000, candidates=5000)
        if r["canonical_hash"] == skill.canonical_hash
    ]
    console.print(
        f"{safe(demoted.name)} v{demoted.version}: {safe(demoted.status)} — {safe(demoted.demotion_reason)}\n"
        f"stamps: {before} before → {_stamped(demo.engine, skill.id)} after; "
        f"{len(released)} raw runs of the class are visible to workflow retrieval again"
    )

    demo.step("the tool is fixed; post-demotion runs re-qualify the class → v2 (Distill now)")
    from flows.distill_class import DistillClassParams, distill_class

    _traffic(biz, 200, 41, BUSINESS)
    report = distill_class(
        DistillClassParams(
            database_url=recordable_url(db), agent_id=AGENT, user_id=BUSINESS, canonical_hash=skill.canonical_hash
        )
    )
    v2 = _skill_for(demo.engine, BUSINESS, CANCEL, (SkillStatus.SHADOW, SkillStatus.ACTIVE))
    row = _gate_row(report, skill.canonical_hash)
    if row is not None:
        console.print(f"class {safe(row.hash)}: {row.executions} post-demotion runs, success {row.success_rate:.2f}")
    if v2 is not None and v2.version > 1:
        carried = (demoted.demotion_reason or "") in v2.content
        note = "the v1 demotion reason is in its failure modes" if carried else "new version"
        console.print(
            f"{safe(v2.name)} v{v2.version}: {safe(v2.status)} ({note}); v1 stays {safe(demoted.status)} for history"
        )
    else:
        console.print(_report_table(report))

    demo.step("data quality (Great Expectations)")
    try:
        quality = data_quality(DataQualityParams(database_url=recordable_url(db)))
        console.print(
            f"passed={quality.passed} blocking failures={quality.blocking_failures} warnings={quality.warnings} "
            f"({len(quality.checks)} checks)\nHTML report: {Path(quality.html_path or '').resolve()}"
        )
    except Exception as exc:  # noqa: BLE001 - the flow fails on blocking findings; show them, keep going
        console.print(f"[red]data quality found blocking problems:[/] {type(exc).__name__}: {safe(exc)}")

    demo.step("status")
    _status(demo)
    console.print(
        f"[bold green]demo finished in {time.monotonic() - demo.started:.0f}s[/] — database {safe(shown_url(db))}"
    )


def _rule_line(engine: Engine, user_id: str) -> str:
    """The tenant's stored applicability rule, as the activation refit it (docs/guide/runtime.md)."""
    from skillflow.injection.applicability import load_rule

    with engine.connect() as conn:
        stored = load_rule(conn, AGENT, user_id)
    if stored is None:
        return "applicability rule: none yet (fixed threshold until the first cycle)"
    r = stored.rule
    floors = ", ".join(f"{k} ≥ {v:.3f}" for k, v in sorted(r.floors.items()))
    if r.opening_floors:  # higher floors for a request of one message with no call made yet
        floors += "; openings: " + ", ".join(f"{k} ≥ {v:.3f}" for k, v in sorted(r.opening_floors.items()))
    inner = r.inner
    return (
        f"applicability rule refit right after the activation: {len(r.skills)} live skill(s), "
        f"injects={r.injects} ({r.reason})\n  view {r.view}, margin {r.margin}, floors {floors or '-'}; inner CV "
        f"on the tenant's history: {inner.get('hits', 0)}/{inner.get('positives', 0)} hits, "
        f"{inner.get('wrong', 0)} wrong, {inner.get('false', 0)}/{inner.get('negatives', 0)} false injections"
    )


def _conversation_step(sf: Skillflow) -> None:
    """``prepare(..., conversation=...)`` just before cancel_reservation, then an unrelated request."""
    from skillflow.injection.conversation import Conversation

    def call(i: int, tool: str, args: dict[str, str], result: str) -> list[dict[str, Any]]:
        fn = {"name": tool, "arguments": json.dumps(args)}
        return [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": result},
        ]

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Hi there."},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "Please cancel my reservation K3X9PQ. My user id is lena_kim_4242."},
        *call(1, "get_user_details", {"user_id": "lena_kim_4242"}, '{"reservations": ["K3X9PQ"]}'),
        *call(2, "get_reservation_details", {"reservation_id": "K3X9PQ"}, '{"status": "active"}'),
        {"role": "assistant", "content": "I found it. Shall I go ahead with cancel_reservation?"},
        {"role": "user", "content": "yes, please proceed"},
    ]
    conv = Conversation.from_messages(messages)
    for m in messages:
        shown = m["content"] or " + ".join(c["function"]["name"] for c in m.get("tool_calls") or [])
        console.print(f"  [dim]{m['role']:>9}:[/] {safe(shown[:90])}")
    console.print("  [dim](next: the agent's model is about to call cancel_reservation)[/]")
    query = messages[-1]["content"]
    console.print(f'sf.prepare("{query}", "{BUSINESS}", conversation=Conversation.from_messages(messages))')
    _selection_line(sf, query, conv)
    for other in (
        "Can I bring my cat in the cabin? What is the baggage allowance for a pet?",
        "What's the weather going to be like in Paris tomorrow?",
    ):
        console.print(f'sf.prepare("{other}", "{BUSINESS}")')
        _selection_line(sf, other, None)


def _selection_line(sf: Skillflow, query: str, conv: Any) -> None:
    selection = sf.select_skills(query, BUSINESS, conv)
    prepared = sf.prepare(query, BUSINESS, conversation=conv)
    chosen = ", ".join(f"{s.name} v{s.version} (score {s.score:.3f})" for s in prepared.skills) or "no skill"
    console.print(safe(f"  → {chosen}; select_skills: state {selection.state}, reason '{selection.reason}'"))


def _status(demo: Demo) -> None:
    from skillflow.cli.commands.ops import status_cmd

    status_cmd(db=demo.db)


def run_corpus(db: str, corpus: Path) -> None:
    """τ-bench: the same turns with the execution outcome and with the episode reward as evaluator."""
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle
    from skillflow.lab.ingest.tau_bench import ingest_tau_bench

    user = "shared"
    demo = Demo(db, 3)
    rows: dict[str, dict[str | None, Any]] = {}
    _fresh_database(db)
    engine = demo.engine
    migrate(engine)
    for outcome in ("execution", "reward"):
        demo.step(f"τ-bench GPT-4o airline runs, {outcome} outcome → promotion cycle")
        agent = TAU_AGENTS[outcome]  # one database, a tenant per outcome (any backend)
        rep = ingest_tau_bench(corpus, Skillflow(agent_id=agent, engine=engine), outcome=outcome)
        console.print(
            f"{rep.runs} runs stored, one per procedure ({rep.with_identity} with a trajectory identity) as agent "
            f"{agent!r} in {safe(shown_url(db))}; outcomes {safe(dict(rep.outcomes))}"
        )
        console.print(_class_table(engine, agent, user, limit=10))
        report = promotion_cycle(PromotionCycleParams(database_url=recordable_url(db), agent_id=agent, force=True))[0]
        console.print(_report_table(report))
        with engine.connect() as conn:
            sequences = {c.canonical_hash: c.tool_sequence for c in aggregate_classes(conn, agent, user)}
        rows[outcome] = {sequences.get(r.canonical_hash): r for r in report.gates}
    demo.step("what the business outcome changes")
    lines = []
    for seq in ("book_reservation", "cancel_reservation"):
        ex, rw = rows["execution"].get(seq), rows["reward"].get(seq)
        if ex is not None and rw is not None:
            lines.append(
                f"{seq}: execution outcome {ex.success_rate:.2f} → "
                f"{'passes every gate' if all(ex.checks.values()) else 'fails a gate'} ({ex.decision}); "
                f"episode reward as evaluator {rw.success_rate:.2f} → {rw.decision} ({rw.reason})"
            )
    body = safe("\n".join(lines), multiline=True) or "classes not found"
    console.print(Panel(body, title="per-turn procedures on τ-bench"))
    console.print(f"[bold green]demo finished in {time.monotonic() - demo.started:.0f}s[/]")


def run(db: str, corpus: Path | None = None) -> None:
    # The shadow path it shows, whatever config the folder has; the flow runs record no password (they read the
    # database URL pinned here: docs/guide/ops.md, "Secrets").
    from skillflow.storage.engine import close_file

    with pinned_environment({**DEMO_SETTINGS, "SKILLFLOW_DATABASE_URL": db}):
        try:
            if corpus is not None:
                run_corpus(db, corpus)
            else:
                run_simulated(db)
        finally:  # the file alone is the whole database once the demo has exited (README: copy it, look around)
            close_file(db)
