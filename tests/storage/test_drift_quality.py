"""The drift-quality bench drives the shipped check: rows it leaves, agreement with ``decide`` and exact odds."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.lab.bench.drift_quality import Scenario, Setting, parse_scenarios, parse_settings, quantile, simulate
from skillflow.lab.bench.drift_winners import class_rows, summarize, wilson_lower
from skillflow.lifecycle.drift import ActiveFigures, decide
from skillflow.storage.engine import make_engine
from skillflow.storage.schema import skill_events, skillbox
from tests.storage.test_applicability_bench import corpus


def _database(folder: Path) -> Engine:
    (db,) = folder.glob("*.db")
    return make_engine(f"sqlite:///{db}")


def test_a_skill_that_always_succeeds_is_never_demoted(tmp_path: Path) -> None:
    cells = simulate(tmp_path, [Setting(10, 0.25), Setting(3, 0.0, 0)], Scenario(1.0, 1.0), 4, 60, check_every=5)
    assert [c.demoted_at for c in cells] == [[None] * 4, [None] * 4]
    assert [c.checks for c in cells] == [4 * 12, 4 * 12]
    engine = _database(tmp_path)
    with engine.connect() as conn:
        rows = conn.execute(select(skillbox.c.status, skillbox.c.stats)).all()
    engine.dispose()
    assert len(rows) == 8 and {r.status for r in rows} == {"active"}
    assert {(r.stats["active"]["activations"], r.stats["active"]["rolling_success_rate"]) for r in rows} == {(60, 1.0)}


def test_a_skill_that_stops_working_is_demoted_at_the_next_check(tmp_path: Path) -> None:
    # baseline 1.0, delta 0.25: 3 failures in a window of 10 give 0.70 < 0.75; the check after 5 more sees it
    cells = simulate(tmp_path, [Setting(10, 0.25)], Scenario(1.0, 1.0, after=0.0, at=20), 6, 80, check_every=5)
    summary = cells[0].summary([80], after=60)
    assert cells[0].demoted_at == [25] * 6
    assert summary["demoted_before_change"] == 0 and summary["detected"] == 6
    assert summary["delay_p50"] == summary["delay_p90"] == summary["delay_max"] == 5
    engine = _database(tmp_path)
    with engine.connect() as conn:
        statuses = set(conn.execute(select(skillbox.c.status)).scalars())
        events = conn.execute(
            select(skill_events.c.actor, skill_events.c.reason).where(skill_events.c.to_status == "demoted")
        ).all()
    engine.dispose()
    assert statuses == {"demoted"}
    assert len(events) == 6 and {e.actor for e in events} == {"flow:drift-demotion"}
    assert {e.reason for e in events} == {"drift: rolling 0.50 vs baseline 1.00"}


def _decide_on_stream(outcomes: list[str], setting: Setting, baseline: float, steps: list[int]) -> int | None:
    """The first check at which ``decide`` — given the figures the stream implies — demotes."""
    config = setting.config()
    for hi in steps:
        seen = outcomes[:hi]
        known = [o for o in seen if o != "unknown"]
        ok, window = known.count("success"), known[-setting.window :]
        won = window.count("success")
        figures = ActiveFigures(
            hi, ok, len(known) - ok, hi - len(known), 0, len(window), won, won / len(window) if window else None, None
        )
        if decide(figures, baseline, config).demote:
            return hi
    return None


@pytest.mark.parametrize(
    ("scenario", "check_every"),
    [(Scenario(1.0, 0.85, unknown=0.25), 3), (Scenario(0.9, 0.9, after=0.4, at=30), 4)],
)
def test_the_database_check_agrees_with_decide_on_the_same_streams(
    tmp_path: Path, scenario: Scenario, check_every: int
) -> None:
    """Every replicate's demotion point, read through the database, is where ``decide`` fed the stream demotes:
    the window holds the last known outcomes only (unknown ones skipped), the grace counts known outcomes."""
    settings = [Setting(6, 0.25, 2), Setting(10, 0.3, 7), Setting(4, 0.2, 0)]
    stop = 90
    cells = simulate(tmp_path, settings, scenario, 12, stop, check_every=check_every, seed=3)
    steps = ([scenario.at] if scenario.at else []) + list(range(scenario.at + check_every, stop + 1, check_every))
    if steps[-1] < stop:
        steps.append(stop)
    for cell in cells:
        expected = [_decide_on_stream(scenario.outcomes(3, r, stop), cell.setting, scenario.baseline, steps)
                    for r in range(12)]  # fmt: skip
        assert cell.demoted_at == expected, cell.setting
    assert any(d is not None for c in cells for d in c.demoted_at)  # the comparison is not vacuous
    assert scenario.after is not None or any(d is None for c in cells for d in c.demoted_at)


def exact_demoted_by(p: float, baseline: float, setting: Setting, check_every: int, horizon: int) -> float:
    """P(demoted at a check within ``horizon`` activations): a Markov chain over the last ``window`` outcomes."""
    threshold = Fraction(str(baseline)) - Fraction(str(setting.delta))
    states = {(): 1.0}
    demoted = 0.0
    for n in range(1, horizon + 1):
        nxt: dict[tuple[bool, ...], float] = {}
        for window, mass in states.items():
            for won, q in ((True, p), (False, 1 - p)):
                key = (*window, won)[-setting.window :]
                nxt[key] = nxt.get(key, 0.0) + mass * q
        states = nxt
        if n % check_every == 0 and n >= setting.grace:
            for window in [w for w in states if Fraction(sum(w), len(w)) < threshold]:
                demoted += states.pop(window)
    return demoted


def test_false_demotions_agree_with_the_exact_chain(tmp_path: Path) -> None:
    setting, scenario, n = Setting(10, 0.25), Scenario(1.0, 0.9), 150
    cells = simulate(tmp_path, [setting], scenario, n, 30, check_every=5, seed=7)
    observed = sum(1 for d in cells[0].demoted_at if d is not None) / n
    exact = exact_demoted_by(0.9, 1.0, setting, 5, 30)
    assert 0.25 < exact < 0.35  # 5 sliding windows checked: far above one window's P(Bin(10, 0.9) <= 7) = 0.07
    assert abs(observed - exact) < 4 * math.sqrt(exact * (1 - exact) / n), (observed, exact)


def test_exact_chain_reduces_to_the_binomial_for_disjoint_windows() -> None:
    one = sum(math.comb(10, k) * 0.9**k * 0.1 ** (10 - k) for k in range(8))  # P(Bin(10, 0.9) <= 7)
    got = exact_demoted_by(0.9, 1.0, Setting(10, 0.25), 10, 30)
    assert got == pytest.approx(1 - (1 - one) ** 3, rel=1e-9)


def test_parsing_and_quantiles() -> None:
    assert parse_settings("10:0.25, 50:0.35:50") == [Setting(10, 0.25), Setting(50, 0.35, 50)]
    assert parse_scenarios("0.9:0.5", at=100) == [Scenario(0.9, 0.9, after=0.5, at=100)]
    for bad in ("10", "0:0.25", "10:1.5"):
        with pytest.raises(ValueError):
            parse_settings(bad)
    with pytest.raises(ValueError, match="between 0 and 1"):
        parse_scenarios("0.9:2")
    assert quantile([10, 20, 30], 4, 0.5) == 20 and quantile([10, 20, 30], 4, 0.9) is None  # one never detected
    assert quantile([], 0, 0.5) is None


def test_winners_curse_rows_pool_held_out_runs(tmp_path: Path) -> None:
    from skillflow.kernel.config import PromotionConfig
    from skillflow.lab.bench.applicability_bench import tau_segments

    rows = class_rows(tau_segments(corpus(tmp_path)), PromotionConfig(), 3, [0])
    assert rows and {r["intent"] for r in rows} <= {"cancel_reservation", "book_reservation"}
    summary = summarize(rows)
    assert summary["gated"] == len(rows)
    assert summary["held_out_executions"] == sum(r["held_out_executions"] for r in rows)
    assert wilson_lower(0, 0) is None and wilson_lower(42, 42) == pytest.approx(0.916, abs=1e-3)
    assert summarize([])["held_out_rate"] is None


def _cli(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(app, ["bench", "drift", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


TINY = ("--settings", "10:0.25,5:0.35:10", "--healthy", "1.0:0.9", "--broken", "0.9:0.1", "--horizons", "20,40")
TINY += ("--skills", "3", "--check-every", "10", "--change-at", "20", "--after", "30", "--tau-skills", "2")


def test_cli_json_on_a_tiny_grid_without_the_corpus(tmp_path: Path) -> None:
    out = _cli(*TINY, "--tau-bench", str(tmp_path / "absent.json"))
    assert out["settings"] == ["w10 Δ0.25", "w5 Δ0.35 g10"] and out["horizons"] == [20, 40]
    assert [r["setting"] for r in out["healthy"]] == out["settings"]
    assert all(set(r["demoted_by"]) == {"20", "40"} and r["skills"] == 3 for r in out["healthy"])
    broken = out["broken"]
    assert all(r["alive_at_change"] + r["demoted_before_change"] == 3 for r in broken)
    assert all(r["delay_p50"] is None or 0 < r["delay_p50"] <= 30 for r in broken)
    assert out["tau"] is None and "not found" in out["tau_skipped"] and out["seconds"] >= 0


def test_cli_tau_bench_section(tau_bench_path: Path) -> None:
    out = _cli(*TINY, "--settings", "10:0.25", "--healthy", "", "--broken", "", "--tau-bench", str(tau_bench_path))
    tau = out["tau"]
    assert tau["segments"] > 0 and out["tau_skipped"] is None
    for outcome in ("execution", "reward"):
        s = tau[outcome]["summary"]
        assert s["gated"] == len(tau[outcome]["classes"])
        assert s["held_out_rate"] is None or 0.0 <= s["held_out_rate"] <= 1.0
        assert all(r["skills"] == 2 for r in tau[outcome]["demotion"])
    assert tau["execution"]["summary"]["gated"] > 0
