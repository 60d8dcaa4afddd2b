"""``skillflow bench drift``: the command's composition — the healthy and broken scenarios of
:mod:`skillflow.lab.bench.drift_quality` under every setting, then τ-bench's baselines at promotion against
held-out rates (:mod:`skillflow.lab.bench.drift_winners`)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from os import getloadavg
from pathlib import Path
from typing import Any

from skillflow.lab.bench.drift_quality import Scenario, Setting, simulate
from skillflow.lab.bench.drift_winners import run_tau


@dataclass
class DriftQuality:
    settings: list[str]
    check_every: int
    horizons: list[int]
    seed: int
    healthy: list[dict[str, Any]] = field(default_factory=list)
    broken: list[dict[str, Any]] = field(default_factory=list)
    tau: dict[str, Any] | None = None
    tau_skipped: str | None = None
    seconds: float = 0.0
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load() -> tuple[float, float, float]:
    one, five, fifteen = getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def run(
    settings: Sequence[Setting],
    healthy: Sequence[Scenario],
    broken: Sequence[Scenario],
    *,
    skills: int = 30,
    horizons: Sequence[int] = (100, 500, 1000),
    after: int = 300,
    check_every: int = 10,
    seed: int = 0,
    tau_path: Path | None = None,
    tau_skills: int = 10,
    cv_seeds: Sequence[int] = (0,),
    progress: Callable[[str], None] = lambda _: None,
) -> DriftQuality:
    """Every healthy and broken scenario under every setting (one database per scenario), then τ-bench."""
    start = time.perf_counter()
    result = DriftQuality([s.label for s in settings], check_every, sorted(horizons), seed, load_before=_load())
    with tempfile.TemporaryDirectory(prefix="skillflow-drift-") as tmp:
        folder = Path(tmp)
        for scenario in healthy:
            progress(f"healthy: {scenario.label}")
            cells = simulate(folder, settings, scenario, skills, max(horizons), check_every, seed)
            result.healthy += [c.summary(horizons, after) for c in cells]
        for scenario in broken:
            progress(f"broken: {scenario.label}")
            cells = simulate(folder, settings, scenario, skills, scenario.at + after, check_every, seed)
            result.broken += [c.summary(horizons, after) for c in cells]
        if tau_path is None:
            result.tau_skipped = "no τ-bench corpus given: section skipped"
        else:
            progress("τ-bench: baselines at promotion vs held-out rates")
            result.tau, result.tau_skipped = run_tau(
                tau_path, folder, settings, skills=tau_skills, horizons=horizons, check_every=check_every,
                seed=seed, cv_seeds=cv_seeds,
            )  # fmt: skip
    result.seconds = round(time.perf_counter() - start, 1)
    result.load_after = _load()
    return result
