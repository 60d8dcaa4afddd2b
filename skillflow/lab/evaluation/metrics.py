"""Per-case metrics, aggregates, treatment deltas with bootstrap 95 % intervals, and per-case outcomes.

A mean can improve while individual requests get worse (skill libraries make some tasks worse even when
the mean improves), so next to each delta :func:`case_outcomes` counts, per (case, repeat), whether the
treatment was better, equal or worse than the reference arm — the regression rate is the share worse.
"""

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
    "wrong_skill_rate",
)
# Per-case comparisons with a reference arm: metric -> whether higher is better.
COMPARED: dict[str, bool] = {"task_accuracy": True, "workflow_accuracy": True, "total_tokens": False}


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
    selection: str = ""  # a skill arm's rule: why this request got its skill or none (the Selection's reason)

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
            "wrong_skill_rate": float(self.skills_in_prompt > 0 and not self.target_skill_in_prompt),
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


@dataclass(frozen=True)
class Outcomes:
    """Paired per-case comparison of one arm with a reference arm on one metric."""

    better: int
    equal: int
    worse: int

    @property
    def pairs(self) -> int:
        return self.better + self.equal + self.worse

    @property
    def regression_rate(self) -> float:
        return self.worse / self.pairs if self.pairs else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "better": self.better,
            "equal": self.equal,
            "worse": self.worse,
            "pairs": self.pairs,
            "regression_rate": self.regression_rate,
        }


def verdict(treatment: float, reference: float, higher_is_better: bool = True) -> str:
    """``better`` | ``equal`` | ``worse`` for one pair (exact comparison: the metrics are 0/1 or counts)."""
    if treatment == reference:
        return "equal"
    return "better" if (treatment > reference) == higher_is_better else "worse"


def case_outcomes(
    results: Sequence[CaseResult], reference_arm: str, metrics: dict[str, bool] | None = None
) -> dict[str, dict[str, Outcomes]]:
    """arm -> metric -> better/equal/worse than ``reference_arm``, paired on (case_id, repeat)."""
    metrics = metrics if metrics is not None else COMPARED
    by_key: dict[str, dict[tuple[str, int], CaseResult]] = {}
    for r in results:
        by_key.setdefault(r.arm, {})[(r.case_id, r.repeat)] = r
    ref = by_key.get(reference_arm)
    if ref is None:
        return {}
    out: dict[str, dict[str, Outcomes]] = {}
    for arm, rows in by_key.items():
        if arm == reference_arm:
            continue
        if set(rows) != set(ref):
            raise ValueError(f"arm {arm} did not see the same requests as {reference_arm}")
        out[arm] = {}
        for metric, higher in metrics.items():
            counts = {"better": 0, "equal": 0, "worse": 0}
            for key in sorted(rows):
                v = verdict(rows[key].metric_values()[metric], ref[key].metric_values()[metric], higher)
                counts[v] += 1
            out[arm][metric] = Outcomes(**counts)
    return out
