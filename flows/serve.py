"""Every skillflow flow as a deployment, defined in code: cron from config/skillflow.toml, params as a form.

``deployment_specs`` defines every deployment once; ``build_deployments(database_url)`` turns them into
``RunnerDeployment`` objects that ``serve_all`` serves from this process (``skillflow serve`` / ``make serve``),
and ``deploy_to_pool`` registers them on a work pool for a fleet of workers (``skillflow deploy``). A flow with no cron
in ``[schedules]`` is manual-only (trigger it from the UI or ``prefect deployment run``).
"""

from __future__ import annotations

import importlib
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from skillflow.kernel.config import CONFIG_PATH_ENV, HOME_ENV, PROJECT_CONFIG, PromotionConfig, Settings, load_schedules
from skillflow.storage.engine import recordable_url
from tasks.automations import TAG

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # where this package is: a checkout, or site-packages


def _checkout_around(here: Path) -> Path | None:
    return next((f for f in (here, *here.parents) if (f / "flows" / "serve.py").is_file()), None)


def project_directory() -> Path:
    """The checkout ``skillflow deploy`` runs in: the nearest directory at or above the working directory that
    holds ``flows/serve.py``; else this package's own directory when it is a checkout (an editable install, it
    holds ``config/``). An installed package's directory is never the default: runs changed into site-packages read
    no ``config/skillflow.toml`` there (docs/guide/ops.md, "Where workers find the code")."""
    here = Path.cwd()
    if (found := _checkout_around(here)) is not None:
        return found
    if (PROJECT_ROOT / "config").is_dir():
        return PROJECT_ROOT
    raise ValueError(
        f"{here} is not inside a skillflow checkout, and the installed package's directory ({PROJECT_ROOT}) is "
        "not one: run this from the checkout the workers hold, or give --source (that directory on the workers, "
        "or a git repository)"
    )


# File stem = flow function name; deployment name = the stem with hyphens = the flow name.
FLOW_STEMS = (
    "promotion_cycle",
    "promotion_partitions",
    "distill_class",
    "shadow_evaluation",
    "activation_review",
    "drift_demotion",
    "data_quality",
    "backfill_canonical_hashes",
)


def deployment_name(stem: str) -> str:
    return stem.replace("_", "-")


def available_flows() -> list[tuple[str, Any]]:
    """``(stem, flow)`` for each flow module that exists (a missing module is skipped, any other error raises)."""
    found = []
    for stem in FLOW_STEMS:
        try:
            module = importlib.import_module(f"flows.{stem}")
        except ModuleNotFoundError as exc:
            if exc.name == f"flows.{stem}":
                continue
            raise
        found.append((stem, getattr(module, stem)))
    return found


def params_model(flow: Any) -> type[BaseModel]:
    """The pydantic model of the flow's single ``params`` parameter (``X | None`` unwrapped)."""
    hint = typing.get_type_hints(flow.fn)["params"]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if not (isinstance(hint, type) and issubclass(hint, BaseModel)):
        raise TypeError(f"flow {flow.name}: params must be a pydantic model, got {hint!r}")
    return hint


def default_parameters(model: type[BaseModel], database_url: str | None) -> dict[str, Any]:
    """Every field with a default (required ones are left for the UI form or ``--params``), plus the URL
    (``None``: the run reads ``$SKILLFLOW_DATABASE_URL`` where it runs)."""
    values = {
        name: field.get_default(call_default_factory=True)
        for name, field in model.model_fields.items()
        if not field.is_required()
    }
    values["database_url"] = database_url
    return typing.cast(dict[str, Any], to_jsonable_python(values))


