"""Opt-in browser check of the Prefect UI (``SKILLFLOW_UI_CHECK=1``; needs /usr/bin/chromium)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("SKILLFLOW_UI_CHECK") != "1", reason="opt-in: set SKILLFLOW_UI_CHECK=1 (or run `make ui-check`)"
)


def test_promotion_cycle_page_screenshot(tmp_path: Path) -> None:
    if not (shutil.which("chromium") or Path("/usr/bin/chromium").exists()):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from skillflow.cli.uicheck import run_ui_check

    out = tmp_path / "prefect-flow-run.png"
    result = run_ui_check(out=out, workdir=tmp_path / "work")
    assert result["state"] == "Completed"
    assert "promotion-report" in result["artifacts"]
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank frame
