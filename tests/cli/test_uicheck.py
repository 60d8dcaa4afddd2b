"""Opt-in browser check of the Prefect UI (``SKILLFLOW_UI_CHECK=1``; needs Debian's ``chromium``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("SKILLFLOW_UI_CHECK") != "1", reason="opt-in: set SKILLFLOW_UI_CHECK=1 (or run `make ui-check`)"
)


def test_ui_tour_screenshots_forms_logs_review_and_charts(tmp_path: Path) -> None:
    from skillflow.cli.uibrowser import chromium_path
    from skillflow.cli.uicheck import failures, run_ui_check

    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get update && apt-get install -y chromium)")
    out, work = tmp_path / "shots", tmp_path / "work"
    result = run_ui_check(out=out, workdir=work)
    assert failures(result) == [], result
    assert not work.exists()  # the work folder (database, Prefect home, browser profile) is removed
    f = result["findings"]
    assert f["promotion-cycle:name"] == "cycle-all-all"
    assert any("1 landed" in line for line in f["promotion-cycle:logs"])
    assert str(f["review-form:artifact-link"]).split("/artifacts/artifact/")[1]  # the form links its artifact
    assert all(img["src"].startswith("data:image/png;base64,") for img in f["review-artifact:images"])
    for name in ("01-deployments", "03-promotion-cycle-logs", "05-review-form", "06-review-artifact-chart",
                 "07-drift-report-chart"):  # fmt: skip
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank frame