# Extra deployments a work pool needs: (flow stem, deployment name) of the fan-out children. Served flows run
# their fan-out in-process and never use them (docs/guide/ops.md, "Fan-out").
CHILD_DEPLOYMENTS = (("drift_demotion", "drift-partitions"), ("shadow_evaluation", "shadow-drain"))
# Never twice at once: a second run while one is active is cancelled (CANCEL_NEW), not queued.
SINGLETONS = ("promotion-cycle",)
# Flows that do a partition's work; on a split fleet they go to the compute pool, the rest to the control pool.
COMPUTE = ("promotion-partitions", "drift-partitions", "shadow-drain", "distill-class")


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment, defined once for ``skillflow serve`` and ``skillflow deploy``."""

    stem: str
    name: str
    flow: Any
    cron: str | None
    parameters: dict[str, Any]
    description: str | None
    singleton: bool
    compute: bool


def deployment_specs(database_url: str | None = None, children: bool = False) -> list[DeploymentSpec]:
    """Every available flow's deployment (and, for a work pool, the fan-out children's)."""
    url = recordable_url(database_url or Settings().database_url)  # a password stays out of the UI
    schedules = load_schedules()
    flows = dict(available_flows())
    pairs = [(stem, deployment_name(stem)) for stem in flows]
    if children:
        pairs += [(stem, name) for stem, name in CHILD_DEPLOYMENTS if stem in flows]
    specs = []
    for stem, name in pairs:
        flow, model = flows[stem], params_model(flows[stem])
        specs.append(
            DeploymentSpec(
                stem=stem,
                name=name,
                flow=flow,
                cron=(schedules.get(name) or None) if name == deployment_name(stem) else None,
                parameters={"params": default_parameters(model, url)},
                description=(flow.description or model.__doc__ or "").strip() or None,
                singleton=name in SINGLETONS,
                compute=name in COMPUTE,
            )
        )
    return specs


def concurrency(spec: DeploymentSpec) -> Any:
    from prefect.client.schemas.objects import ConcurrencyLimitConfig

    return ConcurrencyLimitConfig(limit=1, collision_strategy="CANCEL_NEW") if spec.singleton else None


def build_deployments(database_url: str | None = None) -> list[Any]:
    """One ``RunnerDeployment`` per available flow, with its cron (or none) and default parameters."""
    return [
        spec.flow.to_deployment(
            name=spec.name,
            cron=spec.cron,
            parameters=spec.parameters,
            tags=[TAG],
            description=spec.description,
            concurrency_limit=concurrency(spec),
        )
        for spec in deployment_specs(database_url)
    ]


# A source with a URL scheme, an scp-like ``user@host:path`` or a ``.git`` ending is a git repository; any other
# value is the directory every worker machine holds this project at.
_GIT_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)|\.git/?$", re.IGNORECASE)


@dataclass(frozen=True)
class CodeSource:
    """Where a worker finds the flows' code for each run: a directory it holds, or a git repository it clones.

    ``location`` is what the deployment records (the UI shows it): a directory path, or a repository URL, which
    must not carry credentials (give workers an SSH key or a credential helper instead).
    """

    location: str
    git: bool = False
    branch: str | None = None
    commit: str | None = None

    @classmethod
    def parse(cls, source: str | None = None, branch: str | None = None, commit: str | None = None) -> CodeSource:
        """``source``: None (this project directory), an absolute directory, or a git URL; ValueError names the fix."""
        if source is None or not source.strip():
            if branch or commit:
                raise ValueError("--branch and --commit need a git repository as --source")
            return cls(str(project_directory()))
        source = source.strip()
        if not _GIT_URL.search(source):
            if branch or commit:
                raise ValueError(f"--branch and --commit need a git repository as --source, not {source!r}")
            if not Path(source).is_absolute():
                raise ValueError(f"--source {source!r}: a directory on the workers must be an absolute path")
            return cls(source)
        if branch and commit:
            raise ValueError("give --branch or --commit, not both")
        if branch is not None and (not branch.strip() or branch.startswith("-")):
            raise ValueError(f"--branch {branch!r} is not a branch name")
        if commit is not None and not re.fullmatch(r"[0-9a-fA-F]{7,40}", commit):
            raise ValueError(f"--commit {commit!r} is not a commit SHA (7 to 40 hex digits)")
        parsed = urlsplit(source) if "://" in source else None
        if parsed is not None and (parsed.password or (parsed.username and parsed.scheme in ("http", "https"))):
            raise ValueError(
                "--source carries credentials: the deployment (and the UI) would show them; "
                "give the workers an SSH key or a git credential helper instead"
            )
        return cls(source, git=True, branch=branch, commit=commit)

    def storage(self, local: Path | None = None) -> Any:
        """The Prefect storage ``from_source`` takes: it loads the flows at deploy time (from ``local``, by default
        this checkout) and writes the pull step."""
        from prefect.runner.storage import GitRepository, LocalStorage

        if self.git:
            return GitRepository(url=self.location, branch=self.branch, commit_sha=self.commit, pull_interval=None)
        worker_directory = self.location

        class WorkerCheckout(LocalStorage):
            """The flows are loaded from this checkout; each run changes into the workers' own."""

            def to_pull_step(self) -> dict[str, Any]:
                return {"prefect.deployments.steps.set_working_directory": {"directory": worker_directory}}

        # The flows load here at deploy time: this checkout, else the installed package (for a --source directory).
        return WorkerCheckout(path=str(local or _checkout_around(Path.cwd()) or PROJECT_ROOT))

    def describe(self) -> str:
        if not self.git:
            return f"the directory {self.location} on every worker"
        ref = f" at {self.commit}" if self.commit else f" (branch {self.branch})" if self.branch else ""
        return f"a clone of {self.location}{ref} per run (workers need git)"


