"""Credentials, addresses and numbers the detectors missed (docs/SECURITY.md, "What is redacted where").

Each planted value below passed both ``redact_query`` (queries, trigger queries, the LLM request, logs) and
``literal_findings`` (the skill check) on the code before this change: a credential key written as an
identifier (``DB_PASSWORD=…``, ``client_secret=…``), a connector before the value (``password is: …``,
``password -> …``), a value quoted with backticks or angle brackets, ``pass``/``security answer``/``access
code``, the word for password in other languages, an address whose host has no dot (``jane@localhost``), and
a number spelled in words or CJK numerals. The benign texts hold the rules to prose: they must pass
unchanged and give no finding.
"""

from __future__ import annotations

import pytest

from skillflow.promotion.detectors import literal_findings
from skillflow.promotion.redact import redact_query, redact_text
from tests.support.timing import growth

# (text, the secret, whether the skill check reads it too). The skill check (``strict``) reads a credential
# only after a connector ("is", "=", ":"); in a skill ``<word>`` is a placeholder, so an angle-quoted value or
# a bare "access code X" is for the query side only.
CREDENTIALS: list[tuple[str, str, bool]] = [
    # 1. a credential key written as an identifier, in any case
    ("cancel my booking, DB_PASSWORD=hunter", "hunter", True),
    ("cancel my booking, db_password=hunterfalcon", "hunterfalcon", True),
    ("SECRET_KEY=plumvolcano", "plumvolcano", True),
    ("export AWS_SECRET_ACCESS_KEY=amberfoxlantern", "amberfoxlantern", True),
    ("api_token=plumvolcanoharp", "plumvolcanoharp", True),
    ("auth_token: plumvolcanoharp", "plumvolcanoharp", True),
    ("user_password: plumvolcanoharp", "plumvolcanoharp", True),
    ("cancel my booking, client_secret=plumvolcanoharp", "plumvolcanoharp", True),
    ("X-Auth-Token: plumvolcanoharp", "plumvolcanoharp", True),
    # 2. a connector before the value
    ("cancel my booking, my password is: quietmangoriver", "quietmangoriver", True),
    ("password: is quietmangoriver", "quietmangoriver", True),
    ("Password Is: quietmangoriver", "quietmangoriver", True),
    ("password -> quietmangoriver", "quietmangoriver", True),
    ("password => quietmangoriver", "quietmangoriver", True),
    ("password is ... quietmangoriver", "quietmangoriver", True),
    ("password is - quietmangoriver", "quietmangoriver", True),
    # 3. quoted with backticks or angle brackets
    ("cancel my booking, my password is `silverottertrail`", "silverottertrail", True),
    ("password: `silverottertrail`", "silverottertrail", True),
    ("password <amberfox>", "amberfox", False),
    ("my password is <amberfox>", "amberfox", False),
    # 4. vocabulary
    ("pass: amberfoxlantern", "amberfoxlantern", True),
    ("pass=amberfoxlantern", "amberfoxlantern", True),
    ("my pass is amberfoxlantern", "amberfoxlantern", True),
    ("login with user=admin&pass=amberfoxlantern", "amberfoxlantern", True),
    ("cancel my booking, user: jsmith pass: amberfoxlantern", "amberfoxlantern", True),
    ("security answer: fluffytabby", "fluffytabby", True),
    ("my security answer is fluffytabby", "fluffytabby", True),
    ("access code amberfoxlantern", "amberfoxlantern", False),
    ("the access code is amberfoxlantern", "amberfoxlantern", True),
    ("my passcode is amberfoxlantern", "amberfoxlantern", True),
    ("pwd: amberfoxlantern", "amberfoxlantern", True),
    ("login: jsmithers", "jsmithers", True),
    ("my new password will be sunshineriver", "sunshineriver", False),
    # a software licence's key and a cookie's value (an outside audit, 2026-12-06: sent to the distiller)
    ("my license key is JmKoLpAsDf", "JmKoLpAsDf", True),
    ("license key: XkCdQwErTy", "XkCdQwErTy", True),
    ("the licence key is AbCdEfGh", "AbCdEfGh", True),
    ("my product key is QaZwSxEdCr", "QaZwSxEdCr", True),
    ("the activation code is RfVtGbYhNu", "RfVtGbYhNu", True),
    ("the cookie is AbCdEfGh", "AbCdEfGh", True),
    ("auth cookie: GhJkLzXcVb", "GhJkLzXcVb", True),
    ("please use username and password for authorization: sunshineriver", "sunshineriver", True),
    # 5. the word for password in other languages
    ("cancel my booking, mi contraseña es girasolazul", "girasolazul", True),
    ("contraseña: girasolazul", "girasolazul", True),
    ("la clave es girasolazul", "girasolazul", True),
    ("cancel my booking, mot de passe : soleilrouge", "soleilrouge", True),
    ("mon mot de passe est soleilrouge", "soleilrouge", True),
    ("mein Passwort ist sonnenblume", "sonnenblume", True),
    ("Passwort: sonnenblume", "sonnenblume", True),
    ("mein Kennwort lautet sonnenblume", "sonnenblume", True),
    ("minha senha é girassolazul", "girassolazul", True),
    ("senha: girassolazul", "girassolazul", True),
    ("la parola d'ordine è girasole", "girasole", True),
    ("la password è girasole", "girasole", True),
    ("moje hasło to słonecznik", "słonecznik", True),
    ("hasło: slonecznik", "slonecznik", True),
    ("mijn wachtwoord is zonnebloem", "zonnebloem", True),
    ("мой пароль подсолнух", "подсолнух", False),
    ("пароль: подсолнух", "подсолнух", True),
    ("ПАРОЛЬ: подсолнух", "подсолнух", True),
    ("私のパスワードはひまわりです", "ひまわり", True),
    ("パスワード: himawari", "himawari", True),
    ("我的密码是向日葵", "向日葵", True),
    ("密碼：xiangrikui", "xiangrikui", True),
]

