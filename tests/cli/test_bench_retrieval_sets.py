"""``skillflow bench retrieval`` reports the fitted rule on the bench bank and the simulator (JSON and tables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from skillflow.cli import app
from skillflow.cli.commands import bench_retrieval
from skillflow.lab.bench.every_call import CallResult

# End-to-end runs of a bench or the evaluation harness: `make test` runs them, `make test-fast` does not.
pytestmark = pytest.mark.slow

SMALL = ["bench", "retrieval", "--embedder", "hashing", "--skills", "10", "--pools", "5", "--queries", "10"]
SMALL += ["--rounds", "1", "--tau-bench", "", "--api-bank", "", "--prepare-probes", "0"]


def test_bank_and_simulator_rows_next_to_the_fixed_rule_and_the_ceiling() -> None:
    runner = CliRunner()
    out = runner.invoke(app, [*SMALL, "--json"])
    assert out.exit_code == 0, out.output
    sets = json.loads(out.output)["applicability_sets"]
    assert set(sets) == {"bank", "simulator"}
    for name, result in sets.items():
        assert set(result["rows"]) == {"fitted", "hindsight", "fixed", "ceiling"} and result["folds"] == 5
        for levels in result["rows"].values():
            assert set(levels) == {"intent", "class"}
            for r in levels.values():
                assert r["P"] > 0 and r["N"] > 0 and abs(r["hit"] + r["wrong"] + r["miss"] - 1) < 1e-9, name
    assert "grouped by template family" in sets["simulator"]["corpus"]
    text = runner.invoke(app, SMALL)
    assert text.exit_code == 0, text.output
    flat = " ".join(text.output.split())  # tables wrap their cells at the runner's 80 columns
    assert "bench bank" in flat and "simulator" in flat and "ceiling" in flat
    skipped = runner.invoke(app, [*SMALL, "--no-applicability-sets", "--json"])
    assert json.loads(skipped.output)["applicability_sets"] == {}


def test_several_cv_seeds_report_each_split_and_their_mean(api_bank_half: Path) -> None:
    args = [*SMALL[:-6], "--tau-bench", "", "--api-bank", str(api_bank_half), "--prepare-probes", "0"]
    out = CliRunner().invoke(app, [*args, "--no-applicability-sets", "--cv-seeds", "0,3"])
    assert out.exit_code == 0, out.output
    rows = [" ".join(line.split()) for line in out.output.splitlines() if "api-bank" in line and "│" in line]
    assert [r.split("│")[2].strip() for r in rows if " intent " in r] == ["0", "3", "mean"]
    bad = CliRunner().invoke(app, [*args, "--cv-seeds", "x"])
    assert bad.exit_code != 0 and "--cv-seeds" in bad.output


def test_every_call_rows_per_fold_pooled_and_single_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for task in range(10):
        for trial in range(2):
            word = ["today", "please", "now", "asap", "kindly"][task % 5]
            tool, text = ("cancel_reservation", "cancel my trip") if task % 2 else ("get_user_details", "my bags")
            traj = [
                {"role": "user", "content": f"{text} {word} {trial}"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "a", "function": {"name": tool, "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "a", "content": "{}"},
                {"role": "assistant", "content": "ok"},
            ]
            runs.append({"task_id": task, "trial": trial, "reward": 1.0, "traj": traj,
                         "info": {"task": {"actions": [{"name": "cancel_reservation"}]}}})  # fmt: skip
    corpus = tmp_path / "tau.json"
    corpus.write_text(json.dumps(runs))
    args = [*SMALL[:-6], "--tau-bench", str(corpus), "--api-bank", "", "--prepare-probes", "0"]
    out = CliRunner().invoke(app, [*args, "--no-applicability-sets", "--json"])
    assert out.exit_code == 0, out.output
    calls = json.loads(out.output)["every_call"]
    assert set(calls) == {"tau-bench/execution", "tau-bench/reward"}
    for r in calls.values():
        assert r["calls"] == 40 and len(r["per_fold"]) == 5 and r["pooled"]["no_write_calls"] == 20
        assert r["single"]["P"] + r["single"]["N"] == 20
    console = Console(record=True, width=240)
    monkeypatch.setattr(bench_retrieval, "console", console)
    bench_retrieval._print_every_call({"tau-bench/execution": CallResult(**calls["tau-bench/execution"])})
    flat = " ".join(console.export_text().split())
    assert "every model call" in flat and "single-turn" in flat and "hindsight" in flat and "pooled" in flat
    assert "hindsight, every target" in flat and "against the gold actions" in flat
    assert "open hit" in flat and all("pre_write_open_P" in f for f in calls["tau-bench/execution"]["per_fold"])
    assert json.loads(out.output)["every_call_cv"] == {}  # one split: no per-split table
    # Several splits: each set's pooled figures on every seed and their mean, the first seed's equal to the
    # per-fold run's pooled figures.
    two = CliRunner().invoke(app, [*args, "--no-applicability-sets", "--cv-seeds", "0,2", "--json"])
    assert two.exit_code == 0, two.output
    doc = json.loads(two.output)
    cv = doc["every_call_cv"]
    assert set(cv) == {"tau-bench/execution", "tau-bench/reward"}
    for name, rows in cv.items():
        assert [r["seed"] for r in rows] == [0, 2, "mean"]
        pooled = doc["every_call"][name]["pooled"]
        assert all(rows[0][k] == pooled[k] for k in bench_retrieval.CV_FIGURES)
        assert rows[2]["misleading"] == pytest.approx((rows[0]["misleading"] + rows[1]["misleading"]) / 2)
        assert rows[0]["single_false"] == doc["every_call"][name]["single"]["false"]
        assert rows[0]["single_false_unseen"] == doc["every_call"][name]["single"]["false_unseen"]
        assert rows[0]["single_twins"] == doc["every_call"][name]["single"]["twins"]
        assert rows[0]["hindsight_open_hit"] == doc["every_call"][name]["hindsight_all"]["pre_write_open_hit"]
    bench_retrieval._print_every_call_cv(cv)
    flat = " ".join(console.export_text().split())
    assert "on each split" in flat and "mean" in flat
