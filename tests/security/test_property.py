"""Property: no generated secret survives redaction, in any punctuation context or digit spelling
(docs/SECURITY.md)."""

from __future__ import annotations

import re
import string

from hypothesis import example, given, settings
from hypothesis import strategies as st
from stdnum import luhn

from skillflow.kernel.textnorm import fold
from skillflow.promotion.detectors import BARE_PROSE, PLAIN_VALUES, literal_findings, prose_word
from skillflow.promotion.redact import redact_query

CONTEXTS = [
    "{s}",
    "it is {s}.",
    "it is {s}!",
    "is it {s}?",
    'the value "{s}" please',
    "the value '{s}' please",
    "the value “{s}” please",
    "see ({s}) now",
    "first {s}, then more",
    "value: {s}",
    "value:{s}",
    "[{s}]",
    "{s}; done",
    "ends with {s}",
]


@st.composite
def card_numbers(draw: st.DrawFn) -> str:
    body = draw(st.from_regex(r"[3-6][0-9]{14}", fullmatch=True))
    digits = body + luhn.calc_check_digit(body)
    sep = draw(st.sampled_from(["", " ", "-"]))
    return sep.join(digits[i : i + 4] for i in range(0, 16, 4))


@st.composite
def letter_tokens(draw: st.DrawFn) -> str:
    """A random mixed-case letter token whose case changes every letter or two (``QwErTy…``): 8 to 20 pairs of an
    upper-case and a lower-case letter, maybe after one lower-case letter, maybe with every case swapped."""
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(string.ascii_uppercase), st.sampled_from(string.ascii_lowercase)),
            min_size=8,
            max_size=20,
        )
    )
    token = draw(st.sampled_from(["", *string.ascii_lowercase])) + "".join(u + low for u, low in pairs)
    return token.swapcase() if draw(st.booleans()) else token