def missing_config_warning(source: CodeSource, env: Mapping[str, str]) -> str | None:
    """Why the runs on the workers may read the built-in defaults, or None: ``source`` is a directory on this
    machine with no ``config/skillflow.toml`` in it or above, and the runs' ``env`` names no config file. A git
    source, or a directory this machine does not hold, cannot be checked here."""
    if source.git or CONFIG_PATH_ENV in env or HOME_ENV in env:
        return None
    folder = Path(source.location)
    if not folder.is_dir() or any((f / PROJECT_CONFIG).is_file() for f in (folder, *folder.parents)):
        return None
    shadow = PromotionConfig().require_shadow
    landing = "in SHADOW" if shadow else "ACTIVE without review"
    return (
        f"{folder} holds no {PROJECT_CONFIG}: runs that change into it read the built-in defaults "
        f"(require_shadow={shadow}: new skills land {landing}) unless the workers' environment sets "
        f"{CONFIG_PATH_ENV} or {HOME_ENV}; add the file there, or pass --env {CONFIG_PATH_ENV}=PATH"
    )


def deploy_to_pool(
    pool: str,
    database_url: str | None = None,
    control_pool: str | None = None,
    env: dict[str, str] | None = None,
    source: CodeSource | None = None,
) -> list[str]:
    """Register every deployment (children included) on work pools; their full names.

    Workers run them with ``prefect worker start --pool NAME``. Each run's pull step changes into ``source``'s
    directory (by default this project's, so every worker needs it at the same path) or clones its git
    repository (docs/guide/ops.md, "Where workers find the code"). ``env`` becomes the runs' environment on top
    of the worker's.
    """
    from prefect import flow as prefect_flow

    url = database_url or Settings().database_url
    shown = recordable_url(url)
    # Without a recordable URL the runs read the workers' own $SKILLFLOW_DATABASE_URL (it holds the password).
    variables = {"env": {**({"SKILLFLOW_DATABASE_URL": shown} if shown else {}), **(env or {})}}
    storage = (source or CodeSource.parse()).storage()
    names = []
    for spec in deployment_specs(url, children=True):
        loaded: Any = prefect_flow.from_source(source=storage, entrypoint=f"flows/{spec.stem}.py:{spec.stem}")
        loaded.deploy(
            name=spec.name,
            work_pool_name=pool if spec.compute or not control_pool else control_pool,
            job_variables=variables,
            cron=spec.cron,
            parameters=spec.parameters,
            tags=[TAG],
            description=spec.description,
            concurrency_limit=concurrency(spec),
            print_next_steps=False,
            ignore_warnings=True,
        )
        names.append(f"{spec.flow.name}/{spec.name}")
    return names


def run_log_level() -> str:
    """The log level flow runs served from here use: ``$SKILLFLOW_FLOW_LOG_LEVEL`` or INFO."""
    level = os.environ.get("SKILLFLOW_FLOW_LOG_LEVEL", "INFO").strip().upper()
    return level if level in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"} else "INFO"


class ServeRefused(RuntimeError):
    """The server's deployments of these flows run on a work pool (``skillflow deploy``): serving would break them."""


def pooled(deployments: list[Any]) -> dict[str, str]:
    """Deployment full name → work pool, for the deployments the server already runs on a work pool."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    out: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        for deployment in deployments:
            full = f"{deployment.flow_name}/{deployment.name}"
            try:
                found = client.read_deployment_by_name(full)
            except ObjectNotFound:
                continue
            if found.work_pool_name:
                out[full] = found.work_pool_name
    return out


def serve_all(database_url: str | None = None) -> None:
    """Serve every deployment from this process until interrupted (runs execute here).

    Refused (:class:`ServeRefused`) when the server runs these deployments on a work pool: serving would replace
    them while keeping their pool, so a worker and this process would both take their runs, neither able to load
    the flows as the other set them up (docs/guide/ops.md)."""
    from prefect import serve

    url = database_url or Settings().database_url
    deployments = build_deployments(url)
    if taken := pooled(deployments):
        pools = ", ".join(sorted(set(taken.values())))
        raise ServeRefused(
            f"{len(taken)} of these deployments run on work pool(s) {pools} (`skillflow deploy`): serving them here "
            "would break them. Run workers on the pool instead (`prefect worker start --pool NAME`), or delete the "
            "deployments first (`prefect deployment delete NAME`) to serve from this process"
        )
    # A run whose params omit database_url (``--params`` replaces the whole model) falls back to this URL.
    os.environ["SKILLFLOW_DATABASE_URL"] = url
    # Runs execute in child processes that inherit this environment: a quiet shell (PREFECT_LOGGING_LEVEL=WARNING,
    # as `make` exports for tests and the demo) would leave every flow run's Logs tab empty. Stages log counts
    # and ids at INFO; SKILLFLOW_FLOW_LOG_LEVEL chooses another level.
    os.environ["PREFECT_LOGGING_LEVEL"] = run_log_level()
    # pause_on_shutdown=False: stopping `skillflow serve` must not pause the schedules.
    serve(*deployments, pause_on_shutdown=False)
