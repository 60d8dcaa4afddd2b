"""Run a fault worker in a subprocess and require that it died of SIGKILL at its kill point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from tests.conftest import ROOT


def run_killed(module: str, *args: str, env: Mapping[str, str] | None = None) -> None:
    """``python -m module args…`` from the project root (the parent's environment plus ``env``); fails the test
    with the worker's stderr unless the worker was killed by SIGKILL, i.e. reached its kill point."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode(errors="replace")[-2000:]
