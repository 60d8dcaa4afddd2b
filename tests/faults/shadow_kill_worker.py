"""A shadow drain that SIGKILLs itself at one point of one batch of the shipped composition.

``python -m tests.faults.shadow_kill_worker DB_URL POINT BATCH``: runs
:func:`skillflow.lifecycle.shadow.drain_shadow_evaluations` (what the ``shadow-evaluation`` flow's task runs,
with the same ``timeout=None``) in batches of :data:`BATCH_SIZE`, and kills the process with SIGKILL at
``POINT`` of batch number ``BATCH``:

* ``claim``: the batch's rows are claimed (PostgreSQL: locked in the open transaction; SQLite: the claim
  stamp committed, the rows not read yet), nothing evaluated;
* ``evaluate``: the records are computed, nothing written;
* ``commit``: the records and the outbox update are written but not committed;
* ``reconcile``: the records are persisted in the open transaction, the skills' ``stats["shadow"]`` not yet
  reconciled (reconciling is part of the batch's transaction, so this kill rolls the whole batch back).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from skillflow.lifecycle import shadow
from skillflow.storage import outbox
from skillflow.storage.engine import make_engine
from tests.support.lifecycle import EMBEDDER, config

BATCH_SIZE = 4


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def after(fn: Callable[..., Any], batch: int) -> Callable[..., Any]:
    """``fn`` that kills the process right after its ``batch``-th call returns."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        calls[0] += 1
        if calls[0] == batch:
            _kill()
        return result

    return wrapper


def before(fn: Callable[..., Any], batch: int) -> Callable[..., Any]:
    """``fn`` that kills the process right before its ``batch``-th call."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == batch:
            _kill()
        return fn(*args, **kwargs)

    return wrapper


def main(url: str, point: str, batch: int) -> None:
    if point == "claim":
        outbox.lock_batch = after(outbox.lock_batch, batch)  # PostgreSQL: the rows are locked
        outbox.read_runs = before(outbox.read_runs, batch)  # SQLite: the claim's transaction has committed
    elif point == "evaluate":
        shadow.evaluate_batch = after(shadow.evaluate_batch, batch)  # type: ignore[assignment]
    elif point == "commit":
        shadow.persist = after(shadow.persist, batch)  # type: ignore[assignment]
    elif point == "reconcile":
        shadow.reconcile = before(shadow.reconcile, batch)  # type: ignore[assignment]
    else:
        raise SystemExit(f"unknown point {point!r}")
    shadow.drain_shadow_evaluations(make_engine(url), config(), EMBEDDER, None, BATCH_SIZE)
    raise SystemExit(3)  # not reached: the drain killed us


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
