"""A cycle worker that SIGKILLs itself right after one stage of the shipped composition has done its work.

``python -m tests.faults.kill_worker DB_URL STAGE FLOW_RUN_ID``: runs :func:`skillflow.promotion.cycle.run_partition`
(what the ``promotion-cycle`` flow's task runs) with the stage function wrapped so that the process is
killed with SIGKILL as soon as the real stage returns (its writes committed, nothing after it done), or, for
the points of :data:`INSIDE`, as soon as a step inside a stage is called (the steps before it committed).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from skillflow.promotion import cycle, staleness
from skillflow.storage.engine import make_engine
from tests.faults.shadow_kill_worker import before
from tests.support.promotion import AGENT, config

# stage name → (module holding the function as the composition looks it up, attribute)
STAGES: dict[str, tuple[Any, str]] = {
    "sweep": (staleness, "sweep"),
    "aggregation": (cycle, "assess_classes"),
    "distillation": (cycle, "distill_evidence"),
    "validation": (cycle, "validate_draft"),
    "store": (cycle, "store_skill"),
    "report": (cycle, "finish_partition"),
}
# point inside a stage → the step it is killed at, as it is called
INSIDE: dict[str, tuple[Any, str]] = {
    "sweep-refit": (staleness, "refresh_rule"),  # the sweep's deprecations committed, the tenant's rule not refit
}


def killing(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fn(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    return wrapper


def main(url: str, stage: str, flow_run_id: str) -> None:
    if stage in INSIDE:
        module, name = INSIDE[stage]
        setattr(module, name, before(getattr(module, name), 1))
    else:
        module, name = STAGES[stage]
        setattr(module, name, killing(getattr(module, name)))
    cycle.run_partition(make_engine(url), AGENT, "u1", config(require_shadow=True), flow_run_id=flow_run_id)
    raise SystemExit(3)  # not reached: the stage killed us


if __name__ == "__main__":
    main(*sys.argv[1:4])
