"""``skillflow demo`` runs the whole loop on a fresh database (what ``make demo`` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_the_whole_loop(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SKILLFLOW_CONFIG_PATH": str(ROOT / "config" / "skillflow.toml"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "COLUMNS": "160",
    }
    env.pop("PREFECT_API_URL", None)
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "skillflow.cli.main", "demo", "--db", db],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:] + out[-3000:]
    assert "[12/12] status" in out and "demo finished" in out
    # The activation refits the rule at once; the multi-turn conversation gets its skill just before the
    # write (select_skills' reason "injected"), and the unrelated requests get none.
    assert "applicability rule refit right after the activation: 1 live skill(s), injects=True" in out
    assert "150 conversations" in out and "procedure runs via record_conversation" in out
    conv = out.split('sf.prepare("yes, please proceed"', 1)[1].split("sf.prepare(", 1)[0]
    assert "→ cancel-reservation v1 (score " in conv and "state current, reason 'injected'" in conv
    for other in ("baggage allowance for a pet", "weather going to be like in Paris"):
        line = out.split(other, 1)[1].split("\n")[1]
        assert "→ no skill; select_skills: state current" in line, line
    assert "business outcome evaluator: success rate" in out and "ineligible (success_rate" in out
    assert "cancel-reservation v1 — shadow, role user" in out
    assert "skills rendered: cancel-reservation" in out
    assert "demoted — drift: rolling" in out
    assert "cancel-reservation v2: shadow" in out
    assert "passed=True" in out and "HTML report:" in out
    assert (tmp_path / "demo.db").is_file()
