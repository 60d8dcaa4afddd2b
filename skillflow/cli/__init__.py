"""``skillflow`` command line: every module in ``skillflow.cli.commands`` registers its commands.

Without the ``pipeline`` extra (an agent-only install: no typer) nothing is registered and :data:`missing` names
the module that is absent; the console script (:mod:`skillflow.cli.entry`) then runs ``skillflow migrate`` alone.
The error layer (:mod:`skillflow.cli.errors`) needs none of the pipeline.
"""

from __future__ import annotations

import importlib
import pkgutil

missing: str | None = None
try:
    from skillflow.cli.app import app
except ModuleNotFoundError as exc:
    if not exc.name or exc.name.split(".")[0] == "skillflow":
        raise  # the project's own module: a broken install keeps its traceback
    missing = exc.name.split(".")[0]
else:
    from skillflow.cli import commands

    for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"{commands.__name__}.{_mod}")

__all__ = ["app", "missing"]
