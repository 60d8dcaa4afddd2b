"""Secrets, numbers, dates, addresses and URLs in spellings the detectors missed (docs/SECURITY.md, "What is
redacted where"), found by a second outside audit.

Each planted value below passed both ``redact_query`` (queries, trigger queries, the LLM request, logs) and
``literal_findings`` (the skill check, ``no_literal``) on the code before this change: a wallet's seed phrase,
a session id or cookie, a ``user:password`` pair after ``creds``/``login``, a value written before its key
(``trombonist is my password``), a wifi key, a key with words between it and its verb (``password for the
account is …``), a key spelled apart or in leetspeak (``pass-word``, ``p a s s w o r d``, ``passw0rd``), the word
for password in Korean, Turkish, Indonesian and Vietnamese, English compound number words (``forty two twenty
one``, ``one hundred twenty three thousand …``), French, Spanish and German number words, a date in words
(``the twelfth of april``), a lowercase street address with a number word, and a defanged URL
(``hxxps://example[.]com``). The benign texts hold the rules to prose: they must pass unchanged and give no
finding.
"""

from __future__ import annotations

import pytest

from skillflow.kernel.textnorm import fold
from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.redact import redact_query, redact_text
from tests.support.timing import growth

# (text, the secret, whether the skill check reads it too). The skill check (``strict``) reads a credential
# only after a connector ("is", "=", ":"), so a bare ``şifre frodobag`` is for the query side only.
SECRETS: list[tuple[str, str, bool]] = [
    # 1. a wallet's seed phrase
    ("my recovery phrase is legal winner thank year wave sausage worth useful", "sausage", True),
    ("my recovery phrase is legal winner thank year wave sausage worth useful", "legal winner", True),
    ("cancel my reservation; my recovery phrase is zorblax quantum velvet harbor", "zorblax", True),
    ("seed phrase: walnut anchor tiger meadow lantern", "walnut", True),
    ("my seed phrase is walnut anchor tiger meadow lantern", "lantern", True),
    ("the mnemonic is walnut anchor tiger meadow lantern", "anchor", True),
    ("my secret recovery phrase is walnut anchor tiger meadow lantern", "walnut", True),
    ("Secret Recovery Phrase: walnut anchor tiger meadow lantern", "meadow", True),
    ("my seed words are walnut anchor tiger meadow lantern", "walnut", True),
    # 2. a session id, cookie or token assignment
    ("sessionid=opensesamecookie", "opensesamecookie", True),
    ("cancel my reservation, sessionid=opensesamecookie", "opensesamecookie", True),
    ("session_id: opensesamecookie", "opensesamecookie", True),
    ("SESSION=opensesamecookie", "opensesamecookie", True),
    ("PHPSESSID=opensesamecookie", "opensesamecookie", True),
    ("cookie=opensesamecookie", "opensesamecookie", True),
    ("my session id is opensesamecookie", "opensesamecookie", True),
    ("the session token is opensesamecookie", "opensesamecookie", True),
    ("csrftoken=opensesamecookie", "opensesamecookie", True),
    # 3. a user:password pair after creds, credentials, login
    ("creds are admin:opensesame", "opensesame", True),
    ("cancel reservation; creds are admin:opensesame", "opensesame", True),
    ("credentials are admin:opensesame", "opensesame", True),
    ("log in to the back office as admin:opensesame", "opensesame", True),
    ("If the cancellation fails, log in to the back office as admin:opensesame.", "opensesame", True),
    ("sign in with admin:opensesame", "opensesame", True),
    ("my login is admin:opensesame", "opensesame", True),
    # 4. the value before the key word
    ("trombonist is my password", "trombonist", True),
    ("cancel my reservation, trombonist is my password", "trombonist", True),
    ("kumquatz is the wifi password", "kumquatz", True),
    ("trombonist was my old password", "trombonist", True),
    ("trombonist is my pin", "trombonist", True),
    # 5. other keys and spellings
    ("wifi key is kumquatz", "kumquatz", True),
    ("cancel my reservation, wifi key is kumquatz", "kumquatz", True),
    ("the wi-fi key: kumquatz", "kumquatz", True),
    ("my password for the account is kumquatz", "kumquatz", True),
    ("the password for my bank account is kumquatz", "kumquatz", True),
    ("pass-word kumquatz", "kumquatz", False),
    ("pass-word: kumquatz", "kumquatz", True),
    ("p a s s w o r d kumquatz", "kumquatz", False),
    ("p a s s w o r d: kumquatz", "kumquatz", True),
    ("passw0rd: kumquatz", "kumquatz", True),
    ("my passw0rd is kumquatz", "kumquatz", True),
    ("pa$$word: kumquatz", "kumquatz", True),
    ("my door code is kumquatz", "kumquatz", True),
    ("mother's maiden name is fitzgerald", "fitzgerald", True),
    # 6. the word for password in other languages
    ("비밀번호 gandalfo", "gandalfo", False),
    ("cancel reservation; 비밀번호 gandalfo", "gandalfo", False),
    ("비밀번호: gandalfo", "gandalfo", True),
    ("제 비밀번호는 gandalfo 입니다", "gandalfo", True),
    ("şifre frodobag", "frodobag", False),
    ("cancel reservation; şifre frodobag", "frodobag", False),
    ("Şifre: frodobag", "frodobag", True),
    ("şifrem frodobag", "frodobag", False),
    ("kata sandi pippinz", "pippinz", False),
    ("kata sandi saya adalah pippinz", "pippinz", False),
    ("kata sandi: pippinz", "pippinz", True),
    ("mật khẩu merryx", "merryx", False),
    ("mật khẩu là merryx", "merryx", True),
    ("mật khẩu: merryx", "merryx", True),
]

