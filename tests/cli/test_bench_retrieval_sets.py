"""``skillflow bench retrieval`` reports the fitted rule on the bench bank and the simulator (JSON and tables)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skillflow.cli import app

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
