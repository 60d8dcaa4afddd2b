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
        "promotion-cycle", "promotion-partitions", "distill-class", "shadow-evaluation", "activation-review",
        "drift-demotion", "data-quality", "backfill-canonical-hashes",
    }  # fmt: skip
    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as client:
        cycle = client.read_deployment_by_name("promotion-cycle/promotion-cycle")
        assert cycle.global_concurrency_limit is not None and cycle.global_concurrency_limit.limit == 1
        assert cycle.concurrency_options is not None and cycle.concurrency_options.collision_strategy == "CANCEL_NEW"
        assert client.read_deployment_by_name("drift-demotion/drift-demotion").global_concurrency_limit is None


def test_pool_deployments_add_the_fan_out_children() -> None:
    from flows.serve import deployment_specs

    served = {s.name for s in deployment_specs("sqlite:///x.db")}
    pooled = {s.name: s for s in deployment_specs("sqlite:///x.db", children=True)}
    assert set(pooled) - served == {"drift-partitions", "shadow-drain"}
    assert {n for n, s in pooled.items() if s.compute} == {
        "promotion-partitions", "drift-partitions", "shadow-drain", "distill-class",
    }  # fmt: skip
    assert pooled["shadow-drain"].cron is None and pooled["shadow-drain"].stem == "shadow_evaluation"


def test_default_parameters_leave_required_fields_to_the_form(tmp_path: Path) -> None:
    deployments = {d.name: d for d in build_deployments("sqlite:///x.db")}
    review = deployments["activation-review"].parameters["params"]
    assert "skill_id" not in review and review["timeout_seconds"] == 3600
    assert deployments["data-quality"].parameters["params"]["report_dir"] == ".skillflow/reports"
    assert deployments["promotion-cycle"].parameters["params"]["dry_run"] is False


def test_serve_refuses_deployments_a_work_pool_runs(prefect_api: str, tmp_path: Path) -> None:
    """``skillflow serve`` after ``skillflow deploy`` overwrote the fleet's deployments, kept their work pools and
    dropped their pull steps: runs the serve process took crashed (``…/None``), runs a worker took loaded the flows
    from the wrong directory, and the deployments stayed broken after serve stopped (found on a real fleet by an
    outside audit). Serve now refuses, naming the pool, before it changes anything."""
    import threading

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.serve import ServeRefused, deploy_to_pool, serve_all
    from skillflow.cli.commands.fleet import ensure_pool

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    outcome: list[BaseException | None] = []
    with temporary_settings({PREFECT_API_URL: prefect_api}):
        ensure_pool("compute")
        deploy_to_pool("compute", url)

        def serve() -> None:  # settings are context-local: the thread enters them itself
            try:
                with temporary_settings({PREFECT_API_URL: prefect_api}):
                    serve_all(url)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - the assertion names it
                outcome.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "serve took the deployments over instead of refusing"
        assert len(outcome) == 1 and isinstance(outcome[0], ServeRefused), outcome
        assert "compute" in str(outcome[0]) and "skillflow deploy" in str(outcome[0])
        with get_client(sync_client=True) as client:
            cycle = client.read_deployment_by_name("promotion-cycle/promotion-cycle")
        assert cycle.work_pool_name == "compute" and cycle.pull_steps  # untouched
