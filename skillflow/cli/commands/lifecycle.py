"""``skillflow readiness | activate | reject | demote | review``: the reviewer's side of the lifecycle."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Annotated, Any, Literal

import typer
from sqlalchemy import Engine, select

from skillflow.cli.app import DbOption, JsonOption, app, console, database_url, engine_for, fail, print_json
from skillflow.cli.errors import FAILED, USAGE
from skillflow.cli.terminal import safe
from skillflow.kernel.config import load_promotion_config
from skillflow.lifecycle.decisions import ActivationRefused, activate_skill, demote_skill, reject_skill
from skillflow.lifecycle.readiness import get_shadow_readiness
from skillflow.promotion.redact import clean_reason
from skillflow.storage.engine import recordable_url
from skillflow.storage.schema import skillbox
from skillflow.storage.skills import InvalidTransition, SkillRecord, entered

DEPLOYMENT = "activation-review/activation-review"
IdArg = Annotated[str, typer.Argument(help="Skill id (or a unique prefix of at least 6 characters).")]
ActorOption = Annotated[str | None, typer.Option("--actor", help="Who decides (default: cli:<login name>).")]


def _clean_reason(value: str) -> str:
    """A ``--reason`` as it is stored (docs/SECURITY.md): reasons reach events, history and the distiller."""
    return clean_reason(value)


ReasonOption = Annotated[
    str,
    typer.Option(
        "--reason", help="Why (stored on the skill and in its event; cleaned and redacted).", callback=_clean_reason
    ),
]


def _actor(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


MIN_PREFIX = 6  # the characters of a skill id prefix every command takes (docs/guide/lifecycle.md)


def lookup_id(engine: Engine, skill_id: str) -> str | None:
    """The full id for an id or a unique prefix (at least 6 characters); None when unknown. A shorter prefix is bad
    input, said as such: "not found" of a skill that exists misled (docs/guide/lifecycle.md)."""
    with engine.connect() as conn:
        if conn.execute(select(skillbox.c.id).where(skillbox.c.id == skill_id)).first():
            return skill_id
        if len(skill_id) < MIN_PREFIX:
            fail(f"skill id prefix {skill_id} is too short: give at least {MIN_PREFIX} characters (or the whole id)")
        rows = conn.execute(select(skillbox.c.id).where(skillbox.c.id.startswith(skill_id, autoescape=True)).limit(2))
        found = [str(r[0]) for r in rows]
    if len(found) > 1:
        fail(f"skill id prefix {skill_id!r} is ambiguous")
    return found[0] if found else None


def resolve_id(engine: Engine, skill_id: str) -> str:
    """Like :func:`lookup_id` but exits with a message when the skill is unknown."""
    full = lookup_id(engine, skill_id)
    if full is None:
        fail(f"skill {skill_id} not found", FAILED)
    return str(full)


def _status(engine: Engine, skill_id: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(select(skillbox.c.status).where(skillbox.c.id == skill_id)).scalar_one())


def _done(skill: SkillRecord, json: bool, verb: str, before: str | None = None) -> None:
    """What the decision did; ``before`` the status read before it: the same status said "already", as a repeated
    command changes nothing (docs/guide/lifecycle.md)."""
    if json:
        print_json({"skill_id": skill.id, "status": skill.status, "injection_role": skill.injection_role})
        return
    head = f"already {safe(skill.status)}:" if before == skill.status else verb
    console.print(
        f"{head} [cyan]{safe(skill.name)}[/cyan] v{skill.version} ({safe(skill.id)}): {safe(skill.status)}, "
        f"{safe(skill.injection_role)}"
    )


@app.command("readiness")
def readiness_cmd(skill_id: IdArg, db: DbOption = None, json: JsonOption = False) -> None:
    """Advisory shadow readiness of a skill (observations, match and success rates, reasons). Changes nothing."""
    engine = engine_for(db)
    full = resolve_id(engine, skill_id)  # an unknown id is an error, not "not ready"
    with engine.connect() as conn:
        result = get_shadow_readiness(conn, full, load_promotion_config())
    if json:
        print_json(result)
        return
    head = "[green]ready[/green]" if result["ready"] else "[yellow]not ready[/yellow]"
    console.print(
        f"{head} (advisory): observations {result['observations']}, "
        f"trajectory match {result['trajectory_match_rate']:.2f}, matched success {result['matched_success_rate']:.2f}"
    )
    for reason in result["reasons"]:
        console.print(f"  - {safe(reason)}")


@app.command("activate")
def activate_cmd(
    skill_id: IdArg,
    role: Annotated[
        str | None,
        typer.Option("--role", help="Injection authority: user or developer (default: the skill's stored role)."),
    ] = None,
    revision: Annotated[
        int | None,
        typer.Option("--revision", min=1, help="The revision you reviewed: refused if the skill was edited since."),
    ] = None,
    actor: ActorOption = None,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """SHADOW → ACTIVE with the chosen role; re-checks the tools and backfills the class's stamps."""
    if role not in (None, "user", "developer"):
        fail("--role must be user or developer")
    engine = engine_for(db)
    full = resolve_id(engine, skill_id)
    chosen: Literal["user", "developer"] | None = (
        None if role is None else ("developer" if role == "developer" else "user")
    )
    before = _status(engine, full)
    try:
        skill = activate_skill(
            engine, full, chosen, actor=_actor(actor), config=load_promotion_config(), revision=revision
        )
    except ActivationRefused as exc:
        fail("activation refused: " + "; ".join(exc.reasons), FAILED)
        return
    except InvalidTransition as exc:
        fail(str(exc), FAILED)
        return
    _done(skill, json, "activated", before)
    decision = {"decision": f"activate_{skill.injection_role}", "injection_role": skill.injection_role}
    _announce(engine, "skillflow.skill.activated", skill, {**decision, "version": skill.version})


