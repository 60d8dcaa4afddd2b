"""Per-case metrics, aggregates and treatment deltas with bootstrap 95 % confidence intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from skillflow.lab.evaluation.answers import AnswerCheck, answer_correct

METRICS = (
    "workflow_accuracy",
    "answer_accuracy",
    "task_accuracy",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "llm_calls",
    "inference_latency_ms",
    "end_to_end_latency_ms",
    "raw_workflow_prompt_rate",
    "developer_message_rate",
    "skill_prompt_rate",
    "target_skill_rate",
)


@dataclass(frozen=True)
class CaseResult:
    """One held-out request answered by one arm in one repeat."""

    arm: str
    case_id: str
    repeat: int
    request: str
    expected_hash: str | None
    observed_hash: str | None
    expected_answer: str
    answer: str
    prompt_tokens: int
    completion_tokens: int
    llm_calls: int
    inference_latency_ms: float
    end_to_end_latency_ms: float
    raw_workflows_in_prompt: int
    developer_message: bool
    skill_ids: tuple[str, ...] = ()
    answer_check: AnswerCheck = "exact"
    intent: str = ""
    retrieved_workflows: int = 0
    skills_in_prompt: int = 0
    target_skill_in_prompt: bool = False
    procedure_source: str = ""
    error: str | None = None

    @property
    def workflow_correct(self) -> bool:
        return self.expected_hash is not None and self.observed_hash == self.expected_hash

    @property
    def answer_correct(self) -> bool:
        """Exact for the offline model; key facts (ids, amounts, outcome words) for real models."""
        return answer_correct(self.answer, self.expected_answer, self.answer_check)

    def metric_values(self) -> dict[str, float]:
        return {
            "workflow_accuracy": float(self.workflow_correct),
            "answer_accuracy": float(self.answer_correct),
            "task_accuracy": float(self.workflow_correct and self.answer_correct),
            "prompt_tokens": float(self.prompt_tokens),
            "completion_tokens": float(self.completion_tokens),
            "total_tokens": float(self.prompt_tokens + self.completion_tokens),
            "llm_calls": float(self.llm_calls),
            "inference_latency_ms": self.inference_latency_ms,
            "end_to_end_latency_ms": self.end_to_end_latency_ms,
            "raw_workflow_prompt_rate": float(self.raw_workflows_in_prompt > 0),
            "developer_message_rate": float(self.developer_message),
            "skill_prompt_rate": float(self.skills_in_prompt > 0),
            "target_skill_rate": float(self.target_skill_in_prompt),
        }

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        row.update(self.metric_values())
        return row


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def bootstrap_mean_diff(
    treatment: Sequence[float], baseline: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Interval:
    """Paired bootstrap 95 % CI of mean(treatment − baseline) over matched (case, repeat) pairs."""
    t = np.asarray(treatment, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if t.shape != b.shape:
        raise ValueError("treatment and baseline must be paired (same cases and repeats)")
    if t.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    diff = t - b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, size=(resamples, diff.size))
    means = diff[idx].mean(axis=1)
    return Interval(float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def aggregate(results: Sequence[CaseResult]) -> dict[str, dict[str, float]]:
    """Mean of every metric per arm."""
    arms: dict[str, list[CaseResult]] = {}
    for r in results:
        arms.setdefault(r.arm, []).append(r)
    out: dict[str, dict[str, float]] = {}
    for arm, rows in arms.items():
        values = [r.metric_values() for r in rows]
        out[arm] = {m: float(np.mean([v[m] for v in values])) for m in METRICS}
        out[arm]["cases"] = float(len(rows))
    return out


def deltas(
    results: Sequence[CaseResult], baseline_arm: str = "baseline", *, resamples: int = 2000, seed: int = 0
) -> dict[str, dict[str, Interval]]:
    """Each treatment arm's delta from the baseline, paired on (case_id, repeat), with a bootstrap CI."""
    by_key: dict[str, dict[tuple[str, int], CaseResult]] = {}
    for r in results:
        by_key.setdefault(r.arm, {})[(r.case_id, r.repeat)] = r
    base = by_key.get(baseline_arm, {})
    out: dict[str, dict[str, Interval]] = {}
    for arm, rows in by_key.items():
        if arm == baseline_arm:
            continue
        keys = sorted(set(rows) & set(base))
        if set(rows) != set(base):
            raise ValueError(f"arm {arm} did not see the same requests as {baseline_arm}")
        out[arm] = {
            m: bootstrap_mean_diff(
                [rows[k].metric_values()[m] for k in keys],
                [base[k].metric_values()[m] for k in keys],
                resamples=resamples,
                seed=seed,
            )
            for m in METRICS
        }
    return out
