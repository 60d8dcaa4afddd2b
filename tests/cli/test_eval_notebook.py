"""The evaluation notebook executes headless (nbclient, offline mode) and runs every harness assertion."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from skillflow.lab.evaluation.scripted import OFFLINE_LABEL

# End-to-end runs of a bench or the evaluation harness: `make test` runs them, `make test-fast` does not.
pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "continual_learning_eval.ipynb"
ASSERTIONS = {
    "skill_arms_zero_raw_workflows",
    "only_developer_arm_has_developer_message",
    "skill_bodies_byte_identical",
    "every_arm_same_requests",
    "same_training_state",
}


def test_committed_notebook_has_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_runs_offline_and_checks_every_assertion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary_path = tmp_path / "summary.json"
    for var in ("SKILLFLOW_EVAL_PROVIDER", "SKILLFLOW_EVAL_MODEL", "SKILLFLOW_EVAL_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SKILLFLOW_EVAL_SUMMARY", str(summary_path))
    monkeypatch.setenv("SKILLFLOW_EVAL_FIGURE", str(tmp_path / "deltas.png"))
    monkeypatch.setenv("SKILLFLOW_EVAL_CASES", "2")
    monkeypatch.setenv("SKILLFLOW_EMBEDDER", "hashing")  # speed; the harness tests cover MiniLM
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["label"] == OFFLINE_LABEL and summary["offline"] is True
    assert {c["name"] for c in summary["checks"]} == ASSERTIONS
    assert all(c["passed"] for c in summary["checks"]) and summary["all_checks_passed"]
    assert summary["arms"] == ["baseline", "skill_user", "skill_developer", "no_memory"]
    assert summary["cases"] == 6 and set(summary["deltas"]) == {"skill_user", "skill_developer", "no_memory"}
    assert (tmp_path / "deltas.png").stat().st_size > 10_000
    outputs = "".join(str(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert OFFLINE_LABEL in outputs  # the label is shown, not only stored