@app.command("reject")
def reject_cmd(
    skill_id: IdArg, reason: ReasonOption, actor: ActorOption = None, db: DbOption = None, json: JsonOption = False
) -> None:
    """SHADOW/CANDIDATE → REJECTED with a reason (the class can be re-distilled later as a new version)."""
    _retire(reject_skill, "rejected", skill_id, reason, actor, db, json)


@app.command("demote")
def demote_cmd(
    skill_id: IdArg, reason: ReasonOption, actor: ActorOption = None, db: DbOption = None, json: JsonOption = False
) -> None:
    """ACTIVE → DEMOTED with a reason; its runs are released back to workflow retrieval."""
    _retire(demote_skill, "demoted", skill_id, reason, actor, db, json)


def _retire(fn: Any, verb: str, skill_id: str, reason: str, actor: str | None, db: str | None, json: bool) -> None:
    engine = engine_for(db)
    full = resolve_id(engine, skill_id)
    before = _status(engine, full)
    try:
        skill = fn(engine, full, reason, actor=_actor(actor))
    except (InvalidTransition, ValueError) as exc:
        fail(str(exc), FAILED)  # a refused transition, as the error layer maps the project's own refusals
        return
    _done(skill, json, verb, before)
    decision = {"rejected": "reject", "demoted": "demote"}[verb]
    _announce(engine, f"skillflow.skill.{verb}", skill, {"decision": decision, "version": skill.version})


def _announce(
    engine: Engine, event: str, skill: SkillRecord, payload: dict[str, Any] | Callable[[Any], dict[str, Any]]
) -> None:
    """The transition's Prefect event, when a Prefect API is configured (docs/guide/ops.md, events table), under
    the id of the lifecycle row that moved the skill into its status. A repeated command sends it again under
    that id — the server keeps one, so an event lost to a crash or an unreachable API arrives the second time —
    unless that row is another kind of decision's (a repeated ``activate`` of a rolled-back skill sends nothing) or
    no decision's at all (the version a rollback replaced: a rollback sends ``rolled_back`` only).

    ``payload`` may be a function of that row (a rollback's names what it replaced). A demotion drift made is
    drift's event — its id (:func:`tasks.events.drift_demotion_id`) and payload — so a ``demote`` of a skill drift
    already demoted sends the event drift sent, not a second one."""
    from tasks.events import drift_demotion_id, drift_demotion_payload, drift_run_of, emit_decision, lifecycle_event_id

    with engine.connect() as conn:
        row = entered(conn, skill.id, skill.status)
    if row is None or row.event != event.rsplit(".", 1)[-1]:
        return
    drift_run = drift_run_of(row)
    if drift_run is not None:
        emit_decision(event, skill, drift_demotion_payload(skill.version), drift_demotion_id(skill.id, drift_run))
        return
    if not (row.details or {}).get("decision"):
        return  # no decision's row: a rollback's demotion of the version it replaced, which sends no event
    emit_decision(event, skill, payload(row) if callable(payload) else payload, lifecycle_event_id(row.id))


_REVIEW_PAGE = 200  # runs per request (the Prefect server's default page)


