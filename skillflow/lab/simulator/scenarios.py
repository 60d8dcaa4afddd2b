"""Intents, paraphrased request templates and per-task worlds; ``execute(procedure, task)`` runs one.

Every task owns a small world (its customer, reservations, flights, orders, payment methods) built from
the random generator, so a task can be executed again and again (an evaluation harness runs several
arms on the same held-out task) and its expected tools and answer are those of the good procedure.
Literal values (ids, names, dates, amounts) vary per task. Six templates per intent are used for
simulated traffic; two more per intent are held out for evaluation.
"""

from __future__ import annotations

import copy
import random
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from skillflow.kernel.models import Step
from skillflow.lab.simulator.domain import (
    BAG_FEE,
    BreakMode,
    Flight,
    Order,
    PaymentMethod,
    Reservation,
    State,
    Tools,
    User,
)
from skillflow.lab.simulator.procedures import BY_NAME, Abort, Agent, Procedure, good_procedure
from skillflow.lab.simulator.templates import HELD_OUT, TEMPLATES

INTENTS: tuple[str, ...] = tuple(TEMPLATES)
INTENT_WEIGHTS = {
    "cancel_reservation": 0.3,
    "check_reservation": 0.15,
    "book_flight": 0.2,
    "refund_order": 0.2,
    "add_baggage": 0.15,
}
AIRPORTS = ("JFK", "SEA", "LAX", "SFO", "ORD", "MIA", "BOS", "DEN", "ATL", "PHX")
FIRST = ("mia", "noah", "emma", "liam", "ava", "omar", "yara", "raj", "lena", "ivan", "sofia", "kenji")
LAST = ("li", "garcia", "smith", "khan", "rossi", "nguyen", "muller", "silva", "kim", "haddad")
ITEMS = ("headphones", "backpack", "coffee maker", "desk lamp", "running shoes", "keyboard", "tent")
STALE_RATE = 0.3  # customers cite an old or mistyped reservation id this often


@dataclass(frozen=True)
class Task:
    """One customer request with everything needed to judge an answer to it."""

    intent: str
    request: str
    expected_tools: tuple[str, ...]
    expected_answer: str
    slots: Mapping[str, Any] = field(compare=False)
    world: State = field(compare=False, repr=False)


@dataclass(frozen=True)
class Execution:
    procedure: str
    steps: tuple[Step, ...]
    answer: str
    answer_correct: bool


def _rid(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_uppercase + string.digits, k=6))


def _date(rng: random.Random) -> str:
    return f"2024-{rng.randint(5, 9):02d}-{rng.randint(1, 28):02d}"


def _customer(rng: random.Random, world: State, gift_balance: float) -> User:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    user = User(f"{first}_{last}_{rng.randint(1000, 9999)}", f"{first.title()} {last.title()}")
    for method in (
        PaymentMethod(f"credit_card_{rng.randint(1000000, 9999999)}", "credit_card"),
        PaymentMethod(f"gift_card_{rng.randint(1000000, 9999999)}", "gift_card", balance=gift_balance),
    ):
        user.payment_methods[method.id] = method
    world.users[user.id] = user
    return user


def _reservation(rng: random.Random, world: State, user: User, status: str = "active") -> Reservation:
    origin, destination = rng.sample(AIRPORTS, 2)
    passengers = rng.randint(1, 3)
    res = Reservation(
        _rid(rng), user.id, f"HAT{rng.randint(1, 399):03d}", origin, destination, _date(rng), passengers,
        float(rng.randint(120, 600) * passengers), next(iter(user.payment_methods)), status,  # type: ignore[arg-type]  # status is one of the literals
        rng.randint(0, 2),
    )  # fmt: skip
    world.reservations[res.id] = res
    user.reservation_ids.append(res.id)
    return res


def _payment(rng: random.Random, user: User) -> str:
    """The payment method the customer names: their gift card 60 % of the time, else the credit card."""
    credit, gift = list(user.payment_methods)
    return gift if rng.random() < 0.6 else credit


