"""``skillflow bench drift``: how often the shipped drift check demotes a healthy skill, how fast a broken one.

Every figure comes from the shipped composition: a file SQLite database migrated like any other, one ACTIVE
skill row per simulated skill (its frozen ``baseline.success_rate`` set as the promotion cycle sets it), its
activations appended to ``skill_activations`` — the only table the check reads — ``check_every`` at a time
(the ``drift-demotion`` flow runs every 10 minutes, so several activations land between two checks), and
:func:`skillflow.lifecycle.drift.run_drift` run on each setting's tenant after every step. A skill is demoted
when the check says so; a demoted skill gets no more activations (it is no longer injected).

A setting is ``window:delta[:grace]`` (``drift_window_activations``, ``demotion_success_delta``,
``min_activations_before_drift_check``): each has its own tenant, and the same replicate draws the same
outcome stream under every setting (common random numbers), so the settings differ by the rule alone.

- *healthy* ``baseline:rate``: the skill succeeds at ``rate`` from its first activation; the figure is the
  share demoted within each horizon (activations stored at the demoting check).
- *broken* ``baseline:rate``: ``change_at`` activations at the baseline rate are stored and checked once (a
  skill with a full window of healthy history; one demoted there is counted apart), then the rate drops to
  ``rate``; the figure is the detection delay in activations after the change (median, p90, share detected
  within ``after`` activations).
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert

from skillflow.injection.embeddings import HashingEmbedder
from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import SkillStatus, utcnow
from skillflow.lifecycle.drift import run_drift
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import skill_activations
from skillflow.storage.skills import insert_skill

AGENT = "drift-bench"
DEFAULT_SETTINGS = "10:0.25,20:0.25,50:0.25,100:0.25,10:0.35,20:0.35,50:0.25:50"
DEFAULT_HEALTHY = "0.9:0.9,0.9:0.8,1.0:0.9"
DEFAULT_BROKEN = "0.9:0.5,0.9:0.2"


@dataclass(frozen=True)
class Setting:
    """The three drift knobs of ``PromotionConfig`` a user can set without code."""

    window: int
    delta: float
    grace: int = 5

    @property
    def label(self) -> str:
        return f"w{self.window} Δ{self.delta:g}" + ("" if self.grace == 5 else f" g{self.grace}")

    def config(self) -> PromotionConfig:
        return PromotionConfig.model_validate(
            {
                "drift_window_activations": self.window,
                "demotion_success_delta": self.delta,
                "min_activations_before_drift_check": self.grace,
            }
        )


@dataclass(frozen=True)
class Scenario:
    """A skill's frozen baseline and its true success rate (``after`` from activation ``at`` on, when set)."""

    baseline: float
    rate: float
    after: float | None = None
    at: int = 0
    unknown: float = 0.0  # share of activations whose outcome stays unknown (never in the window)

    @property
    def label(self) -> str:
        if self.after is None:
            return f"b {self.baseline:g}, p {self.rate:g}"
        return f"b {self.baseline:g}, p {self.rate:g}→{self.after:g} @{self.at}"

    def outcomes(self, seed: int, replicate: int, n: int) -> list[str]:
        """The replicate's first ``n`` outcomes; the same for every setting (seeded by scenario and replicate)."""
        rng = random.Random(f"{seed}:{self.baseline}:{self.rate}:{self.after}:{self.at}:{self.unknown}:{replicate}")
        out = []
        for i in range(n):
            p = self.rate if self.after is None or i < self.at else self.after
            u, v = rng.random(), rng.random()
            out.append("unknown" if v < self.unknown else "success" if u < p else "failure")
        return out


@dataclass
class Cell:
    """One setting on one scenario: each replicate's demotion point (activations stored at the check)."""

    setting: Setting
    scenario: Scenario
    demoted_at: list[int | None]
    checks: int

    def summary(self, horizons: Sequence[int], after: int) -> dict[str, Any]:
        n = len(self.demoted_at)
        out: dict[str, Any] = {
            "setting": self.setting.label,
            **{f"setting_{k}": v for k, v in asdict(self.setting).items()},
            "scenario": self.scenario.label,
            **{f"scenario_{k}": v for k, v in asdict(self.scenario).items()},
            "skills": n,
            "checks": self.checks,
        }
        if self.scenario.after is None:
            out["demoted_by"] = {str(h): sum(1 for d in self.demoted_at if d is not None and d <= h) for h in horizons}
            out["demoted_share"] = {h: round(c / n, 4) for h, c in out["demoted_by"].items()} if n else {}
            return out
        at = self.scenario.at
        before = [d for d in self.demoted_at if d is not None and d <= at]
        delays = sorted(d - at for d in self.demoted_at if d is not None and d > at)
        alive = n - len(before)
        out.update(
            demoted_before_change=len(before),
            alive_at_change=alive,
            detected=len(delays),
            detected_share=round(len(delays) / alive, 4) if alive else None,
            within_activations=after,
            delay_p50=quantile(delays, alive, 0.5),
            delay_p90=quantile(delays, alive, 0.9),
            delay_max=delays[-1] if delays and len(delays) == alive else None,
        )
        return out