def _open_review(skill_id: str) -> Any:
    """The open review run of ``skill_id`` on the Prefect server (Scheduled, Pending, Running or Paused, oldest
    first), or None: none, or the server could not say (starting one then reports why). The run a suspended review
    schedules at its timeout (``expires``) is not a review. Two commands at the same instant both find none
    (:func:`_start_review` hands them one run)."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    open_states = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.PAUSED]
    try:
        with get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name(DEPLOYMENT)
            offset = 0
            while True:  # the filter cannot match a parameter, so every open run is read, a page at a time
                runs = client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                    flow_run_filter=FlowRunFilter(
                        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=open_states))
                    ),
                    sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                    limit=_REVIEW_PAGE,
                    offset=offset,
                )
                for run in runs:
                    params = (run.parameters or {}).get("params") or {}
                    if isinstance(params, dict) and params.get("skill_id") == skill_id and not params.get("expires"):
                        return run
                if len(runs) < _REVIEW_PAGE:
                    return None
                offset += len(runs)
    except Exception:  # noqa: BLE001 - no deployment, no server: run_deployment says which
        return None


def _start_review(engine: Engine, skill_id: str, params: dict[str, Any]) -> Any:
    """Start a review run, idempotent on the skill's state (its status, revision and last change): two commands
    that both found no open review (:func:`_open_review`) at one instant are handed one run. A review of that state
    that has ended (answered, timed out, cancelled, crashed) is no reason to refuse a new one: the key then names
    the ended run, and so on along the chain of ended runs."""
    from prefect.deployments import run_deployment

    from skillflow.lifecycle.revisions import current_revision

    with engine.connect() as conn:
        row = conn.execute(select(skillbox.c.status, skillbox.c.updated_at).where(skillbox.c.id == skill_id)).one()
        key = f"skillflow-review:{skill_id}:{row.status}:{current_revision(conn, skill_id)}:{row.updated_at}"
    while True:
        run: Any = run_deployment(DEPLOYMENT, parameters=params, timeout=0, idempotency_key=key)  # a FlowRun
        if run.state is None or not run.state.is_final():
            return run
        key = f"{key}:{run.id}"


@app.command("review")
def review_cmd(
    skill_id: IdArg,
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds before an unanswered review keeps shadow.")] = 3600,
    db: DbOption = None,
    json: JsonOption = False,
) -> None:
    """Start the activation-review flow for a skill on the configured Prefect server (or say how to)."""
    engine = engine_for(db)
    full = resolve_id(engine, skill_id)
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    # A password stays out of the run's parameters (the UI shows them): the run then reads its environment's URL.
    params = {
        "params": {"database_url": recordable_url(database_url(db)), "skill_id": full, "timeout_seconds": timeout}
    }
    if not api:  # no review started: exit 2, as serve, deploy and automations do (docs/RELIABILITY.md)
        hint = (
            "no Prefect server is configured (PREFECT_API_URL is unset), so no review started. Start one and the "
            "deployments with `prefect server start` and `skillflow serve`, export "
            f"PREFECT_API_URL=http://127.0.0.1:4200/api, then run `skillflow review {full}` again, or start it from "
            f"the UI (deployment {DEPLOYMENT}). To decide from the terminal instead: `skillflow readiness {full}`, "
            f"`skillflow activate {full} [--role developer]` or `skillflow reject {full} --reason ...`."
        )
        if json:
            print_json({"started": False, "skill_id": full, "hint": hint})
            raise typer.Exit(USAGE)
        fail(hint)
    ui = str(api).rstrip("/").removesuffix("/api")
    current = _open_review(full)
    if current is not None:  # a second form for one skill would only end "not awaiting review" once one is answered
        if json:
            print_json({"started": False, "already_open": True, "skill_id": full, "flow_run_id": str(current.id)})
            return
        console.print(
            safe(f"a review of {full} is already open: flow run {current.id} ({current.state_name}) — answer the "
                 f"form at {ui}/runs/flow-run/{current.id}")
        )  # fmt: skip
        return
    try:
        run = _start_review(engine, full, params)
    except Exception as exc:  # noqa: BLE001 - any API failure becomes one readable line
        if type(exc).__name__ == "ObjectNotFound":  # the server answers, the deployment is not on it
            fail(
                f"could not start {DEPLOYMENT}: the Prefect server at {api} has no such deployment; register them "
                "with `skillflow serve` (this machine) or `skillflow deploy --pool …` (workers), then run this again",
                FAILED,
            )
        fail(f"could not start {DEPLOYMENT}: {type(exc).__name__}: {exc}", FAILED)
        return
    if json:
        print_json({"started": True, "skill_id": full, "flow_run_id": str(run.id)})
        return
    console.print(safe(f"review started: flow run {run.id} — answer the form at {ui}/runs/flow-run/{run.id}"))
