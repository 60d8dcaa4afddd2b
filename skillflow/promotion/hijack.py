"""Instruction-hijack check: text that tells an agent to contact outsiders, drop its instructions or safeguards,
or change role.

A skill is injected with instruction authority (docs/SECURITY.md), so validation refuses one in which
:func:`hijack_findings` finds anything, and trigger queries that trip it are never stored. The rules are
deterministic and deliberately broad; the LLM judge is asked the same question (prompts/judge_v3.md). The
text is read through :func:`skillflow.kernel.textnorm.fold` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from skillflow.kernel.textnorm import fold, readings

_NOUNS = (
    r"instructions?|rules?|polic(?:y|ies)|guidelines?|prompts?|directions?|directives?|constraints?|guardrails?"
    r"|restrictions?|system\s+messages?|developer\s+messages?|safety|programming|context"
)
OVERRIDE = re.compile(
    rf"(?i)\b(?:ignore|disregard|forget|override|overrule|bypass|circumvent|neglect|abandon|violate|suspend)\b"
    rf"(?:\W+\w+){{0,5}}?\W+(?:{_NOUNS})\b"
    rf"|\bdo\s+not\s+(?:follow|obey|apply)\b(?:\W+\w+){{0,3}}?\W+(?:{_NOUNS})\b"
    rf"|\b(?:new|updated|additional|real|true|secret|hidden|override)\s+(?:{_NOUNS})\b"
    rf"|\binstead\s+of\s+(?:following|obeying)\b"
)
ROLE = re.compile(
    r"(?i)\byou\s+are\s+(?:now|no\s+longer|actually|really)\b|\bact\s+as\s+(?:a|an|the|if)\b"
    r"|\bpretend\s+(?:to\s+be|you)\b|\brole\s*-?\s*play\b|\bfrom\s+now\s+on\b"
    r"|\byour\s+(?:new|real|true|actual)\s+(?:role|purpose|task|goal|identity|job)\b|\bdeveloper\s+mode\b"
    r"|\bjail\s*break\b|\bswitch\s+(?:to|into)\s+\w+\s+mode\b|\bsystem\s+prompt\b|\byou\s+must\s+obey\b"
)
ADDRESSED = re.compile(
    r"(?im)^\s*(?:#+\s*)?(?:system|assistant|developer|admin|administrator)\s*:"
    r"|<\|?(?:im_start|im_end|system|endoftext)\|?>|\[/?INST\]|<</?SYS>>"
    r"|</?\s*(?:system|information|instructions?|important|admin)\s*>"
    r"|\bimportant\s+(?:instructions?|message|notice|update)\b|\bIMPORTANT\s*!+"
    r"|\b(?:message|note|instructions?)\s+(?:to|for)\s+(?:the\s+)?(?:ai|assistant|model|agent|llm|chatbot|bot)\b"
    r"|\bbefore\s+you\s+(?:can\s+)?(?:solve|answer|continue|proceed|respond|finish)\b"
    r"|\b(?:attention|dear)\s+(?:ai|assistant|model|agent|llm)\b"
)
_COMMS = (
    r"e-?mail|mail|send|sends|sending|forward|transmit|upload|post|share|contact|notify|message|text|dm|ping"
    r"|leak|exfiltrate|publish|tweet|phone|fax|cc|bcc|report|call"
)
_OUTSIDE = (
    r"address|e-?mail|inbox|server|endpoint|url|link|website|site|webhook|number|phone|channel|person|third"
    r"|external|outside|someone|anyone|somebody|attacker|admin|administrator|auditors?|security|compliance|team"
    r"|manager|supervisor|boss|colleague|recipient|owner|me|us|this|<email>|<url>|<phone>|<id>|<string>"
)
CONTACT = re.compile(
    rf"(?i)\b(?:{_COMMS})\b(?:\W+\w+){{0,10}}?\W+(?:to|at|via|cc|bcc)\s+(?:the\s+|a\s+|an\s+|our\s+|my\s+)?"
    rf"(?:[\"“'‘]|(?:{_OUTSIDE})(?![\w-]))"
)
BULK = re.compile(
    r"(?i)\b(?:all|every|entire|full|complete|whole)\s+(?:the\s+|of\s+the\s+)?(?:conversation|chat|transcript|history"
    r"|context|data|details|information|credentials|passwords?|tokens?|keys|messages|money|funds|balance)\b"
)
CALL_NAME = re.compile(
    r"\b(?i:call|invoke|run|execute|trigger|use)\s+(?i:the\s+)?(?i:tool\s+|function\s+)?`?"
    r"(?P<name>[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+)`?"
)
_CHECKS = (
    r"checks?|checking|verifications?|confirmations?|pre-?conditions?|validations?|approvals?|authentication"
    r"|authori[sz]ation|consent|eligibility|identity"
)
# Text that talks an agent out of its own safeguards: skip a check, do not ask for confirmation, "pre-approved".
# A negation just before the verb ("never skip the check", "do not skip") is the safeguard, not its removal.
WEAKEN = re.compile(
    rf"(?i)(?<!not\s)(?<!never\s)(?<!n't\s)\b(?:skip|skipping|bypass|waive|waiving|omit|omitting|disable|disabling"
    rf"|circumvent)\b(?:\W+\w+){{0,3}}?\W+(?:{_CHECKS})\b"
    rf"|\b(?:never|do\s+not|don'?t|no\s+need\s+to)\s+(?:ask|request|wait)\b(?:\W+\w+){{0,3}}?\W+"
    rf"(?:confirm|confirmation|consent|approval|permission)\b"
    rf"|\b(?:never|do\s+not|don'?t|no\s+need\s+to)\s+(?:check|verify|validate|authenticate)\b(?:\W+\w+){{0,2}}?\W+"
    rf"(?:identity|eligibility|ownership|pre-?conditions?|polic(?:y|ies)|consent|user)\b"
    rf"|\b(?:is|are|was|were|been)\s+(?:already\s+)?pre-?(?:approved|authori[sz]ed|verified|cleared)\b"
)
_SENTENCE = re.compile(r"(?<=[.!?\n])\s+")


def hijack_findings(text: str, tools: Iterable[str] = ()) -> list[str]:
    """Kinds of instruction hijack in ``text`` (``override``, ``role``, ``addressed``, ``weaken``, ``contact``,
    ``bulk``, ``outside-tool``). A sentence that names one of ``tools`` (the class's tool sequence) may
    say "send"/"call"; it may still not address an outside party or a tool outside the sequence."""
    sequence = {t.casefold() for t in tools}
    named = sequence | {t.replace("_", "") for t in sequence}  # the unmarked reading joins ``cancel_reservation``
    text = fold(text or "")  # homoglyphs, zero-width and tag characters read as what they show or hide
    # "i g n o r e   a l l", "ig**no**re", "ign\nore": the spaced-out and unmarked readings are checked as well
    text = "\n".join(readings(text))
    body = re.sub(r"[_]+", " ", text)
    kinds: set[str] = set()
    for kind, pattern in (("override", OVERRIDE), ("role", ROLE), ("addressed", ADDRESSED), ("weaken", WEAKEN)):
        if pattern.search(body):
            kinds.add(kind)
    for sentence in _SENTENCE.split(text):
        spaced = sentence.replace("_", " ")
        names_tool = any(t and t in sentence.casefold() for t in named)
        if CONTACT.search(spaced) and not names_tool:
            kinds.add("contact")
        if BULK.search(spaced) and re.search(rf"(?i)\b(?:{_COMMS})\b", spaced):
            kinds.add("bulk")
        for m in CALL_NAME.finditer(sentence):
            if m.group("name").casefold() not in sequence:
                kinds.add("outside-tool")
    return sorted(kinds)
