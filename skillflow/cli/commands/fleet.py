"""A fleet of Prefect workers: ``skillflow deploy`` (deployments on a work pool) and ``skillflow automations``."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from typing import Annotated

import typer

from skillflow.cli.app import (
    DbOption,
    JsonOption,
    app,
    console,
    database_url,
    engine_for,
    err_console,
    fail,
    print_json,
    promotion_config,
)
from skillflow.cli.terminal import safe
from skillflow.storage.engine import recordable_url

PoolOption = Annotated[str, typer.Option("--pool", help="Work pool of the deployments (created if missing).")]
ControlPoolOption = Annotated[
    str | None,
    typer.Option("--control-pool", help="Separate pool for the parent flows (default: --pool); see docs/guide/ops.md."),
]
LimitOption = Annotated[
    int,
    typer.Option("--partition-limit", min=1, max=100_000, help="Partitions in flight across the fleet (global limit)."),
]
SourceOption = Annotated[
    str | None,
    typer.Option(
        "--source",
        help="Where workers find the code: the absolute directory of this project on every worker, or a git URL "
        "each run clones (default: this project directory, at the same path on every worker).",
    ),
]
BranchOption = Annotated[str | None, typer.Option("--branch", help="Branch of a git --source (default: its default).")]
CommitOption = Annotated[str | None, typer.Option("--commit", help="Commit SHA of a git --source to pin.")]
EnvOption = Annotated[
    list[str] | None,
    typer.Option("--env", help="KEY=VALUE for every run's environment (repeatable; no secrets: the UI shows them)."),
]


# A variable named like a secret: the deployment records --env values and the Prefect UI shows them.
_SECRET_NAME = re.compile(r"(?i)key|token|secret|passw(?:or)?d|credential|auth")


def _env(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            # never echo the argument: without its '=' it may be the secret itself
            fail("--env expects KEY=VALUE, got an empty KEY" if sep else "--env expects KEY=VALUE, got no '='")
        if _SECRET_NAME.search(key) or recordable_url(value) is None:
            fail(
                f"--env {key}: a secret would be recorded in the deployments, which the Prefect UI shows; "
                'set it in every worker\'s environment instead (docs/guide/ops.md, "Secrets")'
            )
        out[key] = value
    return out


def ensure_pool(name: str) -> bool:
    """Create a process work pool unless it exists; True when created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            return True


def ensure_limit(name: str, limit: int) -> None:
    """Create or update the global concurrency limit the partitions hold (strict in pool mode)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, limit)


def require_prefect_api(what: str) -> None:
    """One error line (exit 2) when no Prefect API is configured (environment or profile): Prefect would start a
    temporary server that nothing else reaches and that ends with the command."""
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        fail(
            f"{what}, and PREFECT_API_URL is unset: start one (`prefect server start`) and export "
            "PREFECT_API_URL=http://<host>:4200/api (docs/guide/ops.md)"
        )


@app.command("deploy")
def deploy_cmd(
    pool: PoolOption,
    db: DbOption = None,
    control_pool: ControlPoolOption = None,
    partition_limit: LimitOption = 8,
    env: EnvOption = None,
    source: SourceOption = None,
    branch: BranchOption = None,
    commit: CommitOption = None,
    automations: Annotated[bool, typer.Option(help="Also create the automations.")] = True,
    json: JsonOption = False,
) -> None:
    """Register every flow on a work pool ($PREFECT_API_URL) for `prefect worker start --pool NAME` machines."""
    from flows.serve import CodeSource, deploy_to_pool, missing_config_warning
    from tasks.automations import install_automations
    from tasks.fanout import FleetSettings

    require_prefect_api("skillflow deploy registers the flows on a running Prefect server")
    extra = _env(env)
    try:
        code = CodeSource.parse(source, branch, commit)
    except ValueError as exc:
        fail(str(exc))
    promotion_config()
    engine_for(db, migrate=True).dispose()  # the deploy step migrates; flow runs never do
    url = database_url(db)
    started = time.monotonic()
    # Prefect prints its own tables of the deployments on stdout: with --json they go to stderr, so stdout is JSON.
    with contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext():
        created = [p for p in {pool, control_pool or pool} if ensure_pool(p)]
        limit_name = FleetSettings().concurrency_limit
        ensure_limit(limit_name, partition_limit)
        names = deploy_to_pool(pool, url, control_pool, extra, code)
        installed = {k: str(v) for k, v in install_automations().items()} if automations else {}
    recorded = recordable_url(url) is not None  # else the workers' own SKILLFLOW_DATABASE_URL names the database
    result = {
        "pools_created": sorted(created),
        "deployments": names,
        "concurrency_limit": {"name": limit_name, "limit": partition_limit},
        "source": {"location": code.location, "git": code.git, "branch": code.branch, "commit": code.commit},
        "database_url_recorded": recorded,
        "automations": installed,
        "seconds": round(time.monotonic() - started, 2),
    }
    if json:
        print_json(result)
        return
    console.print(
        f"{len(names)} deployments on pool {safe(pool)}" + (f" (control: {safe(control_pool)})" if control_pool else "")
    )
    for name in names:
        console.print(f"  {safe(name)}")
    console.print(
        f"global concurrency limit {safe(limit_name)} = {partition_limit}; automations: {safe(', '.join(installed))}"
    )
    console.print(f"workers load the flows from {safe(code.describe())}")
    if (warning := missing_config_warning(code, extra)) is not None:
        err_console.print(f"[yellow]warning:[/yellow] {safe(warning)}", soft_wrap=True)
    if not recorded:
        console.print(
            "the database URL carries a password, which the deployments do not record (the UI would show it): "
            "set SKILLFLOW_DATABASE_URL in every worker's environment"
        )
    for name in dict.fromkeys((pool, control_pool or pool)):  # the parents run on the control pool
        console.print(f"start workers with: prefect worker start --pool {safe(name)}")


@app.command("automations")
def automations_cmd(json: JsonOption = False) -> None:
    """Create or update the shipped automations (demotion → re-qualify; backlog → shadow evaluation; a run
    without heartbeats → Crashed)."""
    from prefect.exceptions import ObjectNotFound

    from tasks.automations import install_automations

    require_prefect_api("skillflow automations creates the automations on a running Prefect server")
    try:
        installed = {k: str(v) for k, v in install_automations().items()}
    except ObjectNotFound:  # an automation names a deployment the server does not have
        fail(
            "the Prefect server has no skillflow deployments for the automations to start: register them first "
            "with `skillflow deploy --pool NAME` (or `skillflow serve`), which also creates the automations",
            1,
        )
    if json:
        print_json(installed)
    else:
        for name, ident in installed.items():
            console.print(f"{safe(name)}: {safe(ident)}")
