"""One Unicode normalisation for every text check: what a reader sees, not how it was encoded.

``fold`` is the form the literal and injection checks read (docs/SECURITY.md, "Smuggling"): NFKD
compatibility forms (fullwidth, mathematical letters, ligatures), combining marks dropped, invisible
format characters dropped, Unicode tag characters decoded to the ASCII they hide, Cyrillic/Greek letters
that look Latin folded to Latin, every digit of any script (superscript, circled, dingbat) an ASCII
digit, every space separator a plain space, private-use, unassigned and noncharacter code points dropped.
``hidden_kinds`` names the characters a stored skill may not carry at all (tag, bidi, zero-width/format,
variation selector, control, private-use, unassigned, noncharacter). Both have an ASCII fast path.
``unspace`` joins letters spaced out one by one; ``unmark`` removes markup inside words and joins words broken
across lines; ``readings`` is the text and each of those.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` that encodes as UTF-8: a lone surrogate (e.g. from ``surrogateescape``) becomes U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def id_problem(text: str) -> str | None:
    """Why ``text`` cannot be a tenant id, or ``None``: NUL or a lone surrogate (no database text column holds
    them, and coercing them would make two tenants one), or another control character (storage keys join a
    tenant's ids with ``\x1f``). Capture and ``prepare`` refuse the same ids."""
    if "\x00" in text or _SURROGATE.search(text) is not None:
        return "must not contain NUL or lone surrogate characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return "must not contain control characters"
    return None


MAX_TENANT_CHARS = 255


def tenant_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the tenant id ``name`` (``agent_id``/``user_id``), naming the field and never the
    value, or ``None``: not a non-empty string of at most :data:`MAX_TENANT_CHARS` characters, or what
    :func:`id_problem` refuses. Capture, ``prepare``, ``register_tools`` and import read ids alike."""
    if not isinstance(value, str):
        return f"{name} must be a non-empty string"
    text: str = str.__str__(value)  # a str subclass's own methods are never called
    if not text.strip():
        return f"{name} must be a non-empty string"
    if len(text) > MAX_TENANT_CHARS:
        return f"{name} is longer than {MAX_TENANT_CHARS} characters"
    if problem := id_problem(text):
        return f"{name} {problem}"
    return None


_TAG_FIRST, _TAG_LAST = 0xE0000, 0xE007F
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Letters without a decomposition that render as blanks (Hangul fillers, braille blank).
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_CONFUSABLES_TEXT = (
    # Cyrillic
    "аa вb сc еe ёe һh іi їi јj кk мm нh оo рp ѕs тt уy хx ԁd ԛq ԝw ӏl ѵv ɡg "
    "АA ВB СC ЕE ЁE НH ІI ЇI ЈJ КK МM ОO РP ЅS ТT УY ХX ԀD ԚQ ԜW ӀI ѴV "
    # Greek
    "αa βb γy εe ηn ιi κk νv οo ρp τt υu χx ωw "
    "ΑA ΒB ΕE ΖZ ΗH ΙI ΚK ΜM ΝN ΟO ΡP ΤT ΥY ΧX "
    # Latin look-alikes and slashes/brackets that do not decompose
    "ıi ȷj ʟl ɪi ⁄/ ∕/ ⧸/ ‹< ›> ˂< ˃> ❮< ❯> ⟨< ⟩> 〈< 〉> ᐸ< ᐳ>"
)
CONFUSABLES: dict[str, str] = {pair[0]: pair[1] for pair in _CONFUSABLES_TEXT.split()}
_LINE_BREAKS = frozenset("\u2028\u2029\x85")


def _is_variation_selector(cp: int) -> bool:
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF or 0x180B <= cp <= 0x180D


def _unseen_kind(ch: str, category: str) -> str | None:
    """``private-use``, ``noncharacter`` or ``unassigned`` for a code point no font shows as a letter (a blank, a
    box, or a vendor's glyph), else None: such a character inside a word splits it for the checks while a reader
    sees the word whole (docs/SECURITY.md, "Attacks tried")."""
    if category == "Co":
        return "private-use"
    if category != "Cn":
        return None
    cp = ord(ch)
    if 0xFDD0 <= cp <= 0xFDEF or cp & 0xFFFE == 0xFFFE:  # U+FDD0–FDEF and the last two of every plane
        return "noncharacter"
    return "unassigned"


@lru_cache(maxsize=8192)
def _fold_char(ch: str) -> str:
    cp = ord(ch)
    if _TAG_FIRST + 0x20 <= cp <= _TAG_FIRST + 0x7E:
        return chr(cp - _TAG_FIRST)  # decoded, so the checks read the hidden instruction
    category = unicodedata.category(ch)
    if category == "Cf" or _is_variation_selector(cp) or ch in _BLANK_LETTERS or category in ("Co", "Cn"):
        return ""
    if ch in _LINE_BREAKS:
        return "\n"
    if category == "Zs":
        return " "
    if category == "Cc":
        return ch if ch in "\t\n\r" else " "
    out = []
    for part in unicodedata.normalize("NFKD", ch):
        if unicodedata.category(part)[0] == "M":
            continue
        # Digits with no decomposition (❶, ➀, ٤) read as the digit they show: the number rules see them.
        digit = unicodedata.digit(part, None)
        out.append(str(digit) if digit is not None else CONFUSABLES.get(part, part))
    return "".join(out)


def fold(text: str) -> str:
    """The text as the checks read it (see the module docstring); ASCII text is returned unchanged."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", "".join(ch if ch < "\x80" else _fold_char(ch) for ch in text))


def fold_map(text: str) -> tuple[str, list[int]]:
    """``fold`` without its final NFC recomposition, with the index in ``text`` of the character each folded
    character came from: a span found in the folded text maps back to the text (``detectors.findings``)."""
    chars: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        piece = ch if ch < "\x80" else _fold_char(ch)
        chars.append(piece)
        origin.extend([i] * len(piece))
    return "".join(chars), origin


_SPACED_OUT = re.compile(r"(?<!\w)(?:\w[ \t])+\w(?!\w)")
# Every character spaced out, punctuation too: "h t t p s : / / e v i l . e x a m p l e" is one address.
_SPACED_OUT_ALL = re.compile(r"(?<!\S)(?:\S[ \t])+\S(?!\w)")


def unspace(text: str, punctuation: bool = False) -> str:
    """``text`` with runs of two or more single letters or digits separated by single spaces joined
    (``i g n o r e`` → ``ignore``; a wider gap stays a word break): the checks read both forms. With
    ``punctuation``, single marks join the run too (``r e c o r d s @ a u d i t . e x a m p l e``)."""
    return (_SPACED_OUT_ALL if punctuation else _SPACED_OUT).sub(lambda m: "".join(m.group(0).split()), text)


# Markup a model reads through when it sits inside a word: emphasis, strike and code marks (``ig**no**re``,
# ``4~~1~~11``) and inline HTML tags (``ig<b></b>nore``); and a word broken across a line (``ign\nore``,
# ``ig-\nnore``).
# Between digits only doubled marks count ("25*3" is arithmetic); an underscore only between small letters
# ("ig_no_re"; "ACT_AGENCE" and "mia_li_3668" stay identifiers).
_TAG = r"</?[A-Za-z][A-Za-z0-9]{0,9}[ \t]*/?>"
_INNER_MARKUP = re.compile(
    rf"(?<=[^\W\d_])(?:[*~`]+|{_TAG})+(?=[^\W\d_])|(?<=[^\W_])(?:\*\*+|~~+|`+|{_TAG})+(?=[^\W_])"
    r"|(?<=[a-z])_+(?=[a-z])"
)
# A letter to a small letter, a digit to a digit: "… → error\n3. `cancel`" is a list, not the token "error3",
# and a line that starts with a capital starts a sentence or a heading ("…reservation\nIgnore" stays two words).
_INNER_BREAK = re.compile(r"(?<=[^\W\d_])-?[ \t]*\n[ \t]*(?=[a-z])|(?<=\d)-?[ \t]*\n[ \t]*(?=\d)")


def unmark(text: str, breaks: bool = False) -> str:
    """``text`` with markup inside words removed (``ig**no**re`` → ``ignore``); with ``breaks``, words broken
    across lines joined too (``ign\nore``). A line's last word and the next line's first word are then joined
    as well, so that form is only ever read beside the others, never instead of them."""
    text = _INNER_MARKUP.sub("", text)
    return _INNER_BREAK.sub("", text) if breaks else text


def readings(text: str) -> list[str]:
    """``text`` and each other form a reader may see in it (``unspace`` of letters and digits, and of every
    mark too; ``unmark`` without and with line breaks joined), without repeats."""
    out = [text]
    for form in (unspace(text), unspace(text, punctuation=True), unmark(text), unmark(text, breaks=True)):
        if form not in out:
            out.append(form)
    return out


def squeeze(text: str) -> str:
    """``fold`` with every whitespace run removed and case folded: for spotting tags written apart."""
    return "".join(fold(text).split()).casefold()  # str.split's whitespace is the regex \s's


@lru_cache(maxsize=8192)
def _hidden_kind(ch: str) -> str | None:
    cp = ord(ch)
    if _TAG_FIRST <= cp <= _TAG_LAST:
        return "tag"
    if ch in _BIDI:
        return "bidi"
    if _is_variation_selector(cp):
        return "variation-selector"
    category = unicodedata.category(ch)
    if category == "Cf" or ch in _BLANK_LETTERS:
        return "invisible"
    if category == "Cc" and ch not in "\t\n\r":
        return "control"
    return _unseen_kind(ch, category)


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def hidden_kinds(text: str) -> list[str]:
    """Kinds of invisible or control characters in ``text`` (``tag``, ``bidi``, ``invisible``,
    ``variation-selector``, ``control``, ``private-use``, ``unassigned``, ``noncharacter``), sorted; empty when
    there are none. ``unassigned`` is as of this Python's Unicode version (``unicodedata.unidata_version``)."""
    kinds = {"control"} if _ASCII_CONTROL.search(text) else set()
    if not text.isascii():
        kinds.update(k for ch in set(text) if ch >= "\x80" and (k := _hidden_kind(ch)) is not None)
    return sorted(kinds)


def strip_controls(text: str) -> str:
    """NFKC with every format, control (newlines and tabs too) and variation-selector character removed
    and whitespace runs collapsed: a one-line free text as it may be stored (reasons, labels)."""
    text = unicodedata.normalize("NFKC", text)
    kept = "".join(" " if ch in "\t\n\r" else ch for ch in text if ch in "\t\n\r" or _hidden_kind(ch) is None)
    return " ".join(kept.split())


def safe_label(text: str, max_chars: int = 40) -> str | None:
    """``text`` as a short label (``[a-z0-9_-]``, at most ``max_chars``) when folding it loses nothing but
    case; else None. Callers still run their own instruction and literal checks on the result."""
    folded = fold(text).strip().casefold()
    if not folded or len(folded) > max_chars or not re.fullmatch(r"[a-z0-9_-]+", folded):
        return None
    return folded
