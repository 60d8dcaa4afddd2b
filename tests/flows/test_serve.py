"""Deployments in code, applied to a REAL local Prefect server started by the test and read back via the API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.serve import FLOW_STEMS, available_flows, build_deployments, deployment_name
from skillflow.cli.uicheck import local_prefect_server
from skillflow.kernel.config import load_schedules


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with local_prefect_server(tmp_path_factory.mktemp("prefect-server"), timeout=120) as api_url:
        yield api_url


pytestmark = pytest.mark.prefect


def test_every_flow_is_present() -> None:
    assert [stem for stem, _ in available_flows()] == list(FLOW_STEMS)


def test_deployments_are_created_with_schedules_and_parameters(prefect_api: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = f"sqlite:///{tmp_path / 'served.db'}"
    schedules = load_schedules()
    with temporary_settings({PREFECT_API_URL: prefect_api}):
        for deployment in build_deployments(url):
            deployment.apply()
        with get_client(sync_client=True) as client:
            for stem, flow in available_flows():
                name = deployment_name(stem)
                assert flow.name == name  # stem = function = flow name = deployment name
                dep = client.read_deployment_by_name(f"{name}/{name}")
                params = dep.parameters["params"]
                assert params["database_url"] == url
                assert "params" in dep.parameter_openapi_schema["properties"]  # rendered as a form
                crons = [s.schedule.cron for s in dep.schedules]  # type: ignore[union-attr]
                if schedules.get(name):
                    assert crons == [schedules[name]], name
                    assert all(s.active for s in dep.schedules)
                else:
                    assert crons == [], f"{name} is manual-only"
                assert "skillflow" in dep.tags
    by_name = {deployment_name(s): f for s, f in available_flows()}
    assert set(by_name) == {
        "promotion-cycle", "distill-class", "shadow-evaluation", "activation-review", "drift-demotion",
        "data-quality", "backfill-canonical-hashes",
    }  # fmt: skip


def test_default_parameters_leave_required_fields_to_the_form(tmp_path: Path) -> None:
    deployments = {d.name: d for d in build_deployments("sqlite:///x.db")}
    review = deployments["activation-review"].parameters["params"]
    assert "skill_id" not in review and review["timeout_seconds"] == 3600
    assert deployments["data-quality"].parameters["params"]["report_dir"] == ".skillflow/reports"
    assert deployments["promotion-cycle"].parameters["params"]["dry_run"] is False
