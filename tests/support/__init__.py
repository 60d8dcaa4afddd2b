"""Helpers shared by the test suites."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch


@contextmanager
def patient_capture() -> Iterator[None]:
    """Handles made inside wait up to 60 s on a capture. The 2 s default bound is the fault tests' subject, not the
    other tests': on a host loaded by the fleet tests a PostgreSQL capture can pass 2 s and be spooled (or, strict,
    raise). The bound is read when the handle is made (docs/RELIABILITY.md)."""
    with patch.dict(os.environ, {"SKILLFLOW_CAPTURE_TIMEOUT_SECONDS": "60"}):
        yield
