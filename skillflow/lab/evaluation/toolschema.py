"""JSON schemas of the simulator's tools, for the OpenAI and Anthropic tool-calling APIs."""

from __future__ import annotations

from typing import Any

from skillflow.lab.simulator import Tools

_S = {"type": "string"}
_N = {"type": "number"}
_I = {"type": "integer"}

TOOL_SPECS: dict[str, tuple[str, dict[str, dict[str, str]]]] = {
    "get_user_details": ("A customer's profile: payment methods, reservations, orders.", {"user_id": _S}),
    "get_reservation_details": ("One reservation's details.", {"reservation_id": _S}),
    "search_direct_flight": (
        "Direct flights with free seats on a date (dates are YYYY-MM-DD, airports IATA codes).",
        {"origin": _S, "destination": _S, "date": _S},
    ),
    "book_reservation": (
        "Book a flight and charge the payment method for price x passengers.",
        {"user_id": _S, "flight_number": _S, "date": _S, "passengers": _I, "payment_id": _S},
    ),
    "cancel_reservation": ("Cancel an active reservation; returns the refund.", {"reservation_id": _S}),
    "update_reservation_baggages": (
        "Set the total number of checked bags of an active reservation.",
        {"reservation_id": _S, "total_baggages": _I},
    ),
    "charge_payment": ("Charge a customer's payment method.", {"user_id": _S, "payment_id": _S, "amount": _N}),
    "lookup_order": ("One shop order's details.", {"order_id": _S}),
    "issue_refund": ("Refund an order (at most its amount).", {"order_id": _S, "amount": _N}),
}
assert set(TOOL_SPECS) == set(Tools.NAMES), "tool schemas out of step with the simulator"


def _parameters(props: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def openai_tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "description": d, "parameters": _parameters(p)}}
        for n, (d, p) in TOOL_SPECS.items()
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": n, "description": d, "input_schema": _parameters(p)} for n, (d, p) in TOOL_SPECS.items()]
