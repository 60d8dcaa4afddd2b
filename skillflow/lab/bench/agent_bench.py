"""``skillflow bench agent``: what a fresh agent process pays for its first ``prepare`` (docs/BENCHMARKS.md).

A parent process seeds a SQLite tenant (one ACTIVE skill with applicability vectors of the embedder, or no
skill at all), then starts a fresh interpreter that imports :mod:`skillflow.runtime`, builds a
:class:`~skillflow.runtime.Skillflow` and calls ``prepare`` once, then a few more times, then ``record_run``.
The child reports its wall times (from the parent's launch, so interpreter start-up and imports count), its
peak RSS and the modules loaded at each point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from skillflow.injection.embeddings import get_embedder
from skillflow.injection.retrieval import write_skill_vectors
from skillflow.kernel.models import SkillStatus
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.skills import insert_skill

AGENT, USER = "bench-agent", "bench-user"
QUERY = "please cancel my reservation for tomorrow"
# What an agent process must never load for a prepare: the pipeline's and the torch path's packages.
HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "sklearn",
    "scipy",
    "pandas",
    "sympy",
    "prefect",
    "great_expectations",
    "matplotlib",
)
TARGET_FIRST_S = 2.0
TARGET_RSS_MB = 400.0

# The child: argv[1] is a JSON document {url, agent, user, query, launched, calls}; prints one JSON line.
CHILD = """
import json, resource, sys, time
args = json.loads(sys.argv[1])
def mark():
    return round(time.time() - args["launched"], 4)
def peak_mb():
    try:  # VmHWM: this process image's peak; ru_maxrss also counts the parent's pages at fork
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
import skillflow.runtime as runtime
t1 = time.perf_counter()
flow = runtime.Skillflow(agent_id=args["agent"], database_url=args["url"], continual_learning=True)
t2 = time.perf_counter()
prepared = flow.prepare(args["query"], args["user"])
t3 = time.perf_counter()
out = {
    "import_s": t1 - t0, "init_s": t2 - t1, "first_prepare_s": t3 - t2, "since_launch_s": mark(),
    "modules_after_prepare": len(sys.modules), "skill_ids": list(prepared.skill_ids),
    "rss_after_prepare_mb": peak_mb(),
}
later = []
for i in range(args["calls"]):
    t = time.perf_counter()
    flow.prepare(args["query"] + f" ({i})", args["user"])
    later.append((time.perf_counter() - t) * 1000)
out["later_ms"] = later
flow.record_run(args["query"], args["user"], [{"tool": "cancel_reservation", "arguments": {"id": "R1"}}])
out["rss_peak_mb"] = peak_mb()
out["modules"] = sorted(sys.modules)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class AgentProcess:
    """One fresh process: seconds, MB and module counts of its first ``prepare`` (``live``: the tenant had a skill)."""

    embedder: str
    live: bool
    since_launch_s: float
    import_s: float
    first_prepare_s: float
    rss_after_prepare_mb: float
    rss_peak_mb: float
    modules_after_prepare: int
    later_p50_ms: float
    later_p95_ms: float
    heavy_loaded: tuple[str, ...]
    injected: bool

    @property
    def meets_targets(self) -> bool:
        return (
            self.since_launch_s <= TARGET_FIRST_S
            and self.rss_after_prepare_mb <= TARGET_RSS_MB
            and not self.heavy_loaded
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "meets_targets": self.meets_targets}


def seed(url: str, embedder_name: str, live: bool) -> None:
    """A migrated database whose tenant holds one ACTIVE skill with vectors of the embedder (or no skill)."""
    engine = make_engine(url)
    migrate(engine)
    if live:
        with engine.begin() as conn:
            skill = insert_skill(
                conn,
                agent_id=AGENT,
                user_id=USER,
                canonical_hash="bench-cancel",
                name="cancel-reservation",
                description="Use when a customer asks to cancel an existing reservation.",
                content="---\nname: cancel-reservation\n---\nLook the reservation up, then cancel it.",
                status=SkillStatus.ACTIVE,
                trigger_queries=["cancel my reservation", "please cancel my booking", "I want to cancel my flight"],
                preconditions=["the reservation exists"],
                actor="bench",
            )
            write_skill_vectors(conn, skill, get_embedder(embedder_name))
    engine.dispose()


def child(url: str, calls: int = 0, env: dict[str, str] | None = None, query: str = QUERY) -> dict[str, Any]:
    """Run the child script in a fresh interpreter and return its report (``wall_s``: launch to exit)."""
    launched = time.time()
    args = {"url": url, "agent": AGENT, "user": USER, "query": query, "launched": launched, "calls": calls}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"agent process failed ({done.returncode}): {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report["wall_s"] = time.time() - launched
    return report


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


def measure(embedder_name: str, live: bool, calls: int = 50) -> AgentProcess:
    """One fresh agent process against a freshly seeded tenant."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'agent.db'}"
        seed(url, embedder_name, live)
        r = child(url, calls, env={"SKILLFLOW_EMBEDDER": embedder_name})
    loaded = set(r["modules"])
    return AgentProcess(
        embedder=embedder_name,
        live=live,
        since_launch_s=round(r["since_launch_s"], 3),
        import_s=round(r["import_s"], 3),
        first_prepare_s=round(r["first_prepare_s"], 3),
        rss_after_prepare_mb=round(r["rss_after_prepare_mb"], 1),
        rss_peak_mb=round(r["rss_peak_mb"], 1),
        modules_after_prepare=int(r["modules_after_prepare"]),
        later_p50_ms=round(_pct(r["later_ms"], 0.5), 3),
        later_p95_ms=round(_pct(r["later_ms"], 0.95), 3),
        heavy_loaded=tuple(m for m in HEAVY if m in loaded),
        injected=bool(r["skill_ids"]),
    )


def run(embedder_name: str = "minilm", calls: int = 50) -> list[AgentProcess]:
    """A tenant with a live skill, then one with none (which must not load the embedder)."""
    return [measure(embedder_name, True, calls), measure(embedder_name, False, calls)]
