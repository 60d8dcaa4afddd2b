"""The browser tour of ``make ui-check``: what to open, what to click, what to assert, what to photograph.

:func:`tour` drives one Chromium tab (:mod:`skillflow.cli.uibrowser`) through the served deployments of a
local Prefect server (:mod:`skillflow.cli.uicheck` starts both) and records screenshots and findings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillflow.cli.uibrowser import Page


def run_deployment_now(api_url: str, name: str, parameters: dict[str, Any]) -> Any:
    """Create a flow run of deployment ``name`` through the API; return its id without waiting."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        run: Any = run_deployment(name, parameters=parameters, timeout=0)
    return run.id


def trigger_and_wait(api_url: str, name: str, parameters: dict[str, Any] | None = None, timeout: float = 300.0) -> Any:
    """Create a flow run of deployment ``name`` through the API and wait for a final state."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        run: Any = run_deployment(name, parameters=parameters, timeout=0)
        deadline = time.monotonic() + timeout
        with get_client(sync_client=True) as client:
            while True:
                run = client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    return run
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flow run {run.id} not finished after {timeout:.0f}s (state {run.state})")
                time.sleep(1)


def wait_for_state(api_url: str, run_id: Any, done: tuple[str, ...], timeout: float = 300.0) -> Any:
    """Poll a flow run until its state name is one of ``done`` (or it is final)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    deadline = time.monotonic() + timeout
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run_id)
            if run.state is not None and (run.state.name in done or run.state.is_final()):
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"flow run {run_id} not in {done} after {timeout:.0f}s (state {run.state})")
            time.sleep(1)


def artifacts_of(api_url: str, run_id: Any) -> dict[str, Any]:
    """The keyed artifacts of one flow run, by key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    return {a.key: a for a in found if a.key}


def shadow_skill(database_url: str) -> tuple[str, str]:
    """The (id, name) of the SHADOW skill the cycle landed for the seeded agent."""
    from skillflow.storage.engine import make_engine
    from skillflow.storage.skills import list_skills

    engine = make_engine(database_url)
    with engine.connect() as conn:
        skills = list_skills(conn, agent_id="ui-check", statuses=["shadow"])
    engine.dispose()
    if not skills:
        raise RuntimeError("the promotion cycle landed no SHADOW skill for agent ui-check")
    return skills[0].id, skills[0].name


def resume(api_url: str, run_id: Any, answer: dict[str, Any]) -> None:
    """Answer a paused run's form through the API (what the Resume button sends)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        result = client.resume_flow_run(run_id, run_input=answer)
    if str(getattr(result.status, "value", result.status)).upper() != "ACCEPT":
        raise RuntimeError(f"resume of {run_id} not accepted: {result.details}")


FORMS = ("promotion-cycle", "shadow-evaluation", "drift-demotion", "backfill-canonical-hashes")


@dataclass
class Tour:
    """What the check saw: screenshot paths, run ids and states, and the findings it asserts on."""

    out: Path
    shots: dict[str, str] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    findings: dict[str, Any] = field(default_factory=dict)

    def shoot(self, page: Page, name: str, full_page: bool = False) -> None:
        self.shots[name] = str(page.screenshot(self.out / f"{name}.png", full_page=full_page))


def deployment_ids(api_url: str) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        return {d.name: str(d.id) for d in client.read_deployments()}


# For each form field labelled Agent Id / User Id: does it offer a "None" variant (a str | None field)?
ID_FIELDS_JS = """[...document.querySelectorAll('.schema-form-property')]
  .filter(e => /^(Agent Id|User Id)/.test(e.innerText.trim()))
  .map(e => ({label: e.innerText.trim().split('\\n')[0],
              none: [...e.querySelectorAll('button')].some(b => b.innerText.trim() === 'None')}))"""
REVIEW_LINK_JS = "([...document.querySelectorAll('a')].find(a => a.innerText.includes('review artifact')) || {}).href"


def tour(seen: Tour, page: Page, api_url: str, database_url: str) -> None:
    """Deployments, Run forms, a cycle's logs, a paused review and its form, the charted artifacts."""
    ui = api_url.removesuffix("/api")
    # 1. The deployments list, then each Run form: optional ids must open on a plain text input.
    page.goto(f"{ui}/deployments", "promotion-cycle")
    seen.shoot(page, "01-deployments")
    ids = deployment_ids(api_url)
    for name in FORMS:
        page.goto(f"{ui}/deployments/deployment/{ids[name]}/run", "Parameters")
        seen.findings[f"form:{name}:id-fields"] = page.evaluate(ID_FIELDS_JS)
        seen.shoot(page, f"02-run-form-{name}")
    # 2. A promotion cycle: its run name and the INFO stage logs in the Logs tab (the run page's first tab).
    params = {"params": {"database_url": database_url, "force": True}}
    cycle = trigger_and_wait(api_url, "promotion-cycle/promotion-cycle", params)
    seen.runs["promotion-cycle"], seen.states["promotion-cycle"] = str(cycle.id), cycle.state.name
    seen.findings["promotion-cycle:name"] = cycle.name
    page.goto(f"{ui}/runs/flow-run/{cycle.id}", "landed")
    seen.findings["promotion-cycle:logs"] = [ln for ln in page.body_text().splitlines() if "landed" in ln][:3]
    seen.shoot(page, "03-promotion-cycle-logs")
    # 3. An activation review paused on its form: the Resume modal with the skill name and the artifact link.
    skill_id, skill_name = shadow_skill(database_url)
    params = {"params": {"database_url": database_url, "skill_id": skill_id}}
    review = run_deployment_now(api_url, "activation-review/activation-review", params)
    paused = wait_for_state(api_url, review, ("Paused", "Suspended"))
    seen.runs["activation-review"], seen.states["activation-review"] = str(review), paused.state.name
    seen.findings["activation-review:name"] = paused.name
    page.goto(f"{ui}/runs/flow-run/{review}", "Resume")
    seen.shoot(page, "04-review-paused")
    page.click_text("button", "Resume")
    page.wait_text("activate_user")
    text, link = page.body_text(), page.evaluate(REVIEW_LINK_JS)
    seen.findings["review-form:skill-name"] = skill_name in text
    seen.findings["review-form:artifact-link"] = link
    seen.findings["review-form:descriptions"] = "go live as user-level guidance" in text
    seen.shoot(page, "05-review-form")
    # 4. Follow the form's link to the review artifact: does the browser really decode and show the chart?
    if link:
        page.goto(str(link), skill_name)
        seen.findings["review-artifact:images"] = page.image_sources()
        seen.shoot(page, "06-review-artifact-chart")
    # 5. Answer the form through the API, then a drift check of the now ACTIVE skill and its charted report.
    answer = {"decision": "activate_user", "reviewer": "ui-check", "reason": "ui-check", "skill_md": ""}
    resume(api_url, review, answer)
    seen.states["activation-review"] = wait_for_state(api_url, review, ()).state.name
    params = {"params": {"database_url": database_url}}
    drift = trigger_and_wait(api_url, "drift-demotion/drift-demotion", params)
    seen.runs["drift-demotion"], seen.states["drift-demotion"] = str(drift.id), drift.state.name
    drift_art = artifacts_of(api_url, drift.id)
    if "drift-report" in drift_art:
        page.goto(f"{ui}/artifacts/artifact/{drift_art['drift-report'].id}", "Drift")
        seen.findings["drift-report:images"] = page.image_sources()
        seen.shoot(page, "07-drift-report-chart")
