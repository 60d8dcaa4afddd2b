"""What the promotion pipeline knows about a trajectory class: its SQL aggregate and its sample runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillflow.kernel.models import ClassStats, EvidenceRun


@dataclass(frozen=True)
class Evidence:
    """Everything distillation and validation may use for one class."""

    stats: ClassStats
    signature: list[dict[str, Any]]
    successes: list[EvidenceRun]
    failures: list[EvidenceRun]
    toolbox: list[str]
    previous_demotion_reason: str | None = None
    version: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source_ids(self) -> list[str]:
        return [r.id for r in (*self.successes, *self.failures)]
