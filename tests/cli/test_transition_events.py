"""Transitions made from the CLI emit the same Prefect events as the flows, and only with a Prefect API configured.

Two commands run as their own processes (as an operator runs them), which also proves the event is flushed
before the process ends; the others run in this process. The events are read back from the suite's real
(ephemeral) Prefect server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.promotion import cycle
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skill_events as skill_events_table
from tasks.events import lifecycle_event_id
from tests.support.promotion import AGENT, agent, config, record_cancel

pytestmark = [pytest.mark.prefect, pytest.mark.slow]
SKILLFLOW = Path(sys.executable).parent / "skillflow"


def shadow_skills(url: str, users: list[str]) -> dict[str, str]:
    """One SHADOW skill (v1 of the cancel class) per user: user -> skill id."""
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    out = {}
    for user in users:
        for i in range(6):
            record_cancel(sf, user, i)
        report = cycle.run_partition(engine, AGENT, user, config(require_shadow=True), force=True)
        [out[user]] = report.promoted
    engine.dispose()
    return out


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SKILLFLOW), *args], env=env, capture_output=True, text=True, timeout=120)


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), SKILLFLOW_EMBEDDER="hashing", COLUMNS="200", **extra)
    return env


def skill_events(skill_ids: list[str], expected: int, timeout: float = 30.0) -> list[Any]:
    """The ``skillflow.skill.*`` events the server stored for these skills (waits for ``expected`` of them)."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    ids = [f"skillflow.skill.{s}" for s in skill_ids]
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            flt = EventFilter(event=EventNameFilter(prefix=["skillflow.skill."]), resource=EventResourceFilter(id=ids))
            events = list(client.read_events(flt, limit=50).events)
            if len(events) >= expected or time.monotonic() > deadline:
                return sorted(events, key=lambda e: e.occurred)
            time.sleep(0.5)


