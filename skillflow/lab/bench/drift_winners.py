"""The winner's curse on τ-bench: a promoted class's frozen baseline vs its success rate on held-out tasks.

Outer cross-validation grouped by task (:func:`skillflow.lab.bench.applicability_bench.task_folds`): on the
training folds the classes that pass the promotion gates get a baseline — their training success rate, what
``baseline.success_rate`` freezes at promotion — and the same class's segments in the held-out folds give the
rate it then shows. Both outcomes the τ-bench ingest offers are read: ``execution`` (every call returned
without error, the default) and ``reward`` (the episode's reward is 1, ``skillflow ingest --outcome reward``).
The held-out rate, and the 95 % Wilson lower bound of the pooled held-out rate (the lowest true rate the
held-out runs cannot rule out), are then run through the shipped drift check as healthy scenarios
(:func:`skillflow.lab.bench.drift_quality.simulate`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillflow.kernel.config import PromotionConfig
from skillflow.lab.bench.applicability_bench import Seg, task_folds
from skillflow.lab.bench.drift_quality import Scenario, Setting, simulate
from skillflow.lab.bench.every_call import tau_corpus
from skillflow.lab.ingest.tau_bench import HANDOFF_TOOLS

OUTCOMES = ("execution", "reward")


def wilson_lower(successes: int, n: int, z: float = 1.959964) -> float | None:
    """The 95 % Wilson score lower bound of ``successes / n`` (None for no runs)."""
    if n == 0:
        return None
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def class_rows(segs: Sequence[Seg], config: PromotionConfig, folds: int, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per (seed, fold, gated class): its training baseline and its held-out executions and successes."""
    rows = []
    for seed in seeds:
        for fold, (_, test, skills) in enumerate(task_folds(segs, config, folds, seed, HANDOFF_TOOLS)):
            runs = Counter(segs[i].klass for i in test)
            wins = Counter(segs[i].klass for i in test if segs[i].ok)
            for s in skills:
                rows.append(
                    {
                        "seed": seed,
                        "fold": fold,
                        "intent": s.intent,
                        "train_executions": int(s.rank[1]),
                        "baseline": round(s.rank[0], 4),
                        "held_out_executions": runs[s.canonical_hash],
                        "held_out_successes": wins[s.canonical_hash],
                    }
                )
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled over the gated classes that have held-out runs (each weighted by its held-out executions)."""
    seen = [r for r in rows if r["held_out_executions"]]
    n = sum(r["held_out_executions"] for r in seen)
    ok = sum(r["held_out_successes"] for r in seen)
    baseline = sum(r["baseline"] * r["held_out_executions"] for r in seen) / n if n else None
    held = ok / n if n else None
    lower = wilson_lower(ok, n)
    return {
        "gated": len(rows),
        "gated_with_held_out_runs": len(seen),
        "held_out_executions": n,
        "held_out_successes": ok,
        "baseline_weighted": round(baseline, 4) if baseline is not None else None,
        "held_out_rate": round(held, 4) if held is not None else None,
        "gap": round(baseline - held, 4) if baseline is not None and held is not None else None,
        "held_out_rate_lower95": round(lower, 4) if lower is not None else None,
    }


def scenarios(rows: Sequence[dict[str, Any]], summary: dict[str, Any]) -> list[tuple[str, Scenario, int]]:
    """(kind, scenario, weight): each distinct (baseline, held-out rate) weighted by held-out executions, then
    the pooled baseline with the pooled held-out rate's lower bound as the true rate."""
    weights: Counter[tuple[float, float]] = Counter()
    for r in rows:
        if r["held_out_executions"]:
            pair = (r["baseline"], round(r["held_out_successes"] / r["held_out_executions"], 4))
            weights[pair] += r["held_out_executions"]
    out = [("held-out rate", Scenario(b, h), w) for (b, h), w in sorted(weights.items())]
    if summary["baseline_weighted"] is not None and summary["held_out_rate_lower95"] is not None:
        lower = Scenario(summary["baseline_weighted"], summary["held_out_rate_lower95"])
        out.append(("lower 95 % bound", lower, summary["held_out_executions"]))
    return out


def run_tau(
    path: Path,
    folder: Path,
    settings: Sequence[Setting],
    *,
    skills: int,
    horizons: Sequence[int],
    check_every: int,
    seed: int,
    cv_seeds: Sequence[int] = (0,),
    folds: int = 5,
) -> tuple[dict[str, Any] | None, str | None]:
    """(figures, None), or (None, why) when the corpus is absent."""
    if not path.is_file():
        return None, f"τ-bench corpus not found at {path}: section skipped"
    config = PromotionConfig()
    out: dict[str, Any] = {"corpus": str(path), "folds": folds, "cv_seeds": list(cv_seeds)}
    for outcome in OUTCOMES:
        segs, _ = tau_corpus(path, outcome)
        out["segments"] = len(segs)
        rows = class_rows(segs, config, folds, cv_seeds)
        summary = summarize(rows)
        demotion = []
        for kind, scenario, weight in scenarios(rows, summary):
            for cell in simulate(folder, settings, scenario, skills, max(horizons), check_every, seed):
                demotion.append({"kind": kind, "weight": weight, **cell.summary(horizons, 0)})
        out[outcome] = {"summary": summary, "classes": rows, "demotion": demotion}
    return out, None
