"""Deterministic answer checks: exact for the offline model, key facts for real models.

A real model phrases its answer freely, so exact string equality would measure wording. Instead every
key fact of the expected answer must appear in the model's answer: identifiers (reservation ids such as
``Q7ZK2M`` or ``R000001``, order ids ``#W1234567``, flight numbers ``HAT123``), every amount (compared as
numbers to the cent, so ``$120`` matches ``120.00``) and the outcome words that flip the meaning
(``declined``, ``already refunded``, ``could not``). Extra text is allowed; a missing or wrong fact fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AnswerCheck = Literal["exact", "key_facts"]

_ID = re.compile(r"(?<![\w.])#?(?![0-9]+\b)[A-Z0-9]{5,}\b")
_AMOUNT = re.compile(r"(?<![\w.])\d+(?:,\d{3})*\.\d{2}(?!\d)")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?![\d])")
OUTCOME_WORDS = ("declined", "already refunded", "could not")


@dataclass(frozen=True)
class KeyFacts:
    ids: frozenset[str]
    amounts: frozenset[float]
    outcome_words: frozenset[str]


def key_facts(expected: str) -> KeyFacts:
    """Identifiers, amounts (two decimals) and outcome words of an expected answer."""
    ids = frozenset(m.group(0).lstrip("#") for m in _ID.finditer(expected))
    amounts = frozenset(round(float(m.group(0).replace(",", "")), 2) for m in _AMOUNT.finditer(expected))
    words = frozenset(w for w in OUTCOME_WORDS if w in expected.lower())
    return KeyFacts(ids, amounts, words)


def facts_present(answer: str, expected: str) -> bool:
    """Every key fact of ``expected`` appears in ``answer`` (ids as tokens, amounts as numbers)."""
    facts = key_facts(expected)
    if not (facts.ids or facts.amounts or facts.outcome_words):
        return answer.strip() == expected.strip()
    text = answer.replace("#", " ")
    tokens = set(re.findall(r"[A-Za-z0-9_]+", text))
    numbers = {round(float(m.group(0).replace(",", "")), 2) for m in _NUMBER.finditer(text)}
    lowered = answer.lower()
    return (
        all(i in tokens for i in facts.ids)
        and all(a in numbers for a in facts.amounts)
        and all(w in lowered for w in facts.outcome_words)
    )


def answer_correct(answer: str, expected: str, check: AnswerCheck) -> bool:
    if check == "exact":
        return answer.strip() == expected.strip()
    return facts_present(answer, expected)
