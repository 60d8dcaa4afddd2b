"""Evaluation metrics and bootstrap intervals on fixed inputs."""

from __future__ import annotations

import pytest

from skillflow.lab.evaluation.metrics import CaseResult, aggregate, bootstrap_mean_diff, deltas


def _case(arm: str, case: str, repeat: int, ok: bool, tokens: int, dev: bool = False, raw: int = 0) -> CaseResult:
    return CaseResult(
        arm=arm,
        case_id=case,
        repeat=repeat,
        request="r",
        expected_hash="h",
        observed_hash="h" if ok else "x",
        expected_answer="done",
        answer="done" if ok else "nope",
        prompt_tokens=tokens,
        completion_tokens=10,
        llm_calls=2,
        inference_latency_ms=5.0,
        end_to_end_latency_ms=7.0,
        raw_workflows_in_prompt=raw,
        developer_message=dev,
    )


def test_case_metrics() -> None:
    c = _case("a", "c1", 0, True, 100, dev=True, raw=3)
    v = c.metric_values()
    assert v["task_accuracy"] == 1.0 and v["total_tokens"] == 110 and v["developer_message_rate"] == 1.0
    assert v["raw_workflow_prompt_rate"] == 1.0
    assert _case("a", "c1", 0, False, 1).metric_values()["task_accuracy"] == 0.0


def test_bootstrap_constant_difference_has_a_degenerate_interval() -> None:
    iv = bootstrap_mean_diff([3.0, 3.0, 3.0], [1.0, 1.0, 1.0])
    assert (iv.estimate, iv.low, iv.high) == (2.0, 2.0, 2.0)


def test_bootstrap_interval_brackets_the_mean_and_is_seeded() -> None:
    t = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1]
    b = [0, 0, 1, 0, 0, 1, 0, 1, 0, 0]
    iv = bootstrap_mean_diff(t, b, seed=1)
    assert iv.estimate == pytest.approx(0.4)
    assert iv.low <= 0.4 <= iv.high and iv.low >= -1 and iv.high <= 1
    assert bootstrap_mean_diff(t, b, seed=1) == iv


def test_bootstrap_requires_pairs() -> None:
    with pytest.raises(ValueError):
        bootstrap_mean_diff([1, 2], [1])


def test_aggregate_and_deltas() -> None:
    results = [
        _case("baseline", "c1", 0, False, 300, raw=3),
        _case("baseline", "c2", 0, True, 300, raw=3),
        _case("skill_user", "c1", 0, True, 150),
        _case("skill_user", "c2", 0, True, 150),
    ]
    agg = aggregate(results)
    assert agg["baseline"]["task_accuracy"] == 0.5 and agg["skill_user"]["task_accuracy"] == 1.0
    assert agg["baseline"]["raw_workflow_prompt_rate"] == 1.0 and agg["skill_user"]["raw_workflow_prompt_rate"] == 0.0
    d = deltas(results)
    assert d["skill_user"]["task_accuracy"].estimate == pytest.approx(0.5)
    assert d["skill_user"]["prompt_tokens"].estimate == pytest.approx(-150)


def test_deltas_refuse_unmatched_requests() -> None:
    results = [_case("baseline", "c1", 0, True, 1), _case("skill_user", "c2", 0, True, 1)]
    with pytest.raises(ValueError, match="same requests"):
        deltas(results)