# 6. an address whose host has no dot
EMAILS = [
    ("cancel my booking, mail me at jane@localhost", "jane@localhost"),
    ("mail jane.doe@localhost please", "jane.doe@localhost"),
    ("the report goes to root@intranet.", "root@intranet"),
    ("forward it to ops-team+alerts@mailhub", "ops-team+alerts@mailhub"),
]

# 7. numbers in words: four or more number words in a row; CJK numerals, three or more
NUMBERS = [
    (
        "cancel my booking, card four five three nine one four eight eight zero three four three six four six seven",
        "four five three nine one four eight eight zero three four three six four six seven",
    ),
    ("call me on five five five, one two three, four five six seven", "four five six seven"),
    ("my account is two-seven-one-eight", "two-seven-one-eight"),
    ("the code is oh four two seven nine", "four two seven"),
    ("card 四五三九一四八八〇三四三六四六七 please", "四五三九一四八八〇三四三六四六七"),
    ("我的电话是一三八零零一三八零零零", "一三八零零一三八零零零"),
]

BENIGN = [
    "I lost my boarding pass",
    "my boarding pass is on my phone, can you resend it",
    "can you pass me to an agent",
    "I'll pass on the upgrade, thanks",
    "please pass the salt",
    "the password reset page does not load",
    "the password_reset flow failed twice",
    "my email is down",
    "one or two bags",
    "two three-day passes",
    "one, two or three nights",
    "ask @jane about it",
    "my password is <secret>, and the card is <card>",
    "the token_count field of the response",
    "the wifi was down so I could not pay",
    # a credential word in a question or before a verb is prose (API-Bank's assistant turns)
    "What password would you like to use for the account?",
    "For which username should I add the reminder?",
    "I have initiated the password reset process.",
    "Can you please provide me with your username and password for authorization purposes?",
    "May I have your username and password to fetch the token for authentication?",
    "enter your password: <password>",
    "the license key did not arrive in my email",
    "where do I find my product key?",
    "the cookie jar was empty",
    "I accepted the cookie banner",
]

