"""Paraphrased customer requests per intent: six for simulated traffic, two held out for evaluation."""

from __future__ import annotations

TEMPLATES: dict[str, tuple[str, ...]] = {
    "cancel_reservation": (
        "Please cancel my reservation {reservation_id}. My user id is {user_id}.",
        "I need to cancel booking {reservation_id}, my trip {origin} to {destination} on {date}; user {user_id}.",
        "Can you cancel reservation {reservation_id}? I'm {user_id}.",
        "I won't be flying to {destination} on {date} after all. Cancel {reservation_id} please (user id {user_id}).",
        "Cancel my {origin}-{destination} flight, reservation number {reservation_id}, account {user_id}.",
        "Hi, this is {name} ({user_id}). I'd like to cancel reservation {reservation_id} and get my money back.",
    ),
    "check_reservation": (
        "What's the status of my reservation {reservation_id}? User id {user_id}.",
        "Can you check booking {reservation_id} for me? I'm {user_id}.",
        "Is my flight to {destination} on {date} still confirmed? Reservation {reservation_id}, user {user_id}.",
        "Please look up reservation {reservation_id} under account {user_id}.",
        "Hi, {name} here ({user_id}). How many bags are on reservation {reservation_id}?",
        "I want to review my {origin} to {destination} trip, reservation {reservation_id}, user {user_id}.",
    ),
    "book_flight": (
        "Book me a flight from {origin} to {destination} on {date} for {passengers} passenger(s); I'm {user_id}.",
        "Fly me {origin} to {destination} on {date}, {passengers} traveler(s), paying by {payment}. I'm {user_id}.",
        "Reserve the cheapest direct flight {origin}-{destination} on {date} for {passengers}. Account {user_id}.",
        "Hi, {name} ({user_id}) here. Can you book {passengers} seat(s) from {origin} to {destination} on {date}?",
        "Need a one-way ticket {origin} to {destination}, {date}, {passengers} person(s), by {payment}; id {user_id}.",
        "Find and book a direct flight from {origin} to {destination} on {date} for {passengers}, user id {user_id}.",
    ),
    "refund_order": (
        "I want a refund for order {order_id}; I paid {amount:.2f}. User {user_id}.",
        "Please refund my order {order_id} (the {item}). My user id is {user_id}.",
        "The {item} from order {order_id} broke. Can I get my {amount:.2f} back? I'm {user_id}.",
        "Refund order {order_id} please, account {user_id}.",
        "Hi, {name} ({user_id}). I returned the {item}, order {order_id}; please issue the refund of {amount:.2f}.",
        "Could you process a refund for {order_id}? It was {amount:.2f}. User id {user_id}.",
    ),
    "add_baggage": (
        "Add {bags} checked bag(s) to reservation {reservation_id}, charge my {payment}. User {user_id}.",
        "I need {bags} more suitcase(s) on booking {reservation_id}; I'm {user_id}.",
        "Add {bags} bag(s) to my flight to {destination} on {date}? Reservation {reservation_id}, user {user_id}.",
        "Please put {bags} extra checked bag(s) on reservation {reservation_id} for account {user_id}.",
        "Hi, {name} ({user_id}). I'd like to add {bags} bag(s) to {reservation_id} and pay with my {payment}.",
        "Extra luggage: {bags} bag(s) on reservation {reservation_id}, user id {user_id}, please.",
    ),
}

HELD_OUT: dict[str, tuple[str, ...]] = {
    "cancel_reservation": (
        "My plans changed, so please drop reservation {reservation_id} on account {user_id}.",
        "Could you void booking {reservation_id}? It's under user {user_id}.",
    ),
    "check_reservation": (
        "Quick question about reservation {reservation_id} (user {user_id}): what does it include?",
        "Show me what's on booking {reservation_id}, account {user_id}.",
    ),
    "book_flight": (
        "Get {passengers} of us on a direct {origin} → {destination} flight on {date}. User {user_id}.",
        "I'm {user_id}; I need tickets {origin} to {destination} for {date}, {passengers} passenger(s).",
    ),
    "refund_order": (
        "Money back for order {order_id}, please ({item}). Account {user_id}.",
        "I'm {user_id} and I'd like order {order_id} reimbursed.",
    ),
    "add_baggage": (
        "Reservation {reservation_id} needs {bags} additional checked bag(s). I'm {user_id}.",
        "Please increase the baggage on {reservation_id} by {bags}; user {user_id}.",
    ),
}
