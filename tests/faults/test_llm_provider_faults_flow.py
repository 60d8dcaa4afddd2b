"""The LLM provider failing in every way, through the shipped ``promotion-cycle`` flow under Prefect.

The OpenAI distiller (the official SDK, configured by ``SKILLFLOW_*`` settings as in production) talks to a
local server on 127.0.0.1 that answers each class's requests from its own script: 429, 500 and a timeout
followed by a good answer (retried: two requests), and 400, 401, malformed JSON and an empty body
(recorded as the class's rejection, one request, never retried). Each faulty class sits in its own
partition next to a healthy class, and one partition has only a healthy class: everything healthy
promotes, and the flow run completes. A transient error that outlives every retry fails only its
partition: the others finish and the flow run ends Failed naming it (docs/guide/promotion.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from skillflow.kernel.config import PromotionConfig
from skillflow.kernel.models import utcnow
from skillflow.promotion.distill import OfflineDistiller
from skillflow.promotion.stages import assess_classes, gather_evidence
from skillflow.runtime import Skillflow
from skillflow.storage.aggregate import partitions
from skillflow.storage.engine import make_engine
from skillflow.storage.migrations import migrate
from skillflow.storage.schema import class_state, reports, skillbox
from tests.faults.llm_server import RoutedLLMServer
from tests.support.fake_llm_server import Raw, Reply
from tests.support.promotion import AGENT, TOOLS, record_payment

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

LLM_TIMEOUT = 0.5
FAST = {"Retry-After": "0"}  # what rate limiters send; keeps our backoff short
TRANSIENT = ("429", "500", "timeout")
FATAL = {
    "400": "distillation failed: LLMError (BadRequestError)",
    "401": "distillation failed: LLMError (AuthenticationError)",
    "malformed": "distillation failed: LLMError (JSONDecodeError)",
    "empty": "distillation failed: LLMError (JSONDecodeError)",
}
OVERRIDES: dict[str, Any] = {"require_shadow": True, "max_promotions_per_cycle": 5, "shadow_evaluation_enabled": False}
QUERIES = [
    "Please refund order {oid}",
    "I want my money back for order {oid}",
    "refund {oid}, the parcel never came",
    "Can you refund my order {oid}?",
    "order {oid} arrived broken, refund please",
    "I need a refund for {oid}",
]


def tool(fault: str) -> str:
    return f"refund_{fault}"


def first_fault(fault: str) -> Reply | Raw:
    return {
        "429": Reply(status=429, headers=FAST),
        "500": Reply(status=500, headers=FAST),
        "timeout": Reply("too late", delay=LLM_TIMEOUT * 3),
        "400": Reply(status=400),
        "401": Reply(status=401),
        "malformed": Raw(b'{"id": "chatcmpl-x", "choices": [{"index": 0, "message": {"content": "---\\nna'),
        "empty": Raw(b""),
    }[fault]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoutedLLMServer]:
    with RoutedLLMServer() as srv:
        for key, value in {
            "SKILLFLOW_DISTILLER": "openai",
            "SKILLFLOW_JUDGE": "offline",
            "SKILLFLOW_EMBEDDER": "hashing",
            "SKILLFLOW_LLM_BASE_URL": srv.openai_base_url,
            "SKILLFLOW_OPENAI_API_KEY": "sk-test",
            "SKILLFLOW_LLM_MODEL": "test-model",
            "SKILLFLOW_LLM_TIMEOUT_SECONDS": str(LLM_TIMEOUT),
            "SKILLFLOW_LLM_MAX_RETRIES": "1",
        }.items():
            monkeypatch.setenv(key, value)
        yield srv


def _seed(engine: Engine, faults: list[str]) -> None:
    migrate(engine)
    sf = Skillflow(agent_id=AGENT, engine=engine, config=PromotionConfig(**OVERRIDES))
    sf.register_tools([*TOOLS, *(tool(f) for f in faults)])
    for fault in faults:
        user = f"u-{fault}"
        for i in range(6):
            oid = f"OR{7700 + i}Q"
            steps = [
                {"tool": "lookup_order", "arguments": {"order_id": oid}, "result": {"total": 40 + i}},
                {"tool": tool(fault), "arguments": {"order_id": oid}, "result": {"status": "refunded"}},
            ]
            assert sf.record_run(QUERIES[i].format(oid=oid), user, steps, run_id=f"{user}-{i}", strict=True).stored
            record_payment(sf, user, i, accepted=True)
    for i in range(6):
        record_payment(sf, "u-ok", i, accepted=True)


def _good_answers(engine: Engine) -> dict[str, list[str]]:
    """The SKILL.md a good model would answer for each class (the offline distiller's), by signature tool."""
    config = PromotionConfig(**OVERRIDES)
    out: dict[str, list[str]] = {}
    with engine.connect() as conn:
        pairs = partitions(conn, AGENT, None)
    for agent_id, user_id in pairs:
        for a in assess_classes(engine, agent_id, user_id, config, utcnow(), 1):
            assert a.eligible, (user_id, a.gate.reason)
            evidence = gather_evidence(engine, a.stats, config)
            skill = OfflineDistiller().distill(evidence, config.skill_max_content_chars).skill_md
            assert skill
            marker = (a.stats.tool_sequence or "").split(" > ")[-1]
            out.setdefault(marker, []).append(skill)
    return out


def _run_flow(url: str) -> Any:
    from flows.promotion_cycle import PromotionCycleParams, promotion_cycle

    params = PromotionCycleParams(database_url=url, config_overrides=OVERRIDES, force=True)
    return promotion_cycle(params, return_state=True)


def _skills(engine: Engine) -> set[tuple[str, str]]:
    """(user, last tool of the class) of every stored skill."""
    from skillflow.storage.schema import workflow_memory as wm

    with engine.connect() as conn:
        rows = conn.execute(select(skillbox.c.user_id, skillbox.c.canonical_hash)).all()
        last = {
            (r.user_id, r.canonical_hash): conn.execute(
                select(wm.c.signature).where(wm.c.canonical_hash == r.canonical_hash).limit(1)
            ).scalar()
            for r in rows
        }
    return {(user, (sig or [{}])[-1].get("tool", "")) for (user, _h), sig in last.items()}


def test_provider_faults_through_the_flow(prefect_harness: None, server: RoutedLLMServer, tmp_path: Path) -> None:
    faults = [*TRANSIENT, *FATAL]
    url = f"sqlite:///{tmp_path / 'llm.db'}"
    engine = make_engine(url)
    _seed(engine, faults)
    good = _good_answers(engine)
    assert len(good["charge_payment"]) == len(faults) + 1 and len(set(good["charge_payment"])) == 1
    server.route("charge_payment", *(Reply(s) for s in good["charge_payment"]))
    for fault in faults:
        [answer] = good[tool(fault)]
        server.route(tool(fault), first_fault(fault), *([Reply(answer)] if fault in TRANSIENT else []))

    state = _run_flow(url)
    assert state.is_completed(), state.message  # no flow crash, no partition failed
    stored = {r.user_id: r for r in state.result()}
    assert set(stored) == {f"u-{f}" for f in faults} | {"u-ok"}

    for fault in TRANSIENT:  # retried once by the SDK layer, then promoted
        assert server.requests_for(tool(fault)) == 2, fault
        report = stored[f"u-{fault}"]
        assert len(report.promoted) == 2 and report.rejected == [] and report.partition_failed is None, fault
    with engine.connect() as conn:
        states = {(r.user_id, r.canonical_hash): r for r in conn.execute(select(class_state))}
    for fault, reason in FATAL.items():  # one request, never retried; the class is a recorded rejection
        assert server.requests_for(tool(fault)) == 1, fault
        report = stored[f"u-{fault}"]
        [(chash, reasons)] = report.rejected
        assert reasons == [reason], fault
        assert len(report.promoted) == 1 and report.partition_failed is None  # the healthy class went on
        row = states[(f"u-{fault}", chash)]
        assert row.last_reasons == [reason] and row.retry_after_cycle == 1 + PromotionConfig().rejection_backoff_cycles
    assert server.requests_for("charge_payment") == len(faults) + 1  # every healthy class: one request
    assert stored["u-ok"].promoted and stored["u-ok"].partition_failed is None
    got = _skills(engine)
    assert sorted(u for (u, t) in got if t == "charge_payment") == sorted(stored)
    assert {(u, t) for (u, t) in got if t.startswith("refund_")} == {(f"u-{f}", tool(f)) for f in TRANSIENT}
    engine.dispose()


def test_transient_error_past_every_retry_fails_only_its_partition(
    prefect_harness: None, server: RoutedLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.promotion

    task = tasks.promotion.cycle_partition
    monkeypatch.setattr(task, "retry_delay_seconds", [0.0] * task.retries)  # the shipped retries, without the wait
    url = f"sqlite:///{tmp_path / 'llm.db'}"
    engine = make_engine(url)
    _seed(engine, ["429"])
    good = _good_answers(engine)
    server.route("charge_payment", *(Reply(s) for s in good["charge_payment"] * 4))  # re-runs re-distil nothing
    server.route(tool("429"), *[Reply(status=429, headers=FAST)] * 50)

    state = _run_flow(url)
    assert state.is_failed() and "1 of 2 partition(s) failed" in str(state.message)
    # One retry layer (docs/RELIABILITY.md, "Retries"): the provider wrapper's 1 + SKILLFLOW_LLM_MAX_RETRIES
    # requests; the task's own retries leave a provider error its wrapper already retried alone.
    assert server.requests_for(tool("429")) == 1 + 1
    with engine.connect() as conn:
        bodies = {r.user_id: r.body for r in conn.execute(select(reports.c.user_id, reports.c.body))}
        assert conn.execute(select(class_state)).first() is None  # transient: not a rejection, the next cycle retries
    assert bodies["u-429"]["partition_failed"] == "failed: TransientLLMError"
    assert bodies["u-ok"]["partition_failed"] is None and len(bodies["u-ok"]["promoted"]) == 1
    assert {u for (u, _t) in _skills(engine)} == {"u-ok"}  # the failed partition wrote no skill
    engine.dispose()
