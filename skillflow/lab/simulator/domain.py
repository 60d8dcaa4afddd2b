"""A small airline/orders world: in-memory state and tools that really execute against it.

Unknown ids raise :class:`NotFoundError` (a ``KeyError``-like lookup failure); invalid operations raise
:class:`InvalidStateError`; a payment that is declined returns ``{"accepted": False}`` without raising
(the classic example of a run whose tools never fail but whose task does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

BAG_FEE = 50.0
BreakMode = Literal["error", "wrong"]


class SimToolError(Exception):
    """A tool failure the agent sees as a step error; the class name is the step's error class."""


class NotFoundError(SimToolError, LookupError):
    pass


class InvalidStateError(SimToolError, ValueError):
    pass


class ServiceUnavailableError(SimToolError, RuntimeError):
    pass


@dataclass
class PaymentMethod:
    id: str
    kind: Literal["credit_card", "gift_card"]
    balance: float | None = None  # gift cards only
    expired: bool = False  # credit cards only


@dataclass
class User:
    id: str
    name: str
    payment_methods: dict[str, PaymentMethod] = field(default_factory=dict)
    reservation_ids: list[str] = field(default_factory=list)
    order_ids: list[str] = field(default_factory=list)


@dataclass
class Flight:
    number: str
    origin: str
    destination: str
    date: str
    price: float
    seats: int


@dataclass
class Reservation:
    id: str
    user_id: str
    flight_number: str
    origin: str
    destination: str
    date: str
    passengers: int
    paid: float
    payment_id: str
    status: Literal["active", "cancelled"] = "active"
    baggages: int = 0


@dataclass
class Order:
    id: str
    user_id: str
    item: str
    amount: float
    payment_id: str
    status: Literal["delivered", "refunded"] = "delivered"


@dataclass
class State:
    users: dict[str, User] = field(default_factory=dict)
    flights: dict[str, Flight] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    orders: dict[str, Order] = field(default_factory=dict)
    charges: list[dict[str, Any]] = field(default_factory=list)


def _get(table: dict[str, Any], key: Any, kind: str) -> Any:
    if not isinstance(key, str) or key not in table:
        raise NotFoundError(f"{kind} {key} not found")
    return table[key]


class Tools:
    """The toolbox. ``call(name, arguments)`` executes one tool; ``broken`` makes tools fail (drift demos)."""

    NAMES = (
        "get_user_details",
        "get_reservation_details",
        "search_direct_flight",
        "book_reservation",
        "cancel_reservation",
        "update_reservation_baggages",
        "charge_payment",
        "lookup_order",
        "issue_refund",
    )

    def __init__(self, state: State) -> None:
        self.state = state
        self.broken: dict[str, BreakMode] = {}
        self._counter = 0

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if name not in self.NAMES:
            raise NotFoundError(f"tool {name} not found")
        mode = self.broken.get(name)
        if mode == "error":
            raise ServiceUnavailableError(f"{name} is unavailable")
        if mode == "wrong":
            return self._wrong(name, arguments)
        try:
            return getattr(self, name)(**arguments)
        except TypeError as exc:  # wrong argument names: the tool rejects the call
            raise InvalidStateError(f"bad arguments for {name}") from exc

    def _wrong(self, name: str, arguments: dict[str, Any]) -> Any:
        # A silently broken backend: it answers but does nothing (a cancellation that stays active).
        if name == "cancel_reservation":
            res = _get(self.state.reservations, arguments.get("reservation_id"), "reservation")
            return {"reservation_id": res.id, "status": res.status, "refund": 0.0}
        return {"accepted": False}

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter:06d}"

    # -- users and payments ------------------------------------------------------------------------
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        user: User = _get(self.state.users, user_id, "user")
        return {
            "user_id": user.id,
            "name": user.name,
            "payment_methods": [asdict(p) for p in user.payment_methods.values()],
            "reservations": [
                {"reservation_id": r.id, "destination": r.destination, "date": r.date, "status": r.status}
                for r in (self.state.reservations[rid] for rid in user.reservation_ids)
            ],
            "orders": list(user.order_ids),
        }

    def charge_payment(self, user_id: str, payment_id: str, amount: float) -> dict[str, Any]:
        user: User = _get(self.state.users, user_id, "user")
        method: PaymentMethod = _get(user.payment_methods, payment_id, "payment method")
        if amount <= 0:
            raise InvalidStateError("amount must be positive")
        if method.expired or (method.balance is not None and method.balance < amount):
            return {"accepted": False, "reason": "declined"}
        if method.balance is not None:
            method.balance = round(method.balance - amount, 2)
        charge_id = self._next_id("ch_")
        self.state.charges.append({"id": charge_id, "payment_id": payment_id, "amount": amount})
        return {"accepted": True, "charge_id": charge_id, "amount": amount}

    # -- flights and reservations ------------------------------------------------------------------
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        return [
            asdict(f)
            for f in self.state.flights.values()
            if f.origin == origin and f.destination == destination and f.date == date and f.seats > 0
        ]

    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        return asdict(_get(self.state.reservations, reservation_id, "reservation"))

    def book_reservation(
        self, user_id: str, flight_number: str, date: str, passengers: int, payment_id: str
    ) -> dict[str, Any]:
        flight: Flight = _get(self.state.flights, flight_number, "flight")
        if flight.date != date:
            raise InvalidStateError(f"flight {flight_number} not available on date {date}")
        if flight.seats < passengers:
            raise InvalidStateError(f"not enough seats on flight {flight_number}")
        total = round(flight.price * passengers, 2)
        charge = self.charge_payment(user_id, payment_id, total)
        if not charge["accepted"]:
            return {"accepted": False, "reason": charge["reason"], "total": total}
        flight.seats -= passengers
        res = Reservation(
            self._next_id("R"),
            user_id,
            flight.number,
            flight.origin,
            flight.destination,
            date,
            passengers,
            total,
            payment_id,
        )
        self.state.reservations[res.id] = res
        self.state.users[user_id].reservation_ids.append(res.id)
        return {"accepted": True, "reservation_id": res.id, "total": total}

    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        res: Reservation = _get(self.state.reservations, reservation_id, "reservation")
        if res.status == "cancelled":
            raise InvalidStateError(f"reservation {reservation_id} is already cancelled")
        res.status = "cancelled"
        return {"reservation_id": res.id, "status": res.status, "refund": res.paid}

    def update_reservation_baggages(self, reservation_id: str, total_baggages: int) -> dict[str, Any]:
        res: Reservation = _get(self.state.reservations, reservation_id, "reservation")
        if res.status != "active":
            raise InvalidStateError(f"reservation {reservation_id} is not active")
        if total_baggages < res.baggages:
            raise InvalidStateError("baggages cannot be removed")
        res.baggages = total_baggages
        return {"reservation_id": res.id, "baggages": res.baggages}

    # -- orders ------------------------------------------------------------------------------------
    def lookup_order(self, order_id: str) -> dict[str, Any]:
        return asdict(_get(self.state.orders, order_id, "order"))

    def issue_refund(self, order_id: str, amount: float) -> dict[str, Any]:
        order: Order = _get(self.state.orders, order_id, "order")
        if order.status == "refunded":
            raise InvalidStateError(f"order {order_id} is already refunded")
        if amount > order.amount:
            raise InvalidStateError(f"refund {amount} exceeds order amount {order.amount}")
        order.status = "refunded"
        return {"accepted": True, "order_id": order.id, "refunded": amount}
