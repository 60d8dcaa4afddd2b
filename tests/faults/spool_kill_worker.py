"""An agent that SIGKILLs itself while it writes a spool file: its run's bytes written, the file not yet renamed.

``python -m tests.faults.spool_kill_worker DOWN_DB SPOOL_DIR``: ``DOWN_DB`` is made a folder (the database cannot
be opened, so the capture spools) and the process is killed right after the spool write's temporary file is
fsynced (docs/guide/runtime.md, "The spool").
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine


def main(down_db: str, spool_dir: str) -> None:
    Path(down_db).mkdir(exist_ok=True)
    sf = Skillflow(agent_id="agent", engine=make_engine(f"sqlite:///{down_db}"), spool_dir=Path(spool_dir))
    fsync = os.fsync

    def killing_fsync(fd: Any) -> None:
        fsync(fd)
        # The spool write's temporary file (the only file fsynced from Python here).
        if isinstance(fd, int) and os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = killing_fsync
    sf.record_run("refund order 7", "u1", [{"tool": "refund_order", "arguments": {"id": 7}, "result": "r" * 5000}])
    raise SystemExit(3)  # not reached: the write killed us


if __name__ == "__main__":
    main(*sys.argv[1:3])
