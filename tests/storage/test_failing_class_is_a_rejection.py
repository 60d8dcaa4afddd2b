"""Defect 3: a non-transient distiller/redaction/judge error is the class's rejection, not the cycle's end."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.errors import TransientError
from skillflow.kernel.models import ClassStats
from skillflow.promotion import cycle
from skillflow.promotion.redact import RedactionError
from skillflow.storage.schema import class_state
from tests.support.promotion import AGENT, agent, config, record_cancel, record_payment


class TransientBoom(TransientError):
    """A transient failure by type (docs/RELIABILITY.md, "Retries"), not yet retried by its layer."""


def _seed(engine: Engine) -> tuple[str, str]:
    sf = agent(engine)
    cancel = pay = ""
    for i in range(6):
        cancel = record_cancel(sf, "u1", i)
        pay = record_payment(sf, "u1", i, accepted=True)
    return cancel, pay


def test_redaction_error_is_recorded_and_the_next_class_still_promotes(
    engine: Engine, offline_providers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancel, pay = _seed(engine)
    real = cycle.distill_evidence

    def distill(evidence: Any, cfg: Any, settings: Any = None) -> Any:
        if evidence.stats.canonical_hash == cancel:
            raise RedactionError("could not redact 'ZQ7310K'")  # the message quotes evidence: never recorded
        return real(evidence, cfg, settings)

    monkeypatch.setattr(cycle, "distill_evidence", distill)
    report = cycle.run_partition(engine, AGENT, "u1", config())
    assert report.rejected == [(cancel, ["distillation failed: RedactionError"])]
    assert len(report.promoted) == 1 and report.partition_failed is None
    with engine.connect() as conn:
        row = conn.execute(select(class_state).where(class_state.c.canonical_hash == cancel)).mappings().one()
    assert row["last_reasons"] == ["distillation failed: RedactionError"]
    assert row["retry_after_cycle"] == report.cycle + config().rejection_backoff_cycles
    assert "ZQ7310K" not in str(report.model_dump())
    # The backoff holds: the next cycle does not ask the LLM about the class again.
    nxt = cycle.run_partition(engine, AGENT, "u1", config())
    assert (cancel, f"backoff: retry after cycle {row['retry_after_cycle']}") in nxt.skipped
    del pay


def test_judge_error_is_a_rejection_and_transient_errors_propagate(
    engine: Engine, offline_providers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(engine)

    class AuthError(Exception):
        pass

    def judge_fails(*_: Any, **__: Any) -> Any:
        raise RuntimeError("judge failed") from AuthError("401")

    monkeypatch.setattr(cycle, "validate_draft", judge_fails)
    report = cycle.run_partition(engine, AGENT, "u1", config(max_promotions_per_cycle=1))
    [(_, reasons)] = report.rejected  # the top-ranked class
    assert reasons == ["validation failed: RuntimeError (AuthError)"]

    def transient(*_: Any, **__: Any) -> Any:
        raise TransientBoom("rate limited")

    monkeypatch.setattr(cycle, "distill_evidence", transient)
    stats: ClassStats = cycle.assess_classes(engine, AGENT, "u1", config(), report.created_at, 99)[0].stats
    with pytest.raises(TransientBoom):  # the task's retry policy takes over
        cycle.process_class(engine, stats, config(), 99, dry_run=False, actor="t", flow_run_id=None)


def test_a_partition_that_fails_outside_a_class_names_its_stage(
    engine: Engine, offline_providers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(engine)

    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(cycle, "review_flags", broken)
    with pytest.raises(cycle.PartitionFailed) as info:
        cycle.run_partition(engine, AGENT, "u1", config())
    assert (info.value.stage, info.value.reason) == ("report", "report failed: KeyError")
    report = cycle.record_partition_failure(engine, AGENT, "u1", cycle.failure_reason(info.value))
    assert report.partition_failed == "report failed: KeyError"