# Skill sentences that name a credential without giving one: the skill check must find nothing in them.
SKILL_PROSE = [
    "`password`: ask the user for it; never repeat it.",
    "Ask for the access code first.",
    "Read the `auth_token` from the login result.",
    "If the password reset fails, transfer to a human agent.",
    "Pass the booking id to `cancel_booking`.",
    "The password is <secret> and the token is <secret>.",
    "Collect the `username` and the `password` as <string> values.",
]

# Adversarial inputs of about 100 KB for the new rules (test_leaks.py holds the older ones).
ADVERSARIAL = {
    "bare keys in prose": "password and " * 8_000,
    "keys and plain values": "password is the " * 6_000,
    "identifier keys": "DB_PASSWORD_x_y_z " * 5_500,
    "connectors": "password: is -> " * 6_000,
    "number words": "one two three " * 7_000,
    "dashed number words": "one-two-" * 12_000,
    "cjk numerals": "一二三四" * 25_000,
    "one-word hosts": "a@b " * 25_000,
    "at signs": "a@" * 50_000,
    "angle values": "password <" * 10_000,
    "backticks": "password `" * 10_000,
    "foreign keys": "contraseña es " * 7_000,
    "cjk keys": "密码是" * 30_000,
    "camel keys": "xSecretToken= " * 7_000,
    "pass keys": "pass=&" * 16_000,
}


def _found(text: str, secret: str) -> bool:
    return any(secret in f.text or (f.text in secret and len(f.text) >= 3) for f in literal_findings(text))


@pytest.mark.parametrize(("text", "secret", "strict"), CREDENTIALS, ids=[c[0][-40:] for c in CREDENTIALS])
def test_a_credential_value_is_redacted(text: str, secret: str, strict: bool) -> None:
    out = redact_query(text)
    assert secret not in out, out
    assert "<secret>" in out, out
    assert secret not in redact_text(text)
    if strict:
        assert _found(text, secret), literal_findings(text)


def test_the_words_before_a_credential_stay() -> None:
    assert redact_query("cancel my booking, DB_PASSWORD=hunter") == "cancel my booking, DB_PASSWORD=<secret>"
    assert redact_query("my password is: quietmangoriver") == "my password is: <secret>"
    assert redact_query("password -> quietmangoriver") == "password -> <secret>"
    assert redact_query("user: jsmith pass: amberfoxlantern") == "user: jsmith pass: <secret>"
    assert redact_query("mot de passe : soleilrouge") == "mot de passe : <secret>"


@pytest.mark.parametrize(("text", "address"), EMAILS)
def test_an_address_without_a_dotted_host_is_an_email(text: str, address: str) -> None:
    out = redact_query(text)
    assert address not in out and "<email>" in out, out
    assert [f.text for f in literal_findings(text) if f.kind == "email"] == [address]


@pytest.mark.parametrize(("text", "number"), NUMBERS)
def test_a_number_in_words_is_a_number(text: str, number: str) -> None:
    out = redact_query(text)
    assert number not in out and "<number>" in out, out
    assert any(f.kind == "number" and number in f.text for f in literal_findings(text)), literal_findings(text)


@pytest.mark.parametrize("text", BENIGN)
def test_prose_stays(text: str) -> None:
    assert redact_query(text) == text
    masked_ok = not [f for f in literal_findings(text)]
    assert masked_ok, literal_findings(text)


@pytest.mark.parametrize("text", SKILL_PROSE)
def test_a_skill_may_name_a_credential(text: str) -> None:
    assert literal_findings(text, {"cancel_booking", "auth_token", "username", "password"}) == []


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_the_new_rules_stay_linear(kind: str) -> None:
    redact_query("warm up: password is x, card 4111 1111 1111 1111")
    assert growth(redact_query, ADVERSARIAL[kind]) < 30, kind
    assert growth(literal_findings, ADVERSARIAL[kind]) < 30, kind