@pytest.mark.usefixtures("offline_providers")
def test_cli_transitions_emit_events_with_tenant_labels(prefect_harness: None, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    url = f"sqlite:///{tmp_path / 'events.db'}"
    skills = shadow_skills(url, ["u1", "u2", "u3"])
    env = base_env(tmp_path, PREFECT_API_URL=str(PREFECT_API_URL.value()))
    one, two = skills["u1"], skills["u2"]
    for args in (["activate", one], ["demote", one, "--reason", "drifted in production"]):  # own processes
        done = cli(env, *args, "--db", url)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert "not emitted" not in done.stderr, done.stderr
    for args in (
        ["rollback", one, "--to", "v1", "--reason", "the drift was an outage"],  # vN, as history writes it
        ["reject", two, "--reason", "wrong procedure"],
        ["reject", two, "--reason", "wrong procedure"],  # a repeat sends its event again, under the same id
        ["activate", one],  # ACTIVE by the rollback: a no-op, and not an activation's event to send again
    ):
        result = CliRunner().invoke(app, [*args, "--db", url])
        assert result.exit_code == 0, (args, result.output)

    events = skill_events([one, two], expected=4)
    got = [(e.event, e.resource.id, e.payload) for e in events]
    assert got == [
        ("skillflow.skill.activated", f"skillflow.skill.{one}",
         {"decision": "activate_user", "injection_role": "user", "version": 1}),
        ("skillflow.skill.demoted", f"skillflow.skill.{one}", {"decision": "demote", "version": 1}),
        ("skillflow.skill.rolled_back", f"skillflow.skill.{one}", {"decision": "rollback", "version": 1}),
        ("skillflow.skill.rejected", f"skillflow.skill.{two}", {"decision": "reject", "version": 1}),
    ]  # fmt: skip
    labels = [(e.resource.get("skillflow.agent_id"), e.resource.get("skillflow.user_id")) for e in events]
    assert labels == [(AGENT, "u1")] * 3 + [(AGENT, "u2")]
    rows = lifecycle_rows(url, [one, one, one, two], ["activated", "demoted", "rolled_back", "rejected"])
    assert [e.id for e in events] == [lifecycle_event_id(r) for r in rows]  # each the id of its transition's row

    # No API configured: the same output as always, nothing on stderr, exit 0 — and no server started for it
    # (ephemeral mode refused, so an attempt to emit would surface as a warning).
    quiet = base_env(tmp_path, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="false")
    three = skills["u3"]
    done = cli(quiet, "reject", three, "--reason", "not needed", "--db", url, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout) == {"skill_id": three, "status": "rejected", "injection_role": "user"}
    assert skill_events([three], expected=1, timeout=3) == []


def lifecycle_rows(url: str, skill_ids: list[str], events: list[str]) -> list[str]:
    """The id of each skill's newest lifecycle row of each event."""
    engine = make_engine(url)
    ev = skill_events_table.c
    with engine.connect() as conn:
        out = [
            conn.execute(
                select(ev.id).where(ev.skill_id == s, ev.event == e).order_by(ev.created_at.desc()).limit(1)
            ).scalar_one()
            for s, e in zip(skill_ids, events, strict=True)
        ]
    engine.dispose()
    return out


@pytest.mark.usefixtures("offline_providers")
def test_a_decision_whose_event_was_lost_sends_it_when_asked_again(prefect_harness: None, tmp_path: Path) -> None:
    """The API was unreachable when the skill was activated, so the event was lost (a warning); asked again once
    the API is up, the command is a no-op on the skill and sends the activation's event, under the id of its
    lifecycle row. Before, a repeat sent nothing and the event was lost for good."""
    from prefect.settings import PREFECT_API_URL

    url = f"sqlite:///{tmp_path / 'lost.db'}"
    [one] = shadow_skills(url, ["u1"]).values()
    down = cli(base_env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api"), "activate", one, "--db", url)
    assert down.returncode == 0 and "not emitted" in down.stderr, down.stderr
    up = cli(base_env(tmp_path, PREFECT_API_URL=str(PREFECT_API_URL.value())), "activate", one, "--db", url)
    assert up.returncode == 0 and "not emitted" not in up.stderr, up.stderr
    [event] = skill_events([one], expected=1)
    assert event.event == "skillflow.skill.activated"
    assert event.id == lifecycle_event_id(lifecycle_rows(url, [one], ["activated"])[0])


@pytest.mark.usefixtures("offline_providers")
def test_an_unreachable_prefect_api_is_a_warning_never_a_failure(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'down.db'}"
    [one] = shadow_skills(url, ["u1"]).values()
    env = base_env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api")  # nothing listens on port 9
    done = cli(env, "activate", one, "--db", url)
    assert done.returncode == 0, done.stderr
    assert f"({one}): active, user" in done.stdout
    assert "event skillflow.skill.activated not emitted: the Prefect API at http://127.0.0.1:9/api is unreachable" in (
        done.stderr
    )


def decisions_sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """(event, skill id, payload, event id) of each event a CLI decision hands to ``emit_decision``."""
    from tasks import events

    sent: list[tuple[Any, ...]] = []

    def capture(event: str, skill: Any, payload: dict[str, Any], event_id: Any = None, **_: Any) -> bool:
        sent.append((event, skill.id, payload, event_id))
        return True

    monkeypatch.setattr(events, "emit_decision", capture)
    return sent


@pytest.mark.usefixtures("offline_providers")
def test_a_demote_of_a_skill_drift_demoted_sends_drifts_event_again(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: drift keyed its ``demoted`` by skill and drift run, the CLI by the lifecycle row, so ``skillflow
    demote`` of a skill drift had demoted sent a second event (a second re-qualification). Now it sends drift's
    event: its id and payload."""
    from skillflow.lifecycle.drift import run_drift
    from tasks import events
    from tests.support.drift import drifting
    from tests.support.lifecycle import config as drift_config

    skill = drifting(engine)
    drift_run = "drift-run-1"
    report = run_drift(engine, drift_config(demotion_success_delta=0.25), flow_run_id=drift_run)
    assert [d.skill_id for d in report.demoted] == [skill.id]
    flow_sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: flow_sent.append(args) or True)
    events.emit_demotions(report.demoted, False, drift_run)
    [(event, _resource, _labels, payload, key)] = flow_sent

    sent = decisions_sent(monkeypatch)
    result = CliRunner().invoke(app, ["demote", skill.id, "--reason", "drifted in production", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert sent == [(event, skill.id, payload, key)]
    assert key == events.drift_demotion_id(skill.id, drift_run)


def two_versions(tmp_path: Path) -> tuple[str, str, str]:
    """A tenant whose v1 was demoted and whose v2 is ACTIVE (no shadow: each version lands ACTIVE): (url, v1, v2)."""
    from datetime import timedelta

    from skillflow.kernel.models import utcnow
    from skillflow.lifecycle.decisions import demote_skill

    url = f"sqlite:///{tmp_path / 'rollback.db'}"
    engine = make_engine(url)
    migrate(engine)
    sf = agent(engine)
    for i in range(6):
        record_cancel(sf, "u1", i)
    [first] = cycle.run_partition(engine, AGENT, "u1", sf.config).promoted
    demote_skill(engine, first, "drift: rolling 0.40 vs baseline 1.00", actor="test")
    for i in range(10, 16):
        record_cancel(sf, "u1", i, when=utcnow() + timedelta(seconds=i))
    [second] = cycle.run_partition(engine, AGENT, "u1", sf.config).promoted
    engine.dispose()
    return url, first, second


@pytest.mark.usefixtures("offline_providers")
def test_a_rollback_repeated_to_the_active_version_sends_its_event_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a ``rollback`` repeated to the version already ACTIVE sent nothing (its payload named the
    replaced version, which a repeat no longer knew), so a rollback event lost once was lost for good. Now the
    repeat sends the same event — id of the rollback's lifecycle row, payload read from that row."""
    url, first, second = two_versions(tmp_path)

    sent = decisions_sent(monkeypatch)
    for _ in range(2):
        result = CliRunner().invoke(app, ["rollback", second, "--to", "1", "--reason", "v2 regressed", "--db", url])
        assert result.exit_code == 0, result.output
    [row] = lifecycle_rows(url, [first], ["rolled_back"])
    payload = {"decision": "rollback", "version": 1, "replaced": second, "replaced_status": "demoted"}
    assert sent == [("skillflow.skill.rolled_back", first, payload, lifecycle_event_id(row))] * 2


@pytest.mark.usefixtures("offline_providers")
def test_a_demote_of_the_version_a_rollback_replaced_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a rollback demotes the version it replaces and sends ``rolled_back`` only (the class stays
    covered); a later ``demote`` of that version found the rollback's demotion row and sent a ``demoted`` event
    that was never sent, which starts the re-qualification automation. Now it sends nothing."""
    url, _, second = two_versions(tmp_path)
    result = CliRunner().invoke(app, ["rollback", second, "--to", "1", "--reason", "v2 regressed", "--db", url])
    assert result.exit_code == 0, result.output

    sent = decisions_sent(monkeypatch)
    result = CliRunner().invoke(app, ["demote", second, "--reason", "still bad", "--db", url])
    assert result.exit_code == 0, result.output
    assert sent == []