emails = st.from_regex(r"[a-z][a-z0-9._+-]{0,15}@[a-z][a-z0-9-]{0,10}\.(com|org|io|example|co\.uk)", fullmatch=True)
tokens = st.one_of(
    st.from_regex(r"(sk|pk|ghp|tok|key)[-_][A-Za-z0-9]{16,40}", fullmatch=True),
    st.from_regex(r"[A-Za-z]{2,8}[0-9]{2,8}[A-Za-z0-9]{0,8}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
    letter_tokens(),
)
dates = st.one_of(
    st.dates().map(lambda d: d.isoformat()),
    st.dates().map(lambda d: d.strftime("%B %-d, %Y")),
    st.dates().map(lambda d: d.strftime("%-d %B %Y")),
    st.dates().map(lambda d: d.strftime("%m/%d/%Y")),
    st.dates().map(lambda d: d.strftime("%b %-d")),
)
passwords = st.text(alphabet=string.ascii_letters + string.digits + "!#$%&*+-_=@^~", min_size=3, max_size=16)
PASSWORD_LEADS = ["my password is {s}", "password: {s}", "password {s}", "pin={s}", "my username is {s}"]


def _survives(secret: str, text: str, shell: str = "") -> bool:
    """Whether ``secret`` is in the redacted ``text`` more often than in ``shell`` (the same text around no secret:
    ``HEN`` is in "then") once placeholders are dropped (``ECR`` is in ``<secret>``)."""

    def seen(t: str) -> int:
        return re.sub(r"<[a-z_ -]+>", " ", t).casefold().count(secret.casefold())

    return seen(text) > seen(shell)


@settings(deadline=None)
@given(secret=st.one_of(card_numbers(), emails, tokens, dates), context=st.sampled_from(CONTEXTS))
@example(secret="sk_AAAAAAAAAAAAAAAA", context="{s}")  # found by this property: a prefixed key without digits
@example(secret="QwErTyUiOpAsDfGhJkLz", context="{s}")  # docs/SECURITY.md's miss of 2026-12-04: letters only
@example(secret="XkcdQwrtzPlmnbvcxz", context="value: {s}")  # three camel "words" of random letters
def test_no_shaped_secret_survives_redaction(secret: str, context: str) -> None:
    out = redact_query("Hello, " + context.format(s=secret))
    assert not _survives(secret, out, "Hello, " + context.format(s=" ")), (secret, out)
    assert not any(ch.isdigit() for ch in out), out  # the structural backstop: no digit at all
    assert literal_findings(out) == [], out


@settings(deadline=None)
@given(secret=passwords, lead=st.sampled_from(PASSWORD_LEADS), context=st.sampled_from(CONTEXTS))
@example(secret="HEN", lead="my password is {s}", context="first {s}, then more")  # CI: "then" holds it, redacted
@example(secret="lIMIT", lead="password {s}", context="{s}")  # found by this property: a mixed-case "limit"
@example(secret="LiMiT", lead="{s} is my password", context="{s}")
def test_no_password_survives_redaction(secret: str, lead: str, context: str) -> None:
    if secret.rstrip(".,;:!?)]}") in PLAIN_VALUES:
        return  # "my password is the same": a lowercase function word is read as prose (docs/SECURITY.md)
    if lead == "password {s}" and prose_word(secret, BARE_PROSE):
        return  # "password reset", "password Limit": a prose word in lower or capitalised case (docs/SECURITY.md)
    text = context.format(s=lead.format(s=secret))
    out = redact_query(text)
    core = secret.rstrip(".,;:!?)]}")
    assert len(core) < 3 or not _survives(core, out, context.format(s=lead.format(s=" "))), (text, out)


# Digit spellings a reader reads as 0-9: ASCII, superscript, circled, dingbat (no decomposition), fullwidth.
DIGIT_FORMS = ["0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹", "⓪①②③④⑤⑥⑦⑧⑨", "⓿❶❷❸❹❺❻❼❽❾", "０１２３４５６７８９"]
SEPARATORS = ["", " ", ".", "-", ",", "\u200b", ". "]
filler = st.text(alphabet=string.ascii_letters + " ,.;:!?()'\"-", max_size=30)


@st.composite
def planted_numbers(draw: st.DrawFn) -> tuple[str, str]:
    """(digits, how they are written): a Luhn-valid card or any number of 3 to 19 digits, in groups of 1 to 4
    digits joined by one separator, in one digit spelling."""
    if draw(st.booleans()):
        body = draw(st.from_regex(r"[3-6][0-9]{14}", fullmatch=True))
        digits = body + luhn.calc_check_digit(body)
    else:
        digits = draw(st.from_regex(r"[0-9]{3,19}", fullmatch=True))
    groups, i = [], 0
    while i < len(digits):
        n = draw(st.integers(1, 4))
        groups.append(digits[i : i + n])
        i += n
    form = draw(st.sampled_from(DIGIT_FORMS))
    written = draw(st.sampled_from(SEPARATORS)).join(groups).translate(str.maketrans("0123456789", form))
    return digits, written


@settings(deadline=None)
@given(planted=planted_numbers(), before=filler, after=filler)
@example(planted=("4539148803436467", "4539.1488.0343.6467"), before="my card ", after=".")  # the audit of 2026-12-04
@example(planted=("4539148803436467", "⁴⁵³⁹ ¹⁴⁸⁸ ⁰³⁴³ ⁶⁴⁶⁷"), before="card ", after="")  # the audit of 2026-12-04
@example(planted=("4155552671", "④①⑤⑤⑤⑤②⑥⑦①"), before="call ", after=" now")  # the audit of 2026-12-04
@example(planted=("3000000000000004", "3-0-0-000-0000-00-0004"), before="", after="A")  # found in CI's profile
def test_no_planted_number_survives_in_any_spelling(planted: tuple[str, str], before: str, after: str) -> None:
    digits, written = planted
    out = fold(redact_query(before + written + after))
    windows = {digits[i : i + 3] for i in range(len(digits) - 2)}
    runs = re.findall(r"\d{3,}", out)
    assert not any(w in run for run in runs for w in windows), (written, out)
    assert not re.search(r"\d", out), (written, out)  # the filler has no digit: every digit was planted