def quantile(detected: Sequence[int], total: int, q: float) -> int | None:
    """Nearest-rank ``q`` quantile of ``total`` delays of which only the sorted ``detected`` are finite (the rest
    were never detected): None when it falls among the undetected (or there is nothing)."""
    k = math.ceil(q * total)
    return detected[k - 1] if 0 < k <= len(detected) else None


def parse_settings(text: str) -> list[Setting]:
    """``"10:0.25,50:0.25:50"`` → settings (``window:delta[:grace]``); ValueError names the bad item."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"setting {item!r} is not window:delta[:grace]")
        setting = Setting(int(parts[0]), float(parts[1]), int(parts[2]) if len(parts) == 3 else 5)
        setting.config()  # the model's bounds (window 1..10000, delta 0..1, grace >= 0)
        out.append(setting)
    return out


def parse_scenarios(text: str, at: int = 0) -> list[Scenario]:
    """``"0.9:0.9,1.0:0.9"`` → scenarios (``baseline:rate``); with ``at`` the rate is the one after the change."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 2:
            raise ValueError(f"scenario {item!r} is not baseline:rate")
        baseline, rate = float(parts[0]), float(parts[1])
        if not (0.0 <= baseline <= 1.0 and 0.0 <= rate <= 1.0):
            raise ValueError(f"scenario {item!r}: rates are between 0 and 1")
        out.append(Scenario(baseline, rate) if not at else Scenario(baseline, baseline, after=rate, at=at))
    return out


def _engine(folder: Path, name: str) -> Engine:
    engine = make_engine(f"sqlite:///{folder / name}")
    migrate(engine)
    return engine


def _skills(engine: Engine, settings: Sequence[Setting], scenario: Scenario, replicates: int) -> list[list[Any]]:
    """One ACTIVE skill per (setting, replicate), each setting its own tenant; rows as the promotion cycle stores
    them (a unique class hash and name, ``baseline = {executions, success_rate}``)."""
    out = []
    with engine.begin() as conn:
        for i, _ in enumerate(settings):
            row = []
            for r in range(replicates):
                key = hashlib.sha256(f"{i}:{r}".encode()).hexdigest()
                row.append(
                    insert_skill(
                        conn,
                        agent_id=AGENT,
                        user_id=f"setting-{i}",
                        canonical_hash=key,
                        name=f"drift-bench-{r}",
                        description="drift bench skill",
                        content="---\nname: drift-bench\n---\n",
                        status=SkillStatus.ACTIVE,
                        baseline={"executions": 20, "success_rate": scenario.baseline},
                        actor="bench",
                    )
                )
            out.append(row)
    return out


def _append(
    engine: Engine, skills: Sequence[Any], streams: Sequence[list[str]], lo: int, hi: int, base: datetime
) -> None:
    """Activations ``lo..hi-1`` of each skill (replicate ``r`` reads ``streams[r]``), one transaction."""
    rows = [
        {
            "run_id": f"run-{r:05d}-{i:06d}",
            "skill_id": sk.id,
            "agent_id": sk.agent_id,
            "user_id": sk.user_id,
            "canonical_hash": sk.canonical_hash,
            "outcome": streams[r][i],
            "created_at": base + timedelta(milliseconds=i),
        }
        for r, sk in skills
        for i in range(lo, hi)
    ]
    if rows:
        with engine.begin() as conn:
            conn.execute(insert(skill_activations), rows)


def simulate(
    folder: Path,
    settings: Sequence[Setting],
    scenario: Scenario,
    replicates: int,
    stop: int,
    check_every: int = 10,
    seed: int = 0,
) -> list[Cell]:
    """Each setting's replicates through ``run_drift`` until demoted or ``stop`` activations (one database)."""
    engine = _engine(folder, f"drift-{uuid.uuid4().hex[:12]}.db")
    skills = _skills(engine, settings, scenario, replicates)
    streams = [scenario.outcomes(seed, r, stop) for r in range(replicates)]
    base = utcnow() + timedelta(seconds=1)  # after every activated_at: each activation counts
    embedder = HashingEmbedder()  # run_drift refits a tenant's rule when one is stored: none is, so it never embeds
    demoted: list[dict[str, int]] = [{} for _ in settings]
    checks = [0] * len(settings)
    steps = ([scenario.at] if scenario.at else []) + list(range(scenario.at + check_every, stop + 1, check_every))
    if steps and steps[-1] < stop:
        steps.append(stop)
    lo = 0
    for hi in steps:
        for i, setting in enumerate(settings):
            live = [(r, sk) for r, sk in enumerate(skills[i]) if sk.id not in demoted[i]]
            if not live:
                continue
            _append(engine, live, streams, lo, hi, base)
            report = run_drift(engine, setting.config(), agent_id=AGENT, user_id=f"setting-{i}", embedder=embedder)
            checks[i] += report.checked
            for d in report.demoted:
                demoted[i][d.skill_id] = hi
        lo = hi
    engine.dispose()
    return [
        Cell(setting, scenario, [demoted[i].get(sk.id) for sk in skills[i]], checks[i])
        for i, setting in enumerate(settings)
    ]
