"""Each flow event's Prefect id is derived from what makes its occurrence unique (docs/guide/ops.md, "Events and
automations"): sent again by a retry it is the same event, which the server keeps once; a new occurrence is a
new event."""

from __future__ import annotations

from typing import Any

import pytest

from skillflow.promotion.report import PromotionReport
from tasks import events


def _captured(monkeypatch: pytest.MonkeyPatch, send: Any) -> list[tuple[Any, ...]]:
    """The arguments of every ``emit`` that ``send()`` makes (event, resource, labels, payload, id)."""
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(events, "emit", lambda *args: sent.append(args) or True)
    send()
    return sent


def _sent(monkeypatch: pytest.MonkeyPatch, report: PromotionReport) -> list[tuple[Any, ...]]:
    return _captured(monkeypatch, lambda: events.emit_promotion([report]))


def _report(cycle: int = 3, flow_run_id: str = "run-1", **kw: Any) -> PromotionReport:
    return PromotionReport(
        agent_id="acme", user_id="bob", cycle=cycle, flow_run_id=flow_run_id, promoted=["s1"],
        rejected=[("hash-a", ["too few runs"])], deprecated=[("s0", "tool removed: x")], **kw,
    )  # fmt: skip


def test_a_retried_report_sends_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    first, again = _sent(monkeypatch, _report()), _sent(monkeypatch, _report())
    assert [a[0] for a in first] == [events.PROMOTED, events.CLASS_REJECTED, events.DEPRECATED]
    assert [a[4] for a in first] == [a[4] for a in again]
    assert len({a[4] for a in first}) == 3


def test_a_new_occurrence_is_a_new_event(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {a[0]: a[4] for a in _sent(monkeypatch, _report())}
    later = {a[0]: a[4] for a in _sent(monkeypatch, _report(cycle=4))}
    other_run = {a[0]: a[4] for a in _sent(monkeypatch, _report(flow_run_id="run-2"))}
    other_tenant = {a[0]: a[4] for a in _sent(monkeypatch, _report().model_copy(update={"user_id": "eve"}))}
    assert later[events.PROMOTED] == base[events.PROMOTED]  # a skill is promoted once, whichever report names it
    assert later[events.CLASS_REJECTED] != base[events.CLASS_REJECTED]  # rejected again in a later cycle
    assert later[events.DEPRECATED] != base[events.DEPRECATED]  # deprecated again after a rollback
    assert other_run[events.CLASS_REJECTED] != base[events.CLASS_REJECTED]  # "Distill now" asked again
    assert other_tenant[events.CLASS_REJECTED] != base[events.CLASS_REJECTED]


def test_drift_demotions_are_keyed_by_skill_and_drift_run(monkeypatch: pytest.MonkeyPatch) -> None:
    class Drift:
        skill_id, agent_id, user_id, version = "s9", "acme", "bob", 2

    sent = _captured(monkeypatch, lambda: [events.emit_demotions([Drift()], False, r) for r in ("drift-1",) * 2])
    sent += _captured(monkeypatch, lambda: events.emit_demotions([Drift()], False, "drift-2"))
    want = [events.stable_id(events.DEMOTED, "s9", run) for run in ("drift-1", "drift-1", "drift-2")]
    assert [a[4] for a in sent] == want
    assert sent[0][4] != sent[2][4]
    assert events.emit_demotions([Drift()], True, "drift-1") == 0  # a dry run sends nothing


def _keys(monkeypatch: pytest.MonkeyPatch, send: Any) -> list[Any]:
    return [a[4] for a in _captured(monkeypatch, send)]


def test_a_blocking_quality_report_is_one_event_per_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``quality.blocking`` had a random id, so a retried data-quality run sent it twice."""
    [first] = _keys(monkeypatch, lambda: events.emit_quality_blocking("report-1", ["runs.outcome"]))
    [again] = _keys(monkeypatch, lambda: events.emit_quality_blocking("report-1", ["runs.outcome"]))
    [other] = _keys(monkeypatch, lambda: events.emit_quality_blocking("report-2", ["runs.outcome"]))
    assert first == again == events.stable_id(events.QUALITY_BLOCKING, "report-1")
    assert other != first


def test_the_backlog_is_one_event_per_database_and_flow_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``outbox.backlog`` had a random id, so a retried flow run sent it twice."""

    def keys(database: str, run: str | None) -> Any:
        [key] = _keys(monkeypatch, lambda: events.emit_backlog(12, 10, database, run))
        return key

    assert keys("db", "run-1") == keys("db", "run-1") == events.stable_id(events.BACKLOG, "db", "run-1")
    assert keys("db", "run-2") != keys("db", "run-1")
    assert keys("other", "run-1") != keys("db", "run-1")
    assert keys("db", None) is None  # outside a flow run: Prefect's random id
    assert _keys(monkeypatch, lambda: events.emit_backlog(10, 10, "db", "run-1")) == []  # not above the threshold
