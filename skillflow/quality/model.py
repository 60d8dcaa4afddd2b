"""Value types of a data-quality run: the check definitions and the stored report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

Severity = Literal["blocking", "warning"]
CheckStatus = Literal["passed", "failed", "error"]


@dataclass(frozen=True)
class Check:
    """One expectation with its stable id, the asset it runs on and what a failure means."""

    id: str
    asset: str
    severity: Severity
    description: str
    expectation: Any  # a great_expectations Expectation (kept untyped: GX is imported lazily)


class QualityOptions(BaseModel):
    """Tunable thresholds of the suites."""

    fragmentation_warn_per_100: float = Field(
        50.0, gt=0, le=100, description="Warn when a tenant has more distinct classes per 100 hashed runs"
    )
    fragmentation_min_runs: int = Field(20, ge=1, description="Tenants with fewer hashed runs are not judged")
    known_evaluator_versions: tuple[str, ...] = Field(("v1",), description="Shadow evaluator versions understood")


class CheckResult(BaseModel):
    id: str
    table: str
    severity: Severity
    description: str
    status: CheckStatus
    unexpected_count: int | None = None
    sample: list[str] = Field(default_factory=list, description="Up to 10 offending ids or values")
    error: str | None = None


class TenantFragmentation(BaseModel):
    agent_id: str
    user_id: str
    runs: int
    hashed_runs: int
    classes: int
    classes_per_100_runs: float
    judged: bool
    over_threshold: bool


class QualityReport(BaseModel):
    """The stored summary (``reports`` kind ``data-quality``) and the source of every rendering."""

    id: str
    created_at: datetime
    dialect: str
    passed: bool
    blocking_failures: int
    warnings: int
    checks: list[CheckResult]
    fragmentation: list[TenantFragmentation]
    options: QualityOptions
    html_path: str | None = None
    flow_run_id: str | None = None
    duration_seconds: float = 0.0

    def failed(self, severity: Severity) -> list[CheckResult]:
        return [c for c in self.checks if c.status != "passed" and c.severity == severity]