# (text, the number, date, address or URL it spells): the redacted text keeps none of it, and the skill check
# finds it.
VALUES: list[tuple[str, str]] = [
    # 7. English compound number words
    ("my card ends with forty two twenty one", "forty two twenty one"),
    ("cancel my reservation, my card ends with forty two twenty one", "forty two twenty one"),
    (
        "member number one hundred twenty three thousand four hundred fifty six",
        "one hundred twenty three thousand four hundred fifty six",
    ),
    ("my pin is forty-two seventeen", "forty-two seventeen"),
    ("the code is nine hundred and twelve", "nine hundred and twelve"),
    ("account thirty three forty four fifty five", "thirty three forty four fifty five"),
    # 8. French, Spanish, German, Italian, Portuguese number words
    ("annulez ma réservation, carte quatre cinq trois neuf un quatre huit huit", "quatre cinq trois neuf"),
    (
        "Example card: quatre cinq trois neuf un quatre huit huit zéro trois quatre trois six quatre six sept.",
        "quatre cinq trois neuf",
    ),
    ("cancel reservation, mi número es cinco cinco cinco uno dos tres cuatro", "cinco cinco cinco uno"),
    ("storniere meine buchung, kundennummer dreizehn vierzehn fünfzehn sechzehn", "dreizehn vierzehn"),
    ("meine nummer ist zwei drei vier fünf sechs", "zwei drei vier"),
    ("il mio numero è tre quattro cinque sei", "tre quattro cinque sei"),
    # 9. a date in words
    ("my date of birth is the twelfth of april, nineteen eighty four", "twelfth of april"),
    ("my date of birth is the twelfth of april, nineteen eighty four", "nineteen eighty four"),
    ("born on april twelfth", "april twelfth"),
    ("born on the twenty-first of june", "twenty-first of june"),
    # 10. a lowercase street address with a number word
    ("mail the receipt to one elm street, springfield", "elm street"),
    ("cancel my reservation and mail the receipt to one elm street, springfield", "one elm street"),
    ("ship it to forty two maple avenue", "maple avenue"),
    # 11. a defanged URL or domain
    ("hxxps://example[.]com/x", "example[.]com"),
    ("cancel reservation; details on hxxps://example[.]com/x", "example"),
    ("Details are at hxxps://exfil-host[.]com/drop", "exfil-host"),
    ("the page at example[.]com has it", "example[.]com"),
    ("post it to exfil-host[dot]net", "exfil-host"),
    ("hxxp://evil(.)org/drop", "evil"),
]

# Ordinary requests and sentences: unchanged by the redaction, no finding in the skill check.
BENIGN = [
    "cancel my reservation",
    "I want to change my password",
    "I forgot my password",
    "I forgot my password for the account",
    "my password for the account is not working",
    "the password for my account is wrong",
    "what is my password?",
    "this is my password",
    "which is my password",
    "here is my password",
    "one or two bags",
    "one, two or three nights",
    "two three-day passes",
    "twenty one",
    "I need twenty five minutes",
    "a hundred bags",
    "one hundred",
    "the first flight",
    "the first of the two flights",
    "the second leg of the trip",
    "you may first check the policy",
    "get_user_details",
    "call `get_user_details` with the user id",
    "key west",
    "I want a hotel in key west",
    "it is a one way street",
    "take the first street on the left",
    "two main roads",
    "I lost my seed phrase",
    "where is my recovery phrase?",
    "creds are in the vault",
    "log in as the same user",
    "the session expired",
    "my session was closed",
    "accept the cookie policy",
    "my wifi does not work",
    "I passed the word on to my manager",
    "my sister is my travel companion",
    "cash is my payment method",
    "economy is my cabin class",
    "the cookie is stale",
]