def _reservation_world(rng: random.Random, world: State, stale: bool = True) -> dict[str, Any]:
    user = _customer(rng, world, float(rng.randint(0, 150)))
    res = _reservation(rng, world, user)
    cited = res.id
    if stale and rng.random() < STALE_RATE:
        if rng.random() < 0.5:  # an old, already cancelled booking of the same customer
            cited = _reservation(rng, world, user, status="cancelled").id
        else:  # a typo
            cited = res.id[:-1] + ("X" if res.id[-1] != "X" else "Y")
    rng.shuffle(user.reservation_ids)
    payment = _payment(rng, user)
    return {
        "user_id": user.id,
        "name": user.name,
        "reservation_id": cited,
        "origin": res.origin,
        "destination": res.destination,
        "date": res.date,
        "bags": rng.randint(1, 2),
        "bag_fee": BAG_FEE,
        "payment_id": payment,
        "payment": "gift card" if payment.startswith("gift") else "credit card",
    }


def _booking_world(rng: random.Random, world: State) -> dict[str, Any]:
    user = _customer(rng, world, float(rng.randint(100, 700)))
    origin, destination = rng.sample(AIRPORTS, 2)
    date = _date(rng)
    for _ in range(rng.randint(1, 3)):
        number = f"HAT{rng.randint(1, 399):03d}"
        world.flights[number] = Flight(
            number, origin, destination, date, float(rng.randint(150, 500)), rng.randint(1, 9)
        )
    payment = _payment(rng, user)
    return {
        "user_id": user.id,
        "name": user.name,
        "origin": origin,
        "destination": destination,
        "date": date,
        "passengers": rng.randint(1, 2),
        "payment_id": payment,
        "payment": "gift card" if payment.startswith("gift") else "credit card",
    }


def _order_world(rng: random.Random, world: State) -> dict[str, Any]:
    user = _customer(rng, world, 0.0)
    amount = float(rng.randint(20, 400))
    order = Order(
        f"#W{rng.randint(1000000, 9999999)}", user.id, rng.choice(ITEMS), amount, next(iter(user.payment_methods))
    )
    if rng.random() < 0.25:
        order.status = "refunded"
    world.orders[order.id] = order
    user.order_ids.append(order.id)
    stated = amount if rng.random() < 0.65 else amount + rng.randint(5, 50)
    return {"user_id": user.id, "name": user.name, "order_id": order.id, "item": order.item, "amount": stated}


WORLDS = {
    "cancel_reservation": _reservation_world,
    "check_reservation": _reservation_world,
    "add_baggage": lambda rng, world: _reservation_world(rng, world, stale=False),
    "book_flight": _booking_world,
    "refund_order": _order_world,
}


def execute(
    procedure: Procedure | str,
    task: Task,
    broken: Mapping[str, BreakMode] | None = None,
    clock: datetime | None = None,
) -> Execution:
    """Run ``procedure`` on a fresh copy of the task's world (so a task can be executed many times)."""
    proc = BY_NAME[procedure] if isinstance(procedure, str) else procedure
    if proc.intent != task.intent:
        raise ValueError(f"procedure {proc.name} does not solve intent {task.intent}")
    tools = Tools(copy.deepcopy(task.world))
    tools.broken = dict(broken or {})
    agent = Agent(tools, clock)
    try:
        answer = proc.body(agent, task.slots)
    except Abort as exc:
        answer = f"I could not complete the request ({exc})."
    return Execution(proc.name, tuple(agent.steps), answer, answer == task.expected_answer)


def new_task(intent: str, rng: random.Random, held_out: bool = False) -> Task:
    """A task for ``intent`` with a fresh world; ``held_out`` draws from the evaluation templates."""
    world = State()
    slots = WORLDS[intent](rng, world)
    template = rng.choice((HELD_OUT if held_out else TEMPLATES)[intent])
    probe = Task(intent, template.format(**slots), (), "", slots, world)
    reference = execute(good_procedure(intent), probe)
    return Task(intent, probe.request, tuple(s.tool for s in reference.steps), reference.answer, slots, world)


def held_out_requests(intent: str, n: int = 10, seed: int = 0) -> list[Task]:
    """Deterministic evaluation tasks phrased with templates the simulated traffic never uses."""
    rng = random.Random(f"held-out:{intent}:{seed}")
    return [new_task(intent, rng, held_out=True) for _ in range(n)]
