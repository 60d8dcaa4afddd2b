"""A spool replay that SIGKILLs itself at one point of replaying its second file.

``python -m tests.faults.replay_kill_worker DB_URL SPOOL_DIR POINT``: :meth:`skillflow.runtime.Skillflow.replay_spool`
with the step at ``POINT`` wrapped so the process is killed there — ``read`` (the file read, nothing written),
``write`` (the run's row committed, its file not yet removed).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skillflow.capture import spool
from skillflow.runtime import Skillflow
from skillflow.storage.engine import make_engine


def killing_on_second(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that kills the process as soon as its second call returns."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        out = fn(*args, **kwargs)
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    return wrapper


def main(url: str, spool_dir: str, point: str) -> None:
    sf = Skillflow(agent_id="agent", engine=make_engine(url), spool_dir=Path(spool_dir))
    if point == "read":
        spool.read_spooled = killing_on_second(spool.read_spooled)  # type: ignore[assignment]
    else:
        sf._write = killing_on_second(sf._write)  # type: ignore[method-assign]
    sf.replay_spool()
    raise SystemExit(3)  # not reached: the replay killed us


if __name__ == "__main__":
    main(*sys.argv[1:4])