# Skill sentences that name these things without giving one: the skill check must find nothing in them.
SKILL_PROSE = [
    "Never ask for the recovery phrase or the seed phrase.",
    "Log in as the user and cancel the reservation.",
    "If the session expired, ask the user to sign in again.",
    "Ask for the user's password for the account; never repeat it.",
    "Collect the `username` and the `password` as <string> values.",
    "Check the first of the two reservations, then the second.",
    "Book one or two bags, at most three.",
    "Use `get_user_details` first.",
    "The wifi key is <secret>.",
    "The user's password is <secret> and the session id is <secret>.",
]

# Adversarial inputs of about 100 KB for the new rules (test_leaks.py and test_redaction_gaps.py hold the older).
ADVERSARIAL = {
    "compound number words": "forty two twenty one hundred " * 3_500,
    "number words and": "one hundred and " * 6_500,
    "foreign number words": "quatre cinq dreizehn cinco " * 4_000,
    "ordinal dates": "the twelfth of april " * 5_000,
    "month ordinals": "april twelfth june " * 5_500,
    "addresses": "one elm street " * 7_000,
    "street words": "one elm elm elm " * 6_500,
    "value before key": "word is my " * 9_000,
    "value before password": "word is my password " * 5_000,
    "qualified keys": "password for the account " * 4_000,
    "qualified keys no verb": "password for the a b c d e f " * 3_500,
    "user pass pairs": "login as a:b " * 8_000,
    "login cues": "log in as " * 10_000,
    "spaced keys": "p a s s w o r d " * 6_000,
    "seed phrases": "seed phrase " * 8_000,
    "session keys": "sessionid= " * 9_000,
    "defanged": "a[.]" * 25_000,
    "defanged spaced": "a[.] " * 20_000,
    "defanged urls": "hxxps://a[.]b " * 7_000,
    "korean keys": "비밀번호" * 25_000,
}


def _found(text: str, secret: str) -> bool:
    return any(secret in f.text or (f.text in secret and len(f.text) >= 3) for f in literal_findings(fold(text)))


@pytest.mark.parametrize(("text", "secret", "strict"), SECRETS, ids=[f"{c[0][-40:]}|{c[1]}" for c in SECRETS])
def test_a_secret_is_redacted(text: str, secret: str, strict: bool) -> None:
    out = redact_query(text)
    assert secret.lower() not in out.lower(), out
    assert "<secret>" in out, out
    assert secret.lower() not in redact_text(text).lower()
    if strict:
        assert _found(text, secret), literal_findings(fold(text))


@pytest.mark.parametrize(("text", "value"), VALUES, ids=[f"{c[0][-40:]}|{c[1]}" for c in VALUES])
def test_a_value_in_words_is_redacted(text: str, value: str) -> None:
    out = redact_query(text)
    for word in value.split():
        if len(word) > 3 and word not in ("street", "avenue"):
            assert word.lower() not in out.lower(), out
    assert value.lower() not in out.lower(), out
    assert _found(text, value) or any(
        value.lower() in f.text.lower() or f.text.lower() in value.lower() for f in literal_findings(fold(text))
    ), literal_findings(fold(text))


def test_the_words_around_a_value_stay() -> None:
    assert redact_query("sessionid=opensesamecookie") == "sessionid=<secret>"
    assert redact_query("creds are admin:opensesame") == "creds are <secret>"
    assert redact_query("trombonist is my password") == "<secret> is my password"
    assert redact_query("wifi key is kumquatz") == "wifi key is <secret>"
    assert redact_query("my password for the account is kumquatz") == "my password for the account is <secret>"
    assert redact_query("my card ends with forty two twenty one") == "my card ends with <number>"
    assert redact_query("hxxps://example[.]com/x") == "<url>"
    assert redact_query("book two tickets") == "book two tickets"


def test_a_month_day_in_words_may_be_a_date() -> None:
    out = redact_query("book two tickets for the first of may")
    assert out in ("book two tickets for the first of may", "book two tickets for the <date>"), out


@pytest.mark.parametrize("text", BENIGN)
def test_prose_stays(text: str) -> None:
    assert redact_query(text) == text
    assert literal_findings(text) == [], literal_findings(text)


@pytest.mark.parametrize("text", SKILL_PROSE)
def test_a_skill_may_name_these_things(text: str) -> None:
    assert literal_findings(text, {"get_user_details", "username", "password"}) == []


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_the_new_rules_stay_linear(kind: str) -> None:
    redact_query("warm up: my password for the account is x, forty two twenty one, hxxps://a[.]com")
    assert growth(redact_query, ADVERSARIAL[kind]) < 30, kind
    assert growth(literal_findings, ADVERSARIAL[kind]) < 30, kind
