"""Realistic evidence for the distillation/validation tests: a τ-bench-like cancel-reservation class."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr

from skillflow.kernel import canonical
from skillflow.kernel.config import Settings
from skillflow.kernel.models import ClassStats, EvidenceRun
from skillflow.promotion.evidence import Evidence

TOOLBOX = [
    "get_user_details",
    "get_reservation_details",
    "cancel_reservation",
    "book_reservation",
    "search_direct_flight",
    "transfer_to_human_agents",
    "think",
]
T0 = datetime(2024, 5, 15, 15, 0, tzinfo=UTC)

# (query, user id, reservation id, reason)
SUCCESS_CASES = [
    (
        "Hi, I want to cancel my reservation ZFA04Y. My user id is mia_li_3668.",
        "mia_li_3668",
        "ZFA04Y",
        "change_of_plan",
    ),
    ("Please cancel reservation H9ZU1C, user raj_sanchez_7340", "raj_sanchez_7340", "H9ZU1C", "change_of_plan"),
    (
        "I need to cancel my reservation NM1VX1 because my plans changed (user ivan_muller_7015)",
        "ivan_muller_7015",
        "NM1VX1",
        "change_of_plan",
    ),
    ("Cancel reservation 4WQ150 please. I am omar_davis_3817", "omar_davis_3817", "4WQ150", "airline_cancelled_flight"),
    (
        "Could you cancel the reservation EUJUY6 for user sofia_kim_7287? Email sofia.kim7287@example.com",
        "sofia_kim_7287",
        "EUJUY6",
        "change_of_plan",
    ),
]


def _steps(user: str, rid: str, reason: str, email: str | None = None) -> list[dict[str, Any]]:
    def at(i: int) -> str:
        return (T0 + timedelta(seconds=i)).isoformat()

    return [
        {
            "tool": "get_user_details",
            "arguments": {"user_id": user},
            "result": {
                "name": {"first_name": "Mia", "last_name": "Li"},
                "email": email or "mia.li3431@example.com",
                "payment_methods": {"credit_card_4421486": {"brand": "visa", "last_four": "7447"}},
                "reservations": [rid, "NO6JO3"],
            },
            "error": None,
            "error_class": None,
            "timestamp": at(0),
        },
        {
            "tool": "think",
            "arguments": {"thought": "check the cancellation policy"},
            "result": None,
            "error": None,
            "error_class": None,
            "timestamp": at(1),
        },
        {
            "tool": "get_reservation_details",
            "arguments": {"reservation_id": rid},
            "result": {
                "reservation_id": rid,
                "user_id": user,
                "origin": "JFK",
                "destination": "SEA",
                "flights": [{"flight_number": "HAT136", "date": "2024-05-20", "price": 1231}],
                "created_at": "2024-05-14T09:00:00",
                "insurance": "yes",
            },
            "error": None,
            "error_class": None,
            "timestamp": at(2),
        },
        {
            "tool": "cancel_reservation",
            "arguments": {
                "reservation_id": rid,
                "reason": {"code": reason, "refund": {"amount": 1231, "to": "credit_card_4421486"}},
            },
            "result": {"status": "cancelled"},
            "error": None,
            "error_class": None,
            "timestamp": at(3),
        },
    ]


def signature_of(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    units = canonical.signature(canonical.steps_from_document({"steps": steps}))
    return [u.as_hashable() for u in units]


def cancel_evidence(
    failures: list[EvidenceRun] | None = None, toolbox: list[str] | None = None, **overrides: Any
) -> Evidence:
    successes = [
        EvidenceRun(f"run-{i}", q, _steps(u, r, why), "success", T0 + timedelta(hours=i))
        for i, (q, u, r, why) in enumerate(SUCCESS_CASES)
    ]
    sig = signature_of(successes[0].steps)
    chash = canonical.canonical_hash(canonical.signature(canonical.steps_from_document({"steps": successes[0].steps})))
    assert chash
    failures = (
        failures
        if failures is not None
        else [
            EvidenceRun(
                "run-f1",
                "cancel my reservation XK39PL I booked yesterday, user liam_wong_5521",
                _steps("liam_wong_5521", "XK39PL", "weather_delay_9911"),
                "failure",
                T0 + timedelta(hours=9),
            )
        ]
    )
    stats = ClassStats(
        agent_id="airline-agent",
        user_id="tau",
        canonical_hash=chash,
        executions=6,
        successes=5,
        failures=1,
        unknown=0,
        success_rate=5 / 6,
        distinct_queries=6,
        first_seen=T0,
        last_seen=T0 + timedelta(hours=9),
        tool_sequence=" > ".join(u["tool"] for u in sig),
    )
    ev = Evidence(
        stats=stats,
        signature=sig,
        successes=successes,
        failures=failures,
        toolbox=list(TOOLBOX if toolbox is None else toolbox),
    )
    return replace(ev, **overrides) if overrides else ev


def errored_failure() -> EvidenceRun:
    """A failed run whose last step raised: the skill must handle ``ReservationNotFound``."""
    steps = _steps("zoe_park_1408", "QQ77RT", "change_of_plan")
    steps[-1] = {
        **steps[-1],
        "result": None,
        "error": "reservation QQ77RT not found",
        "error_class": "ReservationNotFound",
    }
    return EvidenceRun("run-f2", "cancel QQ77RT for zoe_park_1408", steps, "failure", T0 + timedelta(hours=10))


def llm_settings(server: Any) -> Settings:
    """The OpenAI distiller and judge pointed at a local ``FakeLLMServer``, no retries, the hashing embedder."""
    return Settings(
        embedder="hashing",
        distiller="openai",
        judge="openai",
        llm_model="test-model",
        llm_base_url=server.openai_base_url,
        openai_api_key=SecretStr("sk-test"),
        llm_max_retries=0,
        llm_timeout_seconds=10,
    )


def evidence_with_key(key: str) -> Evidence:
    """:func:`cancel_evidence` whose successful runs' last call also carries the argument ``key`` (a key the
    agent's model may have made up: an attacker's, or a secret)."""
    runs = []
    for run in cancel_evidence().successes:
        steps = [dict(s) for s in run.steps]
        steps[-1] = {**steps[-1], "arguments": {**steps[-1].get("arguments", {}), key: "yes"}}
        runs.append(EvidenceRun(run.id, run.query, steps, run.outcome, run.created_at))
    return cancel_evidence(successes=runs)


def fleet_llm_env(url: str, port: int, **extra: str) -> dict[str, str]:
    """A fleet's environment whose runs distill with the real OpenAI SDK against a provider on 127.0.0.1:``port``
    (no retries: a test's provider answers at once or on purpose never), judged offline, hashing embedder."""
    return {
        "SKILLFLOW_DATABASE_URL": url,
        "SKILLFLOW_DISTILLER": "openai",
        "SKILLFLOW_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "SKILLFLOW_OPENAI_API_KEY": "sk-fleet-test",
        "SKILLFLOW_LLM_MAX_RETRIES": "0",
        "SKILLFLOW_JUDGE": "offline",
        "SKILLFLOW_EMBEDDER": "hashing",
        **extra,
    }
