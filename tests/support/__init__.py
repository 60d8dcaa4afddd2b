"""Helpers shared by the test suites."""

import fcntl
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from unittest.mock import patch


@contextmanager
def patient_capture() -> Iterator[None]:
    """Handles made inside wait up to 60 s on a capture. The 2 s default bound is the fault tests' subject, not the
    other tests': on a host loaded by the fleet tests a PostgreSQL capture can pass 2 s and be spooled (or, strict,
    raise). The bound is read when the handle is made (docs/RELIABILITY.md)."""
    with patch.dict(os.environ, {"SKILLFLOW_CAPTURE_TIMEOUT_SECONDS": "60"}):
        yield


def first_line_then_leave(argv: list[str], cwd: Path) -> tuple[bytes, int, bytes]:
    """Run ``argv`` as ``argv | head -1`` does: read its first line, close the pipe; the line, exit code, stderr.

    On Linux the pipe holds one page, so a command printing more is still printing when its reader leaves."""
    read, write = os.pipe()
    with suppress(AttributeError, OSError):  # F_SETPIPE_SZ is Linux's; elsewhere the pipe keeps its size
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(argv, stdout=write, stderr=subprocess.PIPE, cwd=cwd)
    os.close(write)
    with os.fdopen(read, "rb") as out:
        line = out.readline()
    _, stderr = proc.communicate(timeout=120)
    return line, proc.returncode, stderr
