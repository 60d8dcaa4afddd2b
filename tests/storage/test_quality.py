"""Data quality: every planted defect is caught by the right check with the right severity; clean data passes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text, update

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import InjectionRole, SkillStatus, Step
from skillflow.lifecycle.transfer import import_class_key
from skillflow.quality import QualityOptions, QualityReport, latest, run_and_store
from skillflow.quality.runner import new_context, run_quality
from skillflow.runtime import Skillflow
from skillflow.storage.schema import shadow_observations, skill_events, skillbox, workflow_memory
from skillflow.storage.skills import insert_skill, transition

NOW = datetime.now(UTC)


def signature_hash(units: list[dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(units, sort_keys=True).encode()).hexdigest()


@pytest.fixture(scope="module")
def gx_context() -> Any:
    return new_context()


def _steps(*tools: str) -> list[Step]:
    return [Step(tool=t, arguments={"order_id": f"A{i}"}, result={"ok": True}) for i, t in enumerate(tools)]


def _seed_clean(engine: Engine) -> dict[str, str]:
    """A realistic clean database: runs, a run without tools, a reviewed developer skill, shadow records."""
    sf = Skillflow(
        agent_id="a1", engine=engine, config=PromotionConfig(require_shadow=True, shadow_evaluation_enabled=True)
    )
    sf.register_tools(["lookup_order", "issue_refund"])
    ids = [
        sf.record_run(f"refund order {i}", "u1", _steps("lookup_order", "issue_refund"), strict=True).run_id
        for i in range(4)
    ]
    sf.record_run("hello", "u1", [], strict=True)
    sf.record_run("look it up", "u1", _steps("lookup_order"), strict=True)
    with engine.begin() as conn:
        chash = conn.execute(text("SELECT canonical_hash FROM workflow_memory WHERE id = :i"), {"i": ids[0]}).scalar()
        skill = insert_skill(
            conn, agent_id="a1", user_id="u1", canonical_hash=chash, name="refund-order", description="Refund an order",
            content="---\nname: refund-order\n---\n", status=SkillStatus.SHADOW, injection_role=InjectionRole.DEVELOPER,
            actor="flow:promotion-cycle",
        )  # fmt: skip
        transition(conn, skill.id, SkillStatus.ACTIVE, actor="alice", injection_role=InjectionRole.DEVELOPER)
        record = {"skill_id": skill.id, "evaluator_version": "v1", "trajectory_match": True}
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == ids[1]).values(shadow_evaluations=[record]))
        conn.execute(
            insert(shadow_observations).values(
                idempotency_key=f"{ids[1]}:{skill.id}:v1", run_id=ids[1], skill_id=skill.id, agent_id="a1",
                user_id="u1", similarity=0.9, trajectory_match=1, matched_succeeded=1, observed_outcome="success",
                evaluator_version="v1", evaluated_at=NOW,
            )
        )  # fmt: skip
        # An imported skill: its class key is `imported-…`, never a run's canonical hash (the check refused it).
        _skill(conn, "imported", canonical_hash=import_class_key("imported"), name="imported")
    return {"skill": skill.id, "hash": chash, "run": ids[2]}


def _wm(conn: Any, run_id: str, **values: Any) -> None:
    row: dict[str, Any] = {
        "id": run_id, "agent_id": "a1", "user_id": "u1", "query": "q",
        "canonical_hash": signature_hash([{"tool": run_id}]),
        "step_count": 1, "outcome": "success", "execution_outcome": "success", "outcome_source": "execution",
        "shadow_pending": 0, "created_at": NOW - timedelta(hours=1), "steps": [{"tool": "t"}], "skills_activated": [],
    }  # fmt: skip
    row.update(values)
    conn.execute(insert(workflow_memory).values(**row))


def _skill(conn: Any, skill_id: str, **values: Any) -> None:
    row: dict[str, Any] = {
        "id": skill_id, "agent_id": "a1", "user_id": "u1", "canonical_hash": signature_hash([{"tool": skill_id}]),
        "version": 1, "name": skill_id, "description": "d", "status": "deprecated", "content": "c",
        "prompt_version": "v1", "distiller": "offline", "created_at": NOW, "updated_at": NOW, "injection_role": "user",
    }  # fmt: skip
    row.update(values)
    conn.execute(insert(skillbox).values(**row))


def _plant_defects(engine: Engine, clean: dict[str, str]) -> None:
    """Each defect on its own identifiable row, through raw inserts/updates that bypass the application."""
    dialect = engine.dialect.name
    with engine.begin() as conn:
        if dialect == "sqlite":
            conn.execute(text("PRAGMA ignore_check_constraints = ON"))
        else:  # a manually managed schema without the check constraints (upstream skipped them too)
            for table, name in [("workflow_memory", "outcome"), ("skillbox", "status"), ("skillbox", "injection_role")]:
                conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT ck_{table}_{name}"))
        _wm(conn, "bad-hash", canonical_hash="ABCDEF")
        _wm(conn, "sig-no-hash", canonical_hash=None, signature=[{"tool": "t", "arg_keys": [], "errored": False}])
        _wm(conn, "unhashed", canonical_hash=None, signature=None, step_count=3)
        _wm(conn, "bad-outcome", outcome="maybe")
        _wm(conn, "bad-json")
        conn.execute(text("UPDATE workflow_memory SET steps = :v WHERE id = 'bad-json'"), {"v": "{not json"})
        _wm(conn, "bad-stamp", promoted_skill_id="no-such-skill")
        _wm(conn, "bad-shadow", shadow_evaluations=[{"skill_id": clean["skill"], "evaluator_version": "v9"}])
        _wm(conn, "future-run", created_at=NOW + timedelta(days=2))
        conn.execute(update(workflow_memory).where(workflow_memory.c.id == clean["run"]).values(promoted_skill_id=None))
        _skill(conn, "bogus-status", status="bogus")
        _skill(conn, "bad-role", injection_role="admin")
        _skill(
            conn, "unreviewed-dev", status="active", injection_role="developer", live_key="k" * 64,
            live_name_key="n" * 64, activated_at=NOW,
        )  # fmt: skip
        conn.execute(
            insert(skill_events).values(
                id="ev-auto", skill_id="unreviewed-dev", agent_id="a1", user_id="u1", event="activated",
                from_status="shadow", to_status="active", actor="flow:promotion-cycle", created_at=NOW,
                details={"role": "developer"},
            )
        )  # fmt: skip
        conn.execute(
            insert(skill_events).values(
                id="ev-bad-json", skill_id=clean["skill"], agent_id="a1", user_id="u1", event="note", actor="bob",
                created_at=NOW,
            )
        )  # fmt: skip
        conn.execute(text("UPDATE skill_events SET details = :v WHERE id = 'ev-bad-json'"), {"v": "[1,"})
        conn.execute(
            insert(shadow_observations).values(
                idempotency_key="obs-v9", run_id="bad-shadow", skill_id=clean["skill"], agent_id="a1", user_id="u1",
                similarity=0.8, trajectory_match=0, observed_outcome="success", evaluator_version="v9",
                evaluated_at=NOW,
            )
        )  # fmt: skip
        if dialect == "sqlite":
            conn.execute(text("UPDATE skillbox SET updated_at = '2024-01-01T10:00:00+02:00' WHERE id = 'bad-role'"))
        else:
            conn.execute(text("ALTER TABLE skillbox ALTER COLUMN updated_at TYPE timestamp without time zone"))
        for i in range(20):  # 20 runs, 20 classes: 100 classes per 100 runs
            _wm(conn, f"frag-{i}", agent_id="frag", user_id="u", canonical_hash=signature_hash([{"tool": f"f{i}"}]))


def _by_id(report: QualityReport) -> dict[str, Any]:
    return {c.id: c for c in report.checks}


def test_clean_database_passes(engine: Engine, db_url: str, gx_context: Any) -> None:
    _seed_clean(engine)
    report = run_quality(db_url, context=gx_context)
    bad = [(c.id, c.status, c.error, c.sample) for c in report.checks if c.status != "passed"]
    assert bad == []
    assert report.passed and report.blocking_failures == 0 and report.warnings == 0
    checks = _by_id(report)
    assert checks["skillbox.developer_active_reviewed"].unexpected_count == 0
    assert len(report.checks) >= 25
    assert {t.agent_id for t in report.fragmentation} == {"a1"}


EXPECTED = {
    "workflow_memory.canonical_hash_format": ("blocking", "ABCDEF"),
    "workflow_memory.hash_present_with_signature": ("blocking", "sig-no-hash"),
    "workflow_memory.hash_null_only_without_tools": ("warning", "unhashed"),
    "workflow_memory.outcome_domain": ("blocking", "maybe"),
    "workflow_memory.json_parses": ("blocking", "bad-json"),
    "workflow_memory.stamp_points_to_active_skill": ("blocking", "bad-stamp"),
    "workflow_memory.active_class_runs_stamped": ("warning", None),
    "workflow_memory.shadow_records_known_version": ("blocking", "bad-shadow"),
    "workflow_memory.timestamps_not_future": ("blocking", "future-run"),
    "skillbox.status_domain": ("blocking", "bogus"),
    "skillbox.injection_role_domain": ("blocking", "admin"),
    "skillbox.developer_active_reviewed": ("blocking", "unreviewed-dev"),
    "shadow_observations.evaluator_version_known": ("blocking", "v9"),
    "skill_events.json_parses": ("blocking", "ev-bad-json"),
    "tenant_fragmentation.classes_per_100_runs": ("warning", "100.0"),
}


def test_planted_defects_are_caught_with_their_severity(engine: Engine, db_url: str, gx_context: Any) -> None:
    clean = _seed_clean(engine)
    _plant_defects(engine, clean)
    report = run_quality(db_url, context=gx_context)
    checks = _by_id(report)
    expected = dict(EXPECTED)
    expected["workflow_memory.active_class_runs_stamped"] = ("warning", clean["run"])
    if engine.dialect.name == "sqlite":
        expected["skillbox.updated_at_utc_text"] = ("blocking", "2024-01-01T10:00:00+02:00")
    else:
        expected["skillbox.timestamps_timezone_aware"] = ("blocking", "updated_at")
    for check_id, (severity, needle) in expected.items():
        result = checks[check_id]
        assert result.status == "failed", (check_id, result)
        assert result.severity == severity, check_id
        assert result.error is None
        assert any(needle in s for s in result.sample), (check_id, result.sample)
    unexpected = sorted(c.id for c in report.checks if c.status != "passed" and c.id not in expected)
    assert unexpected == []
    assert not report.passed
    assert report.blocking_failures == sum(1 for s, _ in expected.values() if s == "blocking")
    assert report.warnings == 3
    frag = {t.agent_id: t for t in report.fragmentation}
    assert frag["frag"].classes_per_100_runs == 100.0 and frag["frag"].over_threshold
    assert not frag["a1"].over_threshold


def test_fragmentation_threshold_is_configurable(engine: Engine, db_url: str, gx_context: Any) -> None:
    with engine.begin() as conn:
        for i in range(30):  # 30 runs over 6 classes: 20 classes per 100 runs
            _wm(conn, f"r{i}", canonical_hash=signature_hash([{"tool": f"c{i % 6}"}]))
    lenient = run_quality(db_url, QualityOptions(fragmentation_warn_per_100=25), context=gx_context)
    strict = run_quality(db_url, QualityOptions(fragmentation_warn_per_100=15), context=gx_context)
    too_few = run_quality(
        db_url, QualityOptions(fragmentation_warn_per_100=15, fragmentation_min_runs=31), context=gx_context
    )
    key = "tenant_fragmentation.classes_per_100_runs"
    assert _by_id(lenient)[key].status == "passed"
    assert _by_id(strict)[key].status == "failed" and strict.passed  # a warning never blocks
    assert _by_id(too_few)[key].status == "passed"


def test_run_and_store_writes_self_contained_html_and_summary(
    sqlite_engine: Engine, tmp_path: Path, gx_context: Any
) -> None:
    url = sqlite_engine.url.render_as_string(hide_password=False)
    clean = _seed_clean(sqlite_engine)
    _plant_defects(sqlite_engine, clean)
    report = run_and_store(url, report_dir=tmp_path / "reports", context=gx_context)
    html = Path(report.html_path or "").read_text(encoding="utf-8")
    assert "<style>" in html and "FAILED" in html and "unreviewed-dev" in html
    for external in ("<script", "<link", "http://", "https://", "@import"):
        assert external not in html
    assert (tmp_path / "reports" / "data-quality-latest.html").read_text(encoding="utf-8") == html
    stored = latest(sqlite_engine)
    assert stored is not None and stored.id == report.id and stored.blocking_failures == report.blocking_failures
    assert stored.html_path == report.html_path


@pytest.mark.prefect
def test_flow_publishes_artifacts_and_fails_only_on_blocking(
    sqlite_engine: Engine, tmp_path: Path, prefect_harness: None
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.data_quality import DataQualityParams, data_quality

    url = sqlite_engine.url.render_as_string(hide_password=False)
    clean = _seed_clean(sqlite_engine)
    params = DataQualityParams(database_url=url, report_dir=str(tmp_path / "r"))
    report = data_quality(params)
    assert report.passed and Path(report.html_path or "").is_file()

    _plant_defects(sqlite_engine, clean)
    state = data_quality(params, return_state=True)
    assert state.is_failed()
    assert "blocking data-quality check" in str(state.message) or "blocking" in repr(state)
    with sqlite_engine.connect() as conn:
        rows = conn.execute(text("SELECT body FROM reports WHERE kind = 'data-quality' ORDER BY created_at")).all()
    bodies = [json.loads(r[0]) for r in rows]
    assert [b["passed"] for b in bodies] == [True, False]
    assert bodies[1]["flow_run_id"]

    with get_client(sync_client=True) as client:
        for key in ("data-quality-report", "data-quality-checks"):
            arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            assert arts, key
        md = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["data-quality-report"])))
    assert any("FAILED" in str(a.data) for a in md)


def test_a_new_context_does_not_log_its_temporary_docs_directory(caplog: pytest.LogCaptureFixture) -> None:
    """Each ephemeral context used to log its temporary docs directory at INFO (GX pins that logger at INFO) into
    the demo's and the flow's output; a level the application set on that logger is kept."""
    import logging

    from skillflow.quality.runner import GX_DOCS_LOGGER

    gx_logger = logging.getLogger(GX_DOCS_LOGGER)
    gx_logger.setLevel(logging.INFO)  # GX's own setting
    with caplog.at_level(logging.INFO):
        new_context()
    assert [r.getMessage() for r in caplog.records if r.name == GX_DOCS_LOGGER] == []
    gx_logger.setLevel(logging.DEBUG)
    try:
        new_context()
        assert gx_logger.level == logging.DEBUG
    finally:
        gx_logger.setLevel(logging.WARNING)
