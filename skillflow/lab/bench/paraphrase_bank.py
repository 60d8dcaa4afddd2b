"""The paraphrase bank of ``skillflow bench retrieval``: intents with trigger queries and held-out paraphrases.

Held-out paraphrases are never embedded as triggers; several intents are deliberate near-misses of each
other (cancel vs change a reservation, refund vs return, reset password vs unlock account).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Intent:
    name: str
    description: str
    preconditions: tuple[str, ...]
    triggers: tuple[str, ...]
    held_out: tuple[str, ...] = ()


def _i(name: str, description: str, pre: str, triggers: list[str], held_out: list[str]) -> Intent:
    return Intent(name, description, (pre,), tuple(triggers), tuple(held_out))


BANK: tuple[Intent, ...] = (
    _i(
        "cancel-reservation",
        "Cancel an existing flight reservation and confirm any refund.",
        "A reservation id is given",
        [
            "I need to cancel my reservation",
            "Please cancel my flight booking",
            "Cancel reservation ABC123 for me",
            "I want to cancel my trip and get my money back",
            "I won't be traveling, cancel my booking",
        ],
        [
            "I'd like to cancel my flight reservation",
            "please cancel the booking I made for next week",
            "cancel my reservation XYZ789",
        ],
    ),
    _i(
        "change-flight",
        "Move an existing reservation to a different flight or date.",
        "A reservation id is given",
        [
            "I need to change my flight",
            "Can I move my flight to another day?",
            "Rebook me on a later flight",
            "Switch my reservation to the morning flight",
            "I want to change the date of my trip",
        ],
        ["could you move my flight to Friday", "I'd like to fly a day earlier instead", "put me on a different flight"],
    ),
    _i(
        "add-checked-bag",
        "Add checked baggage to an existing reservation.",
        "A reservation id is given",
        [
            "I want to add a checked bag",
            "Can I add luggage to my booking?",
            "Add two suitcases to my reservation",
            "How do I check an extra bag on my flight",
            "Please add baggage to my trip",
        ],
        [
            "I need to bring another suitcase on my flight",
            "add one more checked bag please",
            "can you put a bag on my reservation",
        ],
    ),
    _i(
        "upgrade-cabin",
        "Upgrade a passenger's reservation to a higher cabin class.",
        "A reservation id is given",
        [
            "Upgrade me to business class",
            "Can I move up to first class?",
            "I'd like a cabin upgrade",
            "How much to upgrade my seat to business",
            "Put me in premium economy instead",
        ],
        [
            "is it possible to fly business on my booking",
            "I want to upgrade my ticket to first",
            "bump my seat up to a better cabin",
        ],
    ),
    _i(
        "flight-status",
        "Report the live status and delay of a flight.",
        "A flight number or reservation is known",
        [
            "Is my flight on time?",
            "What's the status of flight UA100",
            "Has my flight been delayed?",
            "When does flight DL45 depart now",
            "Check whether my flight is delayed",
        ],
        ["is flight AA12 running late", "any delays on my flight today", "tell me if my plane leaves on schedule"],
    ),
    _i(
        "refund-order",
        "Refund a paid order that arrived damaged or was never delivered.",
        "An order id is given",
        [
            "I want a refund for my order",
            "Refund my damaged package",
            "My order never arrived, give me my money back",
            "Please refund order 5531",
            "The item was broken, I want a refund",
        ],
        [
            "can I get my money back for the broken blender",
            "refund the order that never showed up",
            "I was charged for something that never came, refund it",
        ],
    ),
    _i(
        "return-item",
        "Start a return for an item the customer no longer wants.",
        "An order id is given",
        [
            "I want to return an item",
            "How do I send this back?",
            "Start a return for my shoes",
            "I'd like to return the jacket I bought",
            "Can I return something I ordered?",
        ],
        [
            "I need to send back the lamp I purchased",
            "set up a return for my order please",
            "the sweater doesn't fit, I want to return it",
        ],
    ),
    _i(
        "track-package",
        "Report where a shipped package is and when it will arrive.",
        "An order id is given",
        [
            "Where is my package?",
            "Track my order",
            "When will my delivery arrive?",
            "Has my parcel shipped yet",
            "Give me the tracking status of order 881",
        ],
        ["where's my shipment right now", "what's the delivery status of my order", "is my parcel on its way"],
    ),
    _i(
        "update-shipping-address",
        "Change the delivery address of an order that has not shipped.",
        "An order id and the new address are given",
        [
            "Change the shipping address on my order",
            "I moved, update my delivery address",
            "Ship my order to a different address",
            "Update where my package is going",
            "Fix the address on order 42",
        ],
        [
            "please deliver my order to my office instead",
            "I need to correct the address for my delivery",
            "send my package to 5 Main Street instead",
        ],
    ),
    _i(
        "apply-discount-code",
        "Apply a promotional code to a cart or a recent order.",
        "A discount code is given",
        [
            "Apply my coupon code",
            "I have a promo code",
            "Can you add discount code SAVE10",
            "My voucher didn't apply at checkout",
            "Use this discount on my order",
        ],
        [
            "the promo code isn't working, can you apply it",
            "please redeem coupon WELCOME5 for me",
            "I forgot to enter my discount code",
        ],
    ),
    _i(
        "reset-password",
        "Send a password reset link to the account's verified email.",
        "The account email is known",
        [
            "I forgot my password",
            "Reset my password",
            "How do I change my password?",
            "Send me a password reset link",
            "I can't remember my login password",
        ],
        ["I need a new password for my account", "help me recover my password", "my password isn't working, reset it"],
    ),
    _i(
        "unlock-account",
        "Unlock an account locked after too many failed sign-in attempts.",
        "The account is locked and the user is verified",
        [
            "My account is locked",
            "Unlock my account",
            "I'm locked out after too many attempts",
            "It says my account has been suspended for failed logins",
            "Please re-enable my login",
        ],
        [
            "I got locked out of my profile",
            "my account got blocked, can you unblock it",
            "too many wrong tries and now I can't get in",
        ],
    ),
    _i(
        "enable-two-factor",
        "Turn on two-factor authentication for an account.",
        "The user is signed in",
        [
            "Turn on two-factor authentication",
            "Enable 2FA on my account",
            "Set up an authenticator app",
            "I want extra login security",
            "How do I add two-step verification",
        ],
        [
            "make my login require a code from my phone",
            "activate two-step login for me",
            "secure my account with an authenticator",
        ],
    ),
    _i(
        "update-email",
        "Change the email address on file for an account.",
        "The user is verified",
        [
            "Change my email address",
            "Update the email on my account",
            "I have a new email, please update it",
            "Use a different email for my login",
            "Replace my contact email",
        ],
        [
            "my email changed, can you fix it on my profile",
            "switch my account to my work email",
            "set my account email to the new one",
        ],
    ),
    _i(
        "cancel-subscription",
        "Cancel a recurring subscription at the end of the billing period.",
        "The subscription id is known",
        [
            "Cancel my subscription",
            "Stop my monthly plan",
            "I don't want to be billed anymore",
            "End my membership",
            "Unsubscribe me from the premium plan",
        ],
        ["please stop renewing my plan", "I want to quit my paid membership", "turn off my recurring subscription"],
    ),
    _i(
        "change-plan",
        "Switch a subscription to a different plan tier.",
        "The subscription id is known",
        [
            "Upgrade my plan",
            "Switch me to the family plan",
            "Downgrade to the basic tier",
            "Change my subscription level",
            "Move me to the annual plan",
        ],
        ["I want a cheaper plan", "put me on the pro tier instead", "can I switch my plan to yearly billing"],
    ),
    _i(
        "dispute-charge",
        "Open a dispute for a card charge the customer does not recognize.",
        "The charge is identified",
        [
            "I don't recognize this charge",
            "Dispute a transaction on my card",
            "There's a charge I didn't make",
            "Someone charged my account without permission",
            "Report an unknown payment",
        ],
        [
            "what is this strange payment on my statement, I didn't make it",
            "I want to contest a card charge",
            "there's a fraudulent purchase on my account",
        ],
    ),
    _i(
        "check-balance",
        "Report the current balance of a bank account.",
        "The account is verified",
        [
            "What's my balance?",
            "How much money is in my checking account",
            "Check my account balance",
            "Show my current savings balance",
            "Tell me what I have in the bank",
        ],
        [
            "how much do I have left in my account",
            "what's the balance on my savings",
            "can you tell me my available funds",
        ],
    ),
    _i(
        "transfer-money",
        "Transfer money between the customer's own accounts.",
        "Both accounts and the amount are given",
        [
            "Transfer money to my savings",
            "Move $200 from checking to savings",
            "Send funds between my accounts",
            "I want to move money to my other account",
            "Make a transfer of 50 dollars",
        ],
        [
            "shift some cash into my savings account",
            "move money from savings back to checking",
            "put 300 into my other account",
        ],
    ),
    _i(
        "report-lost-card",
        "Block a lost or stolen card and order a replacement.",
        "The card is identified",
        [
            "I lost my card",
            "My credit card was stolen",
            "Block my card please",
            "Freeze my debit card, I can't find it",
            "I need a replacement card",
        ],
        [
            "someone stole my wallet with my card",
            "I can't find my bank card, cancel it",
            "my card is missing, please block it",
        ],
    ),
    _i(
        "book-appointment",
        "Book an appointment slot with a provider.",
        "The provider and a preferred time are given",
        [
            "Book an appointment",
            "I need to see a doctor next week",
            "Schedule a visit for Tuesday",
            "Can I get an appointment with Dr. Lee",
            "Make a booking for a checkup",
        ],
        [
            "set up a consultation for me on Monday",
            "I'd like to schedule a visit with the dentist",
            "find me a slot to see a physician",
        ],
    ),
    _i(
        "reschedule-appointment",
        "Move an existing appointment to a different time.",
        "The appointment is identified",
        [
            "Reschedule my appointment",
            "Move my visit to Thursday",
            "Can I change my appointment time",
            "I need a different time for my checkup",
            "Push my appointment to next week",
        ],
        [
            "I can't make it Tuesday, move my appointment",
            "change the time of my booking with the doctor",
            "shift my consultation to the afternoon",
        ],
    ),
    _i(
        "restart-router",
        "Guide a customer through restarting their home router.",
        "The customer has router access",
        [
            "My internet is down",
            "How do I restart my router",
            "The wifi stopped working",
            "Reboot my modem",
            "I have no internet connection at home",
        ],
        [
            "my home connection keeps dropping",
            "the wireless isn't working in my house",
            "walk me through power cycling the modem",
        ],
    ),
    _i(
        "report-outage",
        "Check for and report a service outage in the customer's area.",
        "The service address is known",
        [
            "Is there an outage in my area",
            "The whole neighborhood has no service",
            "Report a service outage",
            "Is the network down right now?",
            "Are there any known outages",
        ],
        [
            "is anyone else without service near me",
            "I think there's an outage on my street",
            "check if the service is down in my town",
        ],
    ),
    _i(
        "order-status-restaurant",
        "Report the status of a food delivery order.",
        "A food order id is given",
        [
            "Where is my food?",
            "My takeout is late",
            "How long until my delivery order arrives",
            "Track my pizza order",
            "The driver hasn't arrived with my meal",
        ],
        [
            "my dinner delivery is taking forever",
            "when will my restaurant order get here",
            "has the courier picked up my food yet",
        ],
    ),
)

# Distractor intents (verb × object) used to fill a tenant's pool beyond the bank; never queried.
_VERBS = ("export", "archive", "rename", "share", "print", "translate", "schedule", "summarize")
_OBJECTS = (
    "quarterly sales report",
    "meeting notes",
    "team calendar",
    "project roadmap",
    "expense spreadsheet",
    "customer survey",
    "newsletter draft",
    "warehouse inventory list",
    "vacation photo album",
    "recipe collection",
    "training slides",
    "product catalog",
    "podcast transcript",
)


def distractors() -> list[Intent]:
    out = []
    for obj in _OBJECTS:
        for verb in _VERBS:
            out.append(
                Intent(
                    f"{verb}-{obj.replace(' ', '-')}",
                    f"{verb.capitalize()} the {obj} for the user.",
                    (f"The {obj} exists",),
                    (f"please {verb} my {obj}", f"I need to {verb} the {obj}", f"can you {verb} the {obj} for me"),
                )
            )
    return out
