"""How the simulated agent can solve each intent: one good procedure and reliably worse ones.

A procedure reads the request's slots, calls tools through :class:`Agent` (which records every call as a
:class:`~skillflow.kernel.models.Step`) and returns its answer. A tool error ends the run, as an agent that gives
up would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from skillflow.kernel.models import Step
from skillflow.lab.simulator.domain import SimToolError, Tools


class Abort(Exception):
    """A tool failed; the run stops here."""


class Agent:
    """Executes tool calls against a world and records them as steps."""

    def __init__(self, tools: Tools, clock: datetime | None = None) -> None:
        self.tools = tools
        self.steps: list[Step] = []
        self._clock = clock

    def call(self, tool: str, **arguments: Any) -> Any:
        stamp = self._clock + timedelta(seconds=len(self.steps)) if self._clock else None
        try:
            result = self.tools.call(tool, arguments)
        except SimToolError as exc:
            self.steps.append(Step(tool, dict(arguments), None, str(exc), type(exc).__name__, stamp))
            raise Abort(type(exc).__name__) from exc
        self.steps.append(Step(tool, dict(arguments), result, None, None, stamp))
        return result


Slots = Mapping[str, Any]
Body = Callable[[Agent, Slots], str]


@dataclass(frozen=True)
class Procedure:
    name: str
    intent: str
    tools: tuple[str, ...]  # the nominal trajectory (what a skill for this procedure would declare)
    good: bool
    body: Body


def _pick_reservation(user: dict[str, Any], slots: Slots) -> str:
    for summary in user["reservations"]:
        if (
            summary["status"] == "active"
            and summary["destination"] == slots["destination"]
            and summary["date"] == slots["date"]
        ):
            return str(summary["reservation_id"])
    raise Abort("no matching reservation")


def _covering_payment(user: dict[str, Any], stated: str, amount: float) -> str:
    methods = {p["id"]: p for p in user["payment_methods"]}
    first = methods.get(stated)
    if first and not first["expired"] and (first["balance"] is None or first["balance"] >= amount):
        return stated
    for method in methods.values():
        if not method["expired"] and (method["balance"] is None or method["balance"] >= amount):
            return str(method["id"])
    raise Abort("no payment method covers the amount")


# -- cancel / check reservation -----------------------------------------------------------------------
def cancel_verified(a: Agent, s: Slots) -> str:
    rid = _pick_reservation(a.call("get_user_details", user_id=s["user_id"]), s)
    a.call("get_reservation_details", reservation_id=rid)
    done = a.call("cancel_reservation", reservation_id=rid)
    return f"Reservation {rid} is cancelled; {done['refund']:.2f} will be refunded."


def cancel_direct(a: Agent, s: Slots) -> str:
    done = a.call("cancel_reservation", reservation_id=s["reservation_id"])
    return f"Reservation {done['reservation_id']} is cancelled; {done['refund']:.2f} will be refunded."


def cancel_cited(a: Agent, s: Slots) -> str:
    a.call("get_reservation_details", reservation_id=s["reservation_id"])
    done = a.call("cancel_reservation", reservation_id=s["reservation_id"])
    return f"Reservation {done['reservation_id']} is cancelled; {done['refund']:.2f} will be refunded."


def _describe(r: dict[str, Any]) -> str:
    return (
        f"Reservation {r['id']}: {r['origin']} to {r['destination']} on {r['date']}, "
        f"{r['passengers']} passenger(s), {r['baggages']} bag(s), status {r['status']}."
    )


def check_verified(a: Agent, s: Slots) -> str:
    rid = _pick_reservation(a.call("get_user_details", user_id=s["user_id"]), s)
    return _describe(a.call("get_reservation_details", reservation_id=rid))


def check_cited(a: Agent, s: Slots) -> str:
    return _describe(a.call("get_reservation_details", reservation_id=s["reservation_id"]))


# -- book flight --------------------------------------------------------------------------------------
def _cheapest(flights: list[dict[str, Any]], passengers: int) -> dict[str, Any]:
    options = [f for f in flights if f["seats"] >= passengers]
    if not options:
        raise Abort("no flight")
    return min(options, key=lambda f: (f["price"], f["number"]))


def _booked(done: dict[str, Any], flight: dict[str, Any], passengers: int) -> str:
    if not done.get("accepted"):
        return f"The payment for flight {flight['number']} was declined."
    return f"Booked flight {flight['number']} for {passengers} passenger(s), total {done['total']:.2f}."


def book_checked(a: Agent, s: Slots) -> str:
    user = a.call("get_user_details", user_id=s["user_id"])
    flights = a.call("search_direct_flight", origin=s["origin"], destination=s["destination"], date=s["date"])
    flight = _cheapest(flights, s["passengers"])
    payment = _covering_payment(user, s["payment_id"], flight["price"] * s["passengers"])
    done = a.call(
        "book_reservation",
        user_id=s["user_id"],
        flight_number=flight["number"],
        date=s["date"],
        passengers=s["passengers"],
        payment_id=payment,
    )
    return _booked(done, flight, s["passengers"])


def book_stated_payment(a: Agent, s: Slots) -> str:
    flights = a.call("search_direct_flight", origin=s["origin"], destination=s["destination"], date=s["date"])
    flight = _cheapest(flights, s["passengers"])
    done = a.call(
        "book_reservation",
        user_id=s["user_id"],
        flight_number=flight["number"],
        date=s["date"],
        passengers=s["passengers"],
        payment_id=s["payment_id"],
    )
    return _booked(done, flight, s["passengers"])


# -- refund order -------------------------------------------------------------------------------------
def refund_checked(a: Agent, s: Slots) -> str:
    order = a.call("lookup_order", order_id=s["order_id"])
    if order["status"] == "refunded":
        return f"Order {order['id']} was already refunded."
    done = a.call("issue_refund", order_id=order["id"], amount=order["amount"])
    return f"Refunded {done['refunded']:.2f} for order {order['id']}."


def refund_stated_amount(a: Agent, s: Slots) -> str:
    done = a.call("issue_refund", order_id=s["order_id"], amount=s["amount"])
    return f"Refunded {done['refunded']:.2f} for order {done['order_id']}."


# -- add baggage --------------------------------------------------------------------------------------
def baggage_checked(a: Agent, s: Slots) -> str:
    res = a.call("get_reservation_details", reservation_id=s["reservation_id"])
    user = a.call("get_user_details", user_id=s["user_id"])
    fee = s["bags"] * s["bag_fee"]
    payment = _covering_payment(user, s["payment_id"], fee)
    charge = a.call("charge_payment", user_id=s["user_id"], payment_id=payment, amount=fee)
    if not charge["accepted"]:
        return "The baggage payment was declined."
    done = a.call("update_reservation_baggages", reservation_id=res["id"], total_baggages=res["baggages"] + s["bags"])
    return f"Reservation {res['id']} now has {done['baggages']} checked bag(s); charged {fee:.2f}."


def baggage_stated_payment(a: Agent, s: Slots) -> str:
    res = a.call("get_reservation_details", reservation_id=s["reservation_id"])
    fee = s["bags"] * s["bag_fee"]
    charge = a.call("charge_payment", user_id=s["user_id"], payment_id=s["payment_id"], amount=fee)
    # The naive procedure adds the bags whether or not the payment went through.
    done = a.call("update_reservation_baggages", reservation_id=res["id"], total_baggages=res["baggages"] + s["bags"])
    paid = f"charged {fee:.2f}" if charge["accepted"] else "the payment was declined"
    return f"Reservation {res['id']} now has {done['baggages']} checked bag(s); {paid}."


_U, _R, _C, _S = "get_user_details", "get_reservation_details", "cancel_reservation", "search_direct_flight"
PROCEDURES: tuple[Procedure, ...] = (
    Procedure("cancel_verified", "cancel_reservation", (_U, _R, _C), True, cancel_verified),
    Procedure("cancel_direct", "cancel_reservation", (_C,), False, cancel_direct),
    Procedure("cancel_cited", "cancel_reservation", (_R, _C), False, cancel_cited),
    Procedure("check_verified", "check_reservation", (_U, _R), True, check_verified),
    Procedure("check_cited", "check_reservation", (_R,), False, check_cited),
    Procedure("book_checked", "book_flight", (_U, _S, "book_reservation"), True, book_checked),
    Procedure(
        "book_stated_payment", "book_flight", ("search_direct_flight", "book_reservation"), False, book_stated_payment
    ),
    Procedure("refund_checked", "refund_order", ("lookup_order", "issue_refund"), True, refund_checked),
    Procedure("refund_stated_amount", "refund_order", ("issue_refund",), False, refund_stated_amount),
    Procedure(
        "baggage_checked",
        "add_baggage",
        (_R, _U, "charge_payment", "update_reservation_baggages"),
        True,
        baggage_checked,
    ),
    Procedure(
        "baggage_stated_payment",
        "add_baggage",
        (_R, "charge_payment", "update_reservation_baggages"),
        False,
        baggage_stated_payment,
    ),
)
BY_NAME = {p.name: p for p in PROCEDURES}


def procedures_for(intent: str) -> list[Procedure]:
    return [p for p in PROCEDURES if p.intent == intent]


def good_procedure(intent: str) -> Procedure:
    return next(p for p in PROCEDURES if p.intent == intent and p.good)
