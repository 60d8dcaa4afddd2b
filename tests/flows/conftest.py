"""Fixtures of the flow tests: the task-run names seen in Prefect's task-run log records."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


class Names(logging.Handler):
    """Collects the ``task_run_name`` each task-run log record carries (the harness records no task runs)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.task_runs: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "task_run_name", None)
        if name:
            self.task_runs.add(str(name))


@pytest.fixture
def task_names() -> Iterator[Names]:
    """Stage logs at INFO for this test (the suite runs with PREFECT_LOGGING_LEVEL=WARNING; `make serve` at
    INFO), and the task-run names seen in them."""
    import prefect.main  # noqa: F401 - configures Prefect's logging once; levels set before it would be reset

    logger, handler = logging.getLogger("prefect"), Names()
    before = logger.level
    logger.setLevel(logging.INFO)
    logging.getLogger("prefect.task_runs").addHandler(handler)
    try:
        yield handler
    finally:
        logger.setLevel(before)
        logging.getLogger("prefect.task_runs").removeHandler(handler)
