"""Three layers, one direction: the domain package never imports prefect (the CLI and the UI check may)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import skillflow

ENTRY_POINTS = ("skillflow.cli", "skillflow.uicheck")  # the composition layer: imports flows lazily


def test_domain_modules_never_import_prefect() -> None:
    modules = sorted(
        m.name for m in pkgutil.walk_packages(skillflow.__path__, "skillflow.") if not m.name.startswith(ENTRY_POINTS)
    )
    assert len(modules) > 40
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'flows', 'tasks'})\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
