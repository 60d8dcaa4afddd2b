"""Literal detectors: which spans of a text are values (email, URL, phone, card, date, secret, id, number).

One list of findings serves both sides of the boundary (docs/SECURITY.md): :func:`scrub` replaces every
finding by its placeholder before a text reaches an LLM, a log or a stored skill, and validation refuses a
skill in which :func:`literal_findings` finds anything at all. Well-kept detectors do the typed work
(``phonenumbers`` for phone numbers, ``python-stdnum`` for Luhn card and IBAN check digits,
``detect-secrets`` for vendor tokens and keyword assignments); the structural rules behind them (no digit,
no mixed letter/digit token, no random letter token, no quoted credential) are the backstop whatever the
detectors miss.

The detectors read the text as a reader sees it (``textnorm.fold``: superscript, circled and fullwidth
digits, homoglyphs and zero-width characters; ``%40``-style escapes decoded) and every span is mapped back,
so a placeholder replaces the whole original spelling. A token longer than ``MAX_TOKEN_CHARS`` is a value
whole; the patterns only ever see shorter ones, which keeps their cost linear in the text.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from skillflow.kernel.textnorm import fold, fold_map

MAX_TOKEN_CHARS = 128
_LONG_TOKEN = re.compile(rf"\S{{{MAX_TOKEN_CHARS + 1},}}")
_PERCENT = re.compile(r"%(?:[2-6][0-9A-Fa-f]|7[0-9A-Ea-e])")  # an escaped printable ASCII character
EMAIL = re.compile(  # starts only where a local part can start: one attempt per run, never quadratic
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+\s*(?:@|\[at\]|\(at\))\s*[A-Za-z0-9-]+(?:\s*(?:\.|\[dot\]|\(dot\))\s*[A-Za-z0-9-]+)*\s*(?:\.|\[dot\]|\(dot\))\s*[A-Za-z]{2,}"
)
# An address whose host is one word (``jane@localhost``, ``root@intranet``): a hostname-shaped word after the ``@``,
# no dot after it (the rule above takes dotted hosts); ``@jane`` (no local part) is a mention.
EMAIL_HOST = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z][A-Za-z0-9-]*(?![A-Za-z0-9@-]|\.[A-Za-z0-9])")
URL = re.compile(
    r"(?i)\b(?:https?|h[x*]{2}ps?|ftp|fxp|file|data|javascript)(?:://|\[:\]//|\[://\])[^\s<>\"'`]+|\bwww\.[^\s<>\"'`]+"
)
_TLDS = "com|org|net|io|co|ai|dev|app|info|biz|me|xyz|example|test|invalid|local|gov|edu|us|uk|de|ru|cn|fr|tk|ly"
# An address spelled out in words, as users dodge filters: "jane at example dot com" (only with "dot" and a
# known top-level domain: "out at JFK. Then" is prose).
EMAIL_SPELLED = re.compile(
    rf"(?i)(?<![\w.%+-])[a-z0-9._%+-]+(?:[ \t]+dot[ \t]+[a-z0-9._%+-]+)*[ \t]+at[ \t]+[a-z0-9-]+"
    rf"(?:[ \t]+dot[ \t]+[a-z0-9-]+)*[ \t]+dot[ \t]+"
    rf"(?:{_TLDS})\b"
)
# A defanged address, as threat reports and attackers write one so that no filter reads it: a dot written
# ``[.]``, ``(.)``, ``{.}``, ``[dot]`` or ``(dot)`` (``example[.]com``, ``exfil-host[dot]net``), whatever the
# top-level domain (``hxxps://…`` is the URL rule's).
DEFANGED = re.compile(
    r"(?i)(?<![\w.\[\](){}-])[a-z0-9-]+(?:\.[a-z0-9-]+)*(?:(?:\[\.\]|\(\.\)|\{\.\}|\[dot\]|\(dot\))[a-z0-9-]+)+"
    r"(?:\.[a-z0-9-]+)*(?:/[^\s<>\"'`]*)?"
)
_DEFANGED_DOT = re.compile(r"(?i)\[(?:\.|dot)\]|\((?:\.|dot)\)|\{\.\}")
DOMAIN = re.compile(rf"(?i)(?<![\w.-])(?:[a-z0-9-]+\.)+(?:{_TLDS})\b(?:/[^\s<>\"'`]*)?")
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
DATE = re.compile(
    r"(?i)\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b"
    rf"|\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b\.?(?:,?\s+\d{{4}}\b)?"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\s*(?:[ap]\.?m\.?\b)?"
)
CARD_LIKE = re.compile(r"(?<![\w-])\d(?:[ .-]?\d){11,18}(?![\w-])")
IBAN_LIKE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
# Three or more dot/comma-separated digit groups (192.168.200.17, 1.234.567, 555.123.4567.89): one number.
NUMBER_CHAIN = re.compile(r"(?<!\d)\d++(?:[.,]\d++){2,}")
NUMBER = re.compile(r"[-+]?(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?!\w|\.\d)|(?<![\w.])\.\d+(?!\w)")
# The backstop: a number, else any digit run whatever surrounds it (one pass: the rule runs on every query).
NUMBER_OR_DIGITS = re.compile(rf"{NUMBER.pattern}|\d+")
ID_TOKEN = re.compile(r"(?<![\w<])(?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])[A-Za-z0-9][\w.-]*[A-Za-z0-9](?![\w>])")
HEX_TOKEN = re.compile(r"\b[0-9a-fA-F-]{16,}\b")
CODE_TOKEN = re.compile(r"(?<![\w<])[A-Z]{3,}(?![\w>])")
QUOTED = re.compile(r"(?<!\w)[\"“'‘]([^\"“”'‘’\n]{1,64})[\"”'’](?!\w)")
# ``password`` also spelled apart or in leetspeak: ``pass-word``, ``p a s s w o r d``, ``passw0rd``, ``pa$$word``.
_PASSWORD_SPELLINGS = r"p[ ._-]?[a@4][ ._-]?[s$5][ ._-]?[s$5][ ._-]?w[ ._-]?[o0][ ._-]?r[ ._-]?d"
# A wallet's seed phrase, a session's id or cookie, a wifi or door code, a security question's answer.
_MORE_CRED_WORDS = (
    r"(?:secret\s+)?recovery\s+(?:phrase|words?|seed)|seed\s+(?:phrase|words?)|mnemonic(?:\s+(?:phrase|words?))?"
    r"|wallet\s+(?:phrase|words|seed)|session[\s_-]?(?:id|token|key|cookie)|(?:auth|login)\s+cookie|creds"
    r"|(?:wi-?fi|wlan|network|router|wpa2?)\s+(?:key|code|passphrase)"
    r"|(?:door|gate|alarm|garage|entry|locker|building|lock)\s+code|code\s?word|maiden\s+name"
    r"|(?:licen[cs]e|product|activation|registration|serial|software)\s+(?:key|code)"
    r"|(?:(?:auth|login|session|browser)\s+)?cookie(?=\s*[:=]|\s+(?:is|was)\s+(?!(?-i:[a-z]+)\b)|\s+value\b)"
)
_CRED_WORDS = (
    rf"{_MORE_CRED_WORDS}|{_PASSWORD_SPELLINGS}"
    r"|user\s?name|login|password|pass\s?code|pass\s?phrase|passwd|pwd|pw|pin|token|api[\s_-]?key|secret|otp"
    r"|cvv|cvc|ssn|security\s+(?:code|question)|verification\s+code|access\s+code|(?:security|secret)\s+answers?"
    r"|private\s+key|credentials?|bearer|authorization"
)
# The word for password in other languages, as ``fold`` reads it (accents dropped: ``contraseña`` is read
# ``contrasena``; Cyrillic look-alikes read as Latin: ``пароль`` is read ``пapoль``): es, fr, de, pt, it, pl, nl,
# ru, tr, id/ms, vi, sv, no/da, fi, cs/sk, hu, ro. Japanese, Chinese and Korean (``パスワード`` is read ``ハスワート``:
# its sound marks are dropped; Korean particles attach to the word: ``비밀번호는``) have no word boundaries, so
# theirs match anywhere.
_FOREIGN_CRED_TEXT = (
    "contraseña|clave|mot de passe|passwort|kennwort|senha|parola d'ordine|hasło|wachtwoord|пароль"
    "|şifre|şifrem|şifreniz|parola|kata sandi|kata laluan|mật khẩu|lösenord|passord|adgangskode|salasana"
    "|heslo|jelszó|jelszavam|parolă"
)
_CJK_CRED_TEXT = "パスワード|密码|密碼|비밀번호|비번|암호|패스워드"


def _folded_words(words: str) -> str:
    """The words as the detectors may read them: folded, and decomposed too (``fold_map`` reads Hangul syllables
    as their letters)."""
    forms = dict.fromkeys(f for w in words.split("|") for f in (fold(w), unicodedata.normalize("NFD", fold(w))))
    return "|".join(re.escape(f).replace(r"\ ", r"\s+").replace("'", "['’]") for f in forms)


# A credential key written as an identifier, in any case: ``DB_PASSWORD``, ``client_secret``, ``X-Auth-Token``,
# ``AWS_SECRET_ACCESS_KEY``, ``clientSecret``, ``pass`` (``user=admin&pass=…``). Only as a key, right before
# ``=`` or ``:`` (in run text also after a closing quote: ``{"pass": …}``), so ``the password_reset flow`` and
# ``I'll pass`` stay prose.
_ID_CRED_WORDS = (
    r"password|passwd|passcode|passphrase|pass|pwd|pw|pin|token|secret|otp|cvv|cvc|ssn|credentials?|creds"
    r"|session(?:[_-]?id)?|sessid|phpsessid|jsessionid|sid|cookie|csrf(?:token)?|xsrf(?:[_-]?token)?"
    r"|api[_-]?key|private[_-]?key|username|login|bearer|authorization"
)
_CAMEL_CRED_WORDS = r"Password|Passwd|Passcode|Passphrase|Pwd|Secret|Token|Credentials?|ApiKey|PrivateKey"


def _cred_key(quote: str) -> str:
    return (
        rf"(?:\b(?:{_CRED_WORDS}|{_folded_words(_FOREIGN_CRED_TEXT)})\b|{_folded_words(_CJK_CRED_TEXT)}"
        r"|(?<=\bmy )pass(?=\s+is\b)"
        rf"|(?:(?<![A-Za-z0-9])(?:{_ID_CRED_WORDS})|(?<=[a-z0-9])(?-i:{_CAMEL_CRED_WORDS}))"
        rf"(?:[_-][A-Za-z0-9_-]*|(?-i:[A-Z])[A-Za-z0-9_-]*)?{quote}(?=\s*[=:]))"
    )


# What may stand between the key and the value: marks (``=``, ``:``, ``->``, ``=>``, ``→``, and in run text a
# dash or an ellipsis) and a verb, in either order (``password is: …``, ``password: is …``). The verbs are the
# other languages' too (es ``es``, fr ``est``, de ``ist``/``lautet``, pt/it ``é``/``è`` read ``e``, pl
# ``jest``/``to``, ru ``это``; ja ``は``, zh ``是``/``为``).
_STRICT_MARK = r"(?:[-=]+>|[=:]+|[→⇒])"
_LOOSE_MARK = r"(?:[-=]+>|[=:]+|[→⇒]|[-–—]+|\.{2,})"
_STRICT_VERBS = (
    rf"is|was|are|were|es|est|ist|lautet|war|era|e(?!\.)|jest|(?<=hasło )to|{re.escape(fold('это'))}|adalah|la"
)
_CJK_VERBS_TEXT = "は|是|为|為|는|은"
_CJK_VERBS = "|".join(
    dict.fromkeys(f for v in _CJK_VERBS_TEXT.split("|") for f in (v, unicodedata.normalize("NFD", v)))
)
_STRICT_VERB = rf"(?:\s+(?:{_STRICT_VERBS})\b|\s*(?:{_CJK_VERBS}))"
_LOOSE_VERB = rf"(?:\s+(?:{_STRICT_VERBS}|(?:will|would|should|shall|must)\s+be|of|to)\b|\s*(?:{_CJK_VERBS}))"
_CRED_WORD = r"[^\s\"'<>`“”‘’]+"
# A quoted value (also in backticks or angle brackets), or every word to the end of the clause (up to a word
# ending in , ; . ! ? or the line's end): "my passphrase is tangerine walrus quietly dances", "pin is four eight
# two one", "Bearer AbCd…". The patterns take the first word; ``_CLAUSE_REST`` the others, only when the first is
# a value (``_credential_spans``), so a clause is read once whatever its words.
_CRED_VALUE = rf"(?P<value>[\"“'‘`][^\"“”'‘’`\n]{{1,64}}[\"”'’`]|<[^<>\n]{{1,64}}>|(?P<first>{_CRED_WORD}))"
_CLAUSE_REST = re.compile(rf"(?:(?<![,;.!?])[ \t]+{_CRED_WORD})*")
# Queries: "username admin, password hunter2" (no connector needed). Skills: only "password is x" / "pin: x".
_QUOTE = r"[\"'`]?"
CREDENTIAL = re.compile(
    rf"(?i){_cred_key(_QUOTE)}(?P<connector>(?:{_QUOTE}\s*{_LOOSE_MARK})?{_LOOSE_VERB}?(?:\s*{_LOOSE_MARK})?)"
    rf"\s*{_CRED_VALUE}"
)
CREDENTIAL_STRICT = re.compile(
    rf"(?i){_cred_key('')}(?=\s*{_STRICT_MARK}|{_STRICT_VERB})"
    rf"(?P<connector>(?:\s*{_STRICT_MARK})?{_STRICT_VERB}?(?:\s*{_LOOSE_MARK})?)\s*{_CRED_VALUE}"
)
# A word after a bare credential word (no connector) that makes it prose: "the password reset page", "my pin
# has expired", "login failed" (words of four letters or more; shorter function words are ``PLAIN_VALUES``).
_BARE_PROSE_TEXT = (
    "reset resets page link field form screen prompt manager policy policies rules requirements recovery hint "
    "change changed changes expired expires expiry expiration count limit length settings protected strength "
    "failed fails failure error errors incorrect invalid wrong works worked doesn't does did didn't isn't wasn't "
    "won't can't cannot never have needs need required request requests attempts update updated issue issues "
    "problem problems help without because when which will would should could must please again also "
)
BARE_PROSE = frozenset(_BARE_PROSE_TEXT.split())
# What a placeholder may name in run text (``shape_of`` and the findings' kinds): ``password is <secret>`` is
# redacted already, ``password <amberfox>`` is not.
_PLACEHOLDER_KINDS_TEXT = (
    "string int number bool null id email date url phone card account secret object value key name code address"
)
PLACEHOLDER_KINDS = frozenset(_PLACEHOLDER_KINDS_TEXT.split())
_CRED_NAME = re.compile(rf"(?i)(?:{_CRED_WORDS}|{_ID_CRED_WORDS})")
# A number spelled out, as users dodge the digit rules: a run of four or more number words ("four five three nine
# …", "two-seven-one-eight", "quatre cinq trois neuf", "dreizehn vierzehn …"), or of three or more when one is an
# English ten, teen or scale word ("forty two twenty one", "nine hundred and twelve", "nineteen eighty four"), and a
# run of three or more CJK numerals ("one or two bags", "twenty one", "one hundred" stay). The words are
# English's, French's, Spanish's, German's, Italian's and Portuguese's as ``fold`` reads them (``fünf`` is
# ``funf``); ``and`` joins only after a scale word.
_EN_UNIT_WORDS = "zero oh one two three four five six seven eight nine"
_EN_BIG_WORDS = (
    "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fourty "
    "fifty sixty seventy eighty ninety"
)
_SCALE_WORDS = "hundred thousand million billion"
_FOREIGN_NUMBER_WORDS = (
    "zero un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize vingt trente "
    "quarante cinquante soixante cero uno dos tres cuatro cinco seis siete ocho nueve diez doce trece catorce quince "
    "veinte treinta cuarenta cincuenta sesenta setenta ochenta noventa eins zwei drei vier funf sechs sieben acht "
    "neun zehn zwolf dreizehn vierzehn funfzehn sechzehn siebzehn achtzehn neunzehn zwanzig dreissig vierzig "
    "funfzig sechzig siebzig achtzig neunzig tre quattro cinque sei sette otto nove dieci dois quatro sete oito"
)
EN_BIG_NUMBER_WORDS = frozenset((_EN_BIG_WORDS + " " + _SCALE_WORDS).split())


def _trie(words: Iterable[str]) -> str:
    """One regex alternation of lowercase words, as a trie (``t(?:wo|hree)``): it fails at a word's first letter
    rather than trying each word, which keeps patterns tried at every word of a text cheap."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def walk(node: dict[str, Any]) -> str:
        alts = [re.escape(ch) + walk(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and "" not in node else "(?:" + "|".join(alts) + ")"
        return body + "?" if "" in node and alts else body

    return walk(tree)


_NUMBER_WORD = (
    rf"(?:{_trie(_SCALE_WORDS.split())}(?:[ \t]+and)?"
    rf"|{_trie(set((_EN_UNIT_WORDS + ' ' + _EN_BIG_WORDS + ' ' + _FOREIGN_NUMBER_WORDS).split()))})\b"
)
NUMBER_WORDS = re.compile(rf"(?i)\b{_NUMBER_WORD}(?:(?:[ \t]*[,-][ \t]*|[ \t]+){_NUMBER_WORD})+")
_NUMBER_WORD_SPLIT = re.compile(r"[\s,-]+")
CJK_NUMBER = re.compile(r"[〇零一二三四五六七八九]{3,}")
# A day and month in words: "the twelfth of april", "april twelfth", "twenty-first of june" (``may`` only after
# "of": "you may first check" is prose). A year in words after it is a number (above).
_ORDINAL_WORDS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth thirtieth"
)
_ORDINAL = rf"(?:(?:twenty|thirty)[ -]?)?{_trie(_ORDINAL_WORDS.split())}"
_MONTH_NAMES_TEXT = "january february march april may june july august september october november december"
_MONTH_NAME = _trie(_MONTH_NAMES_TEXT.split())
WORD_DATE = re.compile(
    rf"(?i)\b{_ORDINAL}[ \t]+of[ \t]+{_MONTH_NAME}\b|\b(?!may\b){_MONTH_NAME}[ \t]+(?:the[ \t]+)?{_ORDINAL}\b"
)
# A street address written in lowercase words: "one elm street", "forty two maple avenue" (a number in digits is
# the digit rules'; "a one way street" is prose: the street's name is no word of ``_NOT_STREET_NAMES``).
_EN_NUMBER_WORD = _trie((_EN_UNIT_WORDS + " " + _EN_BIG_WORDS + " hundred thousand").split())
_STREET_TYPE = r"(?:street|st|avenue|ave|road|rd|boulevard|blvd|lane|drive|terrace|parkway|highway|hwy|place|court)"
WORD_ADDRESS = re.compile(
    rf"(?i)\b{_EN_NUMBER_WORD}(?:[ -]{_EN_NUMBER_WORD}){{0,3}}(?P<name>(?:[ \t]+[a-z][a-z'-]*){{1,2}}?)"
    rf"[ \t]+{_STREET_TYPE}\b"
)
_NOT_STREET_NAMES_TEXT = (
    "a an the way more side dead end one-way two-way long short busy small big quiet main other same little narrow "
    "wide of in on at to for or and lane way's"
)
_NOT_STREET_NAMES = frozenset(_NOT_STREET_NAMES_TEXT.split())
PLACEHOLDER = re.compile(r"<[a-z][a-z ]*>")
# Upper-case words that are prose, not codes ("When NOT to apply").
_CODE_ALLOW_TEXT = (
    "I OK USA FAQ ASAP PIN NOT AND THE ONLY NEVER ALWAYS MUST DO API JSON URL HTTP ID IDS YAML SKILL "
    "NOTE NONE UTC ISO SQL CLI LLM PDF CSV TODO "
)
CODE_ALLOW = frozenset(_CODE_ALLOW_TEXT.split())
_PLAIN_VALUES_TEXT = (
    "a an the my your his her their our this that it is was be same new old current one it's its none "
    "null value values here there above below provided given known from for with and or of to in on at "
    "by true false "
)
PLAIN_VALUES = frozenset(_PLAIN_VALUES_TEXT.split())
# Words that are no value before or after a credential key in the rules below ("what is my password", "my
# password for the account is not working").
_PROSE_VALUES_TEXT = (
    "what which who whom whose where when why how this these those nothing something anything everything "
    "following not no also just still already now then so but if else all any some each every both either "
    "neither only too very really being been also there's that's what's here's missing lost needed "
    "correct different empty optional necessary saved stored hidden unknown gone locked blocked stolen "
    "compromised weak strong short long case-sensitive"
)
PROSE_VALUES = PLAIN_VALUES | BARE_PROSE | frozenset(_PROSE_VALUES_TEXT.split())
# The value before the key: "trombonist is my password", "kumquatz is the wifi password".
_KEY_AFTER = (
    rf"(?:{_PASSWORD_SPELLINGS}|passcode|passphrase|passwd|pwd|pin(?:[ \t]+code)?|secret|security[ \t]+answer"
    r"|(?:recovery|seed)[ \t]+phrase|access[ \t]+code|door[ \t]+code|code[ \t]?word)"
)
VALUE_BEFORE_KEY = re.compile(
    r"(?i)(?<![\w<>'\"`])(?P<value>[^\s\"'<>`“”‘’,;.!?]{3,64})[ \t]+(?:is|was|will[ \t]+be|=)[ \t]+"
    r"(?:my|the|our|your|his|her|their)[ \t]+"
    r"(?:(?:new|old|current|real|actual|account|wifi|wi-fi|email|bank|login|admin|master|temporary|temp|one-time)"
    rf"[ \t]+){{0,2}}{_KEY_AFTER}\b"
)
# A key with a few words between it and its verb: "my password for the account is kumquatz".
_QUALIFIED_KEYS = (
    "passcode passphrase passwd pwd pin secret token login username credentials creds mnemonic otp cvv ssn"
)
_QUALIFIED_KEY_PHRASES = ("recovery phrase", "seed phrase", "api key", "wifi key", "access code", "door code")
QUALIFIED_CREDENTIAL = re.compile(
    rf"(?i)\b(?:{_PASSWORD_SPELLINGS}|{_trie([*_QUALIFIED_KEYS.split(), *_QUALIFIED_KEY_PHRASES])})\b"
    rf"[ \t]+(?:for|on|of|at|with|to)(?:[ \t]+[\w'’.-]+){{1,4}}?[ \t]+(?:is|was|are|=|:)[ \t]*{_CRED_VALUE}"
)
# A ``user:password`` pair after a cue that it is one: "creds are admin:opensesame", "log in to the back office as
# admin:opensesame".
USER_PASS = re.compile(
    r"(?i)\b(?:log(?:ged|ging)?[ \t-]?(?:in|on)|sign(?:ed|ing)?[ \t-]?in|login|logon|creds?|credentials?|account"
    r"|ssh|auth(?:enticate)?)\b[^\n,;!?]{0,60}?(?<![\w:/.@-])(?P<pair>[a-z][\w.+-]{0,63}:[^\s:/@\"'`<>]{1,64})"
    r"(?![\w:/@])"
)


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int
    text: str


@cache
def _secret_plugins() -> tuple[Any, ...]:
    """detect-secrets' vendor-token and keyword plugins (the entropy plugins flag ordinary words)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    skip = {"Base64 High Entropy String", "Hex High Entropy String"}
    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    return tuple(cls() for name, cls in mapping.items() if name not in skip)


# A vendor-prefixed key with no digit in it (``sk_AAAA…``) that the entropy plugins score too low to report.
_PREFIXED_KEY = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|pk|rk|ghp|gho|ghs|glpat|tok|key|api|xox[abpr])[-_][A-Za-z0-9_-]{16,}"
)
_JWT = re.compile(r"(?<![\w-])eyJ[\w-]{4,}\.[\w-]+")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+/~")


# A random token of letters only (``QwErTyUiOpAsDfGhJk``): no digit for the backstop, no prefix for the rule above
# (docs/SECURITY.md, "Fixed 2026-12-04: random letter tokens"). A candidate is a run of 16 or more letters, ``_``
# and ``-`` glued to no digit (the id rule takes those); only its mixed-case words (a capital after the first
# letter, and a small letter) are read, and they must hold 16 letters or more, so lowercase words, capitalised
# words, upper-case codes and snake_case names are never candidates.
_LETTER_RUN = re.compile(r"(?<![A-Za-z_-])[A-Za-z_-]{16,}")
_WORD_SEPARATOR = re.compile(r"[_-]")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")  # departure|Airport|Code, XML|Http|Request
_LOWER_RUN = re.compile(r"[a-z]+")
LETTER_SECRET_MIN_LETTERS = 16
# A token scoring this many bits or fewer is random (see :func:`letter_secret`).
LETTER_SECRET_MAX_BITS = -5
# log2 of P(second letter | first) in English words against 1/26, rounded and clamped to -4..3, stored +4: row
# "a" column "b" is the pair "ab". Counted over the 17 296 distinct words that occur three times or more in the
# English documentation files (.rst, .md, .txt, .html) of Python 3.11, the project's installed dependencies and
# /usr/share/doc on the development machine: "qu" is +3, "er" +2, "qw" -3, "zx" and "vq" -4.
_BIGRAM_ROWS = (
    "04551241403656040656322130",
    "53326011540621530543600042",
    "51316105405410620536410010",
    "52247222601423520441421020",
    "52553322201446232665132330",
    "50136510600513610453401030",
    "51327234500435520543401031",
    "60117103602242620434401030",
    "43544340002547530455040103",
    "60127012502000620150603000",
    "51137223601323530353402030",
    "52237120601521520044420050",
    "64227100601241550141401010",
    "51555361403214420156221020",
    "33541231202556340644533110",
    "60126104401511540645400030",
    "22020011300310000321701001",
    "61437230603343520454331040",
    "41416214502322540356402040",
    "50326225600322530544301040",
    "44435430401546140656000001",
    "60207120600121400031100000",
    "62226004601315510642111110",
    "41525203600341360247210430",
    "53334232403446470354322012",
    "62217104501510420211322033",
)
_BIGRAM_BITS = {
    chr(97 + i) + chr(97 + j): int(bits) - 4 for i, row in enumerate(_BIGRAM_ROWS) for j, bits in enumerate(row)
}
# log2 of how much likelier a lowercase run of 1, 2, … 6+ letters is inside a mixed-case identifier than among
# random letters (where half the runs have one letter), counted over the mixed-case words of the identifiers in
# the same Python sources: a lone small letter between capitals ("QwE") is -4, a run of six or more +3.
_LOWER_RUN_BITS = (0, -4, -1, 1, 2, 2, 3)


def _mixed_case(word: str) -> bool:
    return any(c.islower() for c in word) and any(c.isupper() for c in word[1:])


def letter_secret(token: str) -> bool:
    """Whether a run of ASCII letters (words perhaps joined by ``_``/``-``) reads as a random token, not a name.

    Only its mixed-case words count, and they must hold at least ``LETTER_SECRET_MIN_LETTERS`` letters. Random
    when (a) at least three quarters of those letters sit in camel parts of one or two letters (``Qw|Er|Ty…``:
    the case changes every letter or two), or (b) the letters score ``LETTER_SECRET_MAX_BITS`` or less: the sum,
    over every camel part that is not an upper-case code, of its letter pairs' English log-odds, plus the
    log-odds of each lowercase run's length. Upper-case codes (``XML``, ``CUDA``) score nothing either way.
    Uniformly random letters score about -1.2 bits a letter, identifiers built of words about +1
    (``departureAirportCode`` +23, ``XMLHttpRequestUpload`` +16).
    """
    words = [w for w in _WORD_SEPARATOR.split(token) if _mixed_case(w)]
    letters = sum(map(len, words))
    if letters < LETTER_SECRET_MIN_LETTERS:
        return False
    parts = [p for w in words for p in _CAMEL_PART.findall(w)]
    if 4 * sum(len(p) for p in parts if len(p) <= 2) >= 3 * letters:
        return True
    bits = sum(_LOWER_RUN_BITS[min(len(r), 6)] for w in words for r in _LOWER_RUN.findall(w))
    for part in parts:
        if not part.isupper():
            low = part.lower()
            bits += sum(_BIGRAM_BITS[low[i : i + 2]] for i in range(len(low) - 1))
    return bits <= LETTER_SECRET_MAX_BITS


def letter_secret_spans(text: str) -> list[tuple[int, int]]:
    """The spans of ``text`` that :func:`letter_secret` reads as random letter tokens."""
    spans = []
    for m in _LETTER_RUN.finditer(text):
        start, end = m.span()
        if text[start - 1 : start].isdigit() or text[end : end + 1].isdigit():
            continue  # glued to a digit: the id rule takes the whole token
        while start < end and text[start] in "_-":
            start += 1
        while end > start and text[end - 1] in "_-":
            end -= 1
        if end - start >= LETTER_SECRET_MIN_LETTERS and letter_secret(text[start:end]):
            spans.append((start, end))
    return spans


def _whole_token(text: str, start: int, end: int) -> tuple[int, int]:
    """A secret's span widened to the whole token it sits in: a detector that reports a part (a JWT's
    ``header.payload.`` without its signature) must not leave the rest behind."""
    while start > 0 and text[start - 1] in _KEY_CHARS:
        start -= 1
    while end < len(text) and (
        text[end] in _KEY_CHARS or text[end] == "=" or (text[end] == "." and text[end + 1 : end + 2].isalnum())
    ):
        end += 1
    return start, end


def _secret_spans(text: str) -> Iterable[tuple[int, int]]:
    return (_whole_token(text, s, e) for s, e in _detected_secrets(text))


def _detected_secrets(text: str) -> Iterable[tuple[int, int]]:
    for m in _PREFIXED_KEY.finditer(text):
        yield m.start(), m.end()
    for m in _JWT.finditer(text):
        yield m.start(), m.end()
    yield from letter_secret_spans(text)
    for offset, line in _pieces(text):
        if not _LONG_ENOUGH.search(line):  # only values of six or more characters are taken (below)
            continue
        for plugin in _secret_plugins():
            try:
                found = list(plugin.analyze_line(filename="run.txt", line=line, line_number=1))
            except Exception:  # noqa: BLE001 - a detector failure must not open the boundary; the backstop runs
                continue
            for secret in found:
                value = str(secret.secret_value or "")
                if len(value) < 6:  # some plugins report only a prefix group; the id/number rules cover it
                    continue
                for m in re.finditer(re.escape(value), line):
                    yield offset + m.start(), offset + m.end()


_PIECE_CHARS = 1024
_LONG_ENOUGH = re.compile(r"\S{6}")


def _pieces(text: str) -> Iterable[tuple[int, str]]:
    """Each line's non-blank pieces of at most about ``_PIECE_CHARS`` characters, cut at a space, with their
    offsets: the library detectors' cost grows faster than the length of what they are given."""
    offset = 0
    for line in text.split("\n"):
        start = 0
        while start < len(line):
            end = len(line)
            if end - start > _PIECE_CHARS:
                cut = line.rfind(" ", start + _PIECE_CHARS // 2, start + _PIECE_CHARS)
                end = cut + 1 if cut != -1 else start + _PIECE_CHARS
            if not line[start:end].isspace():
                yield offset + start, line[start:end]
            start = end
        offset += len(line) + 1


# A run of what a phone number is written with; longer ones are no phone number (the digit rules take them).
_PHONE_RUN = re.compile(r"[\d()+\-./ \t]++")
_PHONE_RUN_CHARS = 40


def _phone_spans(text: str) -> Iterable[tuple[int, int]]:
    import phonenumbers

    for run in _PHONE_RUN.finditer(text):
        if len(run.group(0)) <= _PHONE_RUN_CHARS and sum(ch.isdigit() for ch in run.group(0)) >= 7:
            for match in phonenumbers.PhoneNumberMatcher(run.group(0), "US"):
                yield run.start() + match.start, run.start() + match.end


def _card_kind(digits: str) -> str | None:
    from stdnum import luhn

    return "card" if 13 <= len(digits) <= 19 and luhn.is_valid(digits) else None


def _raw_findings(text: str, strict: bool) -> list[tuple[str, int, int]]:
    """Every detector's spans as ``(kind, start, end)``, most specific kind first (overlaps are resolved by
    :func:`findings`)."""
    from stdnum import iban

    out = [("string", *m.span()) for m in _LONG_TOKEN.finditer(text)]
    if out:  # the patterns read the rest; blanks keep every offset
        text = _LONG_TOKEN.sub(lambda m: " " * len(m.group(0)), text)

    def add(kind: str, spans: Iterable[tuple[int, int]]) -> None:
        out.extend((kind, s, e) for s, e in spans if e > s)

    def strip_tail(m: re.Match[str]) -> tuple[int, int]:
        end = m.end()
        while end > m.start() and text[end - 1] in ".,;:!?)]}'\"":
            end -= 1
        return m.start(), end

    add("url", (strip_tail(m) for m in URL.finditer(text)))
    if _DEFANGED_DOT.search(text):
        add("url", (strip_tail(m) for m in DEFANGED.finditer(text)))
    add("email", (m.span() for m in EMAIL.finditer(text)))
    add("email", (m.span() for m in EMAIL_SPELLED.finditer(text)))
    add("email", (m.span() for m in EMAIL_HOST.finditer(text)))
    add("url", (strip_tail(m) for m in DOMAIN.finditer(text)))
    add("secret", _secret_spans(text))
    add("secret", _credential_spans(text, strict))
    add("secret", _more_credential_spans(text))
    if not strict:  # a quoted single token in run text is a value ("JohnDoe", 'Tr0ub4dor&3')
        add("string", (m.span(1) for m in QUOTED.finditer(text) if _quoted_value(m.group(1))))
    add("card", (m.span() for m in CARD_LIKE.finditer(text) if _card_kind(re.sub(r"\D", "", m.group(0)))))
    add("account", (m.span() for m in IBAN_LIKE.finditer(text) if iban.is_valid(m.group(0))))
    add("date", (m.span() for m in DATE.finditer(text)))
    add("date", (m.span() for m in WORD_DATE.finditer(text)))
    add("address", (m.span() for m in WORD_ADDRESS.finditer(text) if _street_name(m.group("name"))))
    add("phone", _phone_spans(text))
    add("id", (m.span() for m in ID_TOKEN.finditer(text)))
    add("id", (m.span() for m in HEX_TOKEN.finditer(text) if any(c.isdigit() for c in m.group(0))))
    add("id", (m.span() for m in CODE_TOKEN.finditer(text) if m.group(0) not in CODE_ALLOW))
    add("number", (m.span() for m in NUMBER_CHAIN.finditer(text)))
    add("number", (m.span() for m in NUMBER_OR_DIGITS.finditer(text)))
    add("number", (m.span() for m in NUMBER_WORDS.finditer(text) if _spelled_number(m.group(0))))
    add("number", (m.span() for m in CJK_NUMBER.finditer(text)))
    return out


def _credential_spans(text: str, strict: bool) -> Iterable[tuple[int, int]]:
    """The value after each credential key (:data:`CREDENTIAL`; :data:`CREDENTIAL_STRICT` for a skill). A value
    that reads as prose (a plain word, a placeholder; after a bare key a word such as ``reset`` or ``failed``) is
    none, and the search goes on inside it: ``login with user=admin&pass=…`` holds a key after ``login``."""
    pattern = CREDENTIAL_STRICT if strict else CREDENTIAL
    pos = prose_end = 0
    while (m := pattern.search(text, pos)) is not None:
        first = m.group("first")
        connector = m.group("connector").strip().lower()
        end = m.end()
        if first is not None:
            rest = _CLAUSE_REST.match(text, max(end, prose_end))
            end = rest.end() if rest is not None else end
        if m.start() < prose_end and connector in ("", "of", "to"):
            pos = m.start("value")  # a bare key inside prose is prose too ("username and password for …")
            continue
        if _plain_value(first or m.group("value")) or (not connector and prose_word(first or "", BARE_PROSE)):
            prose_end = max(prose_end, end)
            pos = m.start("value")  # past the key only: each key starts at most one match
            continue
        yield _trim(text, m.start("value"), end)
        pos = end


def _more_credential_spans(text: str) -> Iterable[tuple[int, int]]:
    """A value before its key (:data:`VALUE_BEFORE_KEY`), after a key and a few words (:data:`QUALIFIED_CREDENTIAL`)
    and a ``user:password`` pair after a cue (:data:`USER_PASS`); a prose word (``what is my password``, ``is not
    working``) is none."""
    for before in VALUE_BEFORE_KEY.finditer(text):
        if not prose_word(before.group("value"), PROSE_VALUES) and not PLACEHOLDER.fullmatch(before.group("value")):
            yield before.span("value")
    pos = 0
    while (m := QUALIFIED_CREDENTIAL.search(text, pos)) is not None:
        first = m.group("first")
        pos = m.start("value")
        if _plain_value(first or m.group("value")) or prose_word((first or "").rstrip(".,;:!?"), PROSE_VALUES):
            continue
        end = m.end()
        if first is not None:
            rest = _CLAUSE_REST.match(text, end)
            end = rest.end() if rest is not None else end
        yield _trim(text, m.start("value"), end)
        pos = end
    for pair in USER_PASS.finditer(text):
        yield pair.span("pair")


def _spelled_number(run: str) -> bool:
    """Whether a run of number words spells a number: four words or more, or three with an English ten, teen or
    scale word (``and`` not counted)."""
    words = [w for w in _NUMBER_WORD_SPLIT.split(run.lower()) if w and w != "and"]
    return len(words) >= 4 or (len(words) == 3 and any(w in EN_BIG_NUMBER_WORDS for w in words))


def _street_name(words: str) -> bool:
    """Whether the words between a number and a street type name a street ("elm", not "way" or "dead end")."""
    return not any(w in _NOT_STREET_NAMES for w in words.lower().split())


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """An unquoted value without the sentence punctuation that follows it ("is hunter2." → "hunter2")."""
    if text[start : start + 1] in "\"“'‘`<":
        return start, end
    while end > start and text[end - 1] in ".,;:!?)]}":
        end -= 1
    return start, end


def prose_word(word: str, words: frozenset[str]) -> bool:
    """Whether ``word`` is one of ``words`` as prose writes it: in lower case or capitalised ("password reset",
    "Password Reset"). Mixed or upper case is a value ("password lIMIT", "password LIMIT"): a word as prose spells
    it is too easy a guess to hide a secret behind, one spelled otherwise is not."""
    return word.lower() in words and (word.islower() or (word[:1].isupper() and word[1:].islower()))


def _plain_value(value: str) -> bool:
    if value[:1] == "<" and value[-1:] == ">":  # a placeholder, a multi-word one or a credential's name; else a value
        inner = value[1:-1].strip()
        return not inner or " " in inner or inner.lower() in PLACEHOLDER_KINDS or bool(_CRED_NAME.fullmatch(inner))
    inner = value.strip("\"“”'‘’`").strip().rstrip(".,;:!?)]}")
    return not inner or inner in PLAIN_VALUES or bool(PLACEHOLDER.fullmatch(inner))


def findings(text: str, strict: bool = False) -> list[Finding]:
    """Non-overlapping findings in text order; an earlier (more specific) detector wins an overlap.

    The detectors read :func:`_reading` of the text; spans and ``Finding.text`` are the original's.
    ``strict`` (the skill check) reads a credential only after "is"/"="/":"; run text is read loosely.
    """
    text = text or ""
    view, starts, ends = _reading(text)
    taken = _resolve(view, _raw_findings(view, strict))
    if starts is None or ends is None:
        return taken
    out: list[Finding] = []
    for f in taken:
        start, end = starts[f.start], ends[f.end - 1]
        if out and start < out[-1].end:  # one character folded into two findings ("⑴"): one span
            prev = out.pop()
            start, end, kind = prev.start, max(end, prev.end), prev.kind
        else:
            kind = f.kind
        out.append(Finding(kind, start, end, text[start:end]))
    return out


def _reading(text: str) -> tuple[str, list[int] | None, list[int] | None]:
    """The text as the detectors read it (folded; ``%XX`` escapes of printable ASCII, HTML character
    references and ``\\uXXXX``/``\\xXX`` escapes decoded, twice-encoded ones too) and, unless it is the text
    itself, the original start and end offset of each of its characters."""
    if text.isascii() and not _PERCENT.search(text) and not _ENTITY.search(text) and not _ESCAPE.search(text):
        return text, None, None
    view, origin = fold_map(text) if not text.isascii() else (text, list(range(len(text))))
    starts, ends = origin, [i + 1 for i in origin]
    for _ in range(_DECODE_ROUNDS):
        before = view
        if _ENTITY.search(view):
            view, starts, ends = _decoded(view, starts, ends, _ENTITY, _entity)
        if _PERCENT.search(view):
            view, starts, ends = _decoded(view, starts, ends, _PERCENT, lambda esc: chr(int(esc[1:], 16)))
        if _ESCAPE.search(view):
            view, starts, ends = _decoded(view, starts, ends, _ESCAPE, _escaped)
        if view == before:
            break
    return view, starts, ends


_DECODE_ROUNDS = 3
# An HTML character reference: decimal, hexadecimal or named (``&#64;``, ``&#x40;``, ``&commat;``).
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


# A string-literal escape as JSON, Python and JavaScript write them: ``\u0040``, ``\x40``.
_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|x[2-7][0-9A-Fa-f])")


def _escaped(esc: str) -> str:
    """What a ``\\uXXXX`` or ``\\xXX`` escape shows, as the detectors read it (folded)."""
    return fold(chr(int(esc[2:], 16)))


def _entity(ref: str) -> str:
    """What an HTML character reference shows, as the detectors read it (folded); unknown names stay."""
    return fold(html.unescape(ref))


def _decoded(
    view: str, starts: list[int], ends: list[int], pattern: re.Pattern[str], decode: Callable[[str], str]
) -> tuple[str, list[int], list[int]]:
    """``view`` with each match of ``pattern`` replaced by ``decode(match)``; each decoded character keeps the
    span of the escape it came from."""
    chars: list[str] = []
    new_starts: list[int] = []
    new_ends: list[int] = []
    last = 0
    for m in pattern.finditer(view):
        chars.append(view[last : m.start()])
        new_starts.extend(starts[last : m.start()])
        new_ends.extend(ends[last : m.start()])
        shown = decode(m.group(0))
        chars.append(shown)
        new_starts.extend([starts[m.start()]] * len(shown))
        new_ends.extend([ends[m.end() - 1]] * len(shown))
        last = m.end()
    chars.append(view[last:])
    new_starts.extend(starts[last:])
    new_ends.extend(ends[last:])
    return "".join(chars), new_starts, new_ends


def _resolve(text: str, raw: list[tuple[str, int, int]]) -> list[Finding]:
    """Non-overlapping findings from the raw spans, first come first served. A finding that runs into an
    earlier one keeps its other parts: a credential value's other words ("hunter2 and mail <email>"), a
    token's rest after a date took its head ("2024-01-01234A": ``234A``) — they are the value too."""
    busy = bytearray(len(text))
    taken: list[tuple[int, int, str]] = []
    for kind, start, end in raw:
        if busy.find(1, start, end) == -1:
            busy[start:end] = b"\x01" * (end - start)
            taken.append((start, end, kind))
        else:
            for s, e in _free_parts(text, busy, start, end):
                busy[s:e] = b"\x01" * (e - s)
                taken.append((s, e, kind))
    taken.sort()
    return [Finding(kind, start, end, text[start:end]) for start, end, kind in taken]


def _free_parts(text: str, busy: bytearray, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``start:end`` no finding has taken, without their surrounding non-alphanumerics."""
    parts = []
    i = start
    while (i := busy.find(0, i, end)) != -1:
        j = busy.find(1, i, end)
        j = end if j == -1 else j
        s, e = i, j
        while s < e and not text[s].isalnum():
            s += 1
        while e > s and not text[e - 1].isalnum():
            e -= 1
        if e > s:
            parts.append((s, e))
        i = j
    return parts


def scrub(text: str) -> str:
    """``text`` with every finding replaced by its placeholder (``<email>``, ``<card>``, ``<number>`` …)."""
    out, last = [], 0
    for f in findings(text):
        out.append(text[last : f.start])
        out.append(f"<{f.kind}>")
        last = f.end
    out.append(text[last:])
    return "".join(out)


def _quoted_value(inner: str) -> bool:
    inner = inner.strip()
    return bool(inner) and " " not in inner and not _plain_value(inner) and not re.fullmatch(r"[a-z_-]+", inner)


def quoted_literals(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """Quoted single tokens that are not a placeholder, an allowed (structural) name or a plain value."""
    names = {a.casefold() for a in allowed}
    found = []
    for m in QUOTED.finditer(text):
        inner = m.group(1).strip()
        if _quoted_value(inner) and inner.casefold() not in names:
            found.append(inner)
    return found


def literal_findings(text: str, allowed: Iterable[str] = ()) -> list[Finding]:
    """What a skill may not contain: every finding except placeholders, allowed names (tool and parameter
    names, excused only as identifiers: a name never excuses a secret, a card or an email) and numbers of at
    most two digits (step numbers, "retry 2 times")."""
    names = {a.casefold() for a in allowed}
    text = text or ""
    # Placeholders stay in the text the detectors read: blanked out, the words after one read as the value it
    # replaced ("password is <secret> My email is") and a quote holding one as a one-word quote ('My <name>').
    # A finding that is a placeholder, or lies inside one, is not a literal.
    held = [m.span() for m in PLACEHOLDER.finditer(text)]
    out = []
    for f in findings(text, strict=True):
        if PLACEHOLDER.fullmatch(f.text.strip()) or any(a <= f.start and f.end <= b for a, b in held):
            continue
        if f.kind == "id" and f.text.strip("`").casefold() in names:
            continue
        digits = sum(ch.isdigit() for ch in f.text)  # none in a number spelled in words: never excused
        if f.kind == "number" and (0 < digits <= 2 or re.fullmatch(r"[01]?\.\d{1,2}", f.text)):
            continue
        out.append(f)
    out.extend(Finding("quoted", 0, 0, q) for q in quoted_literals(text, names))
    return out


@lru_cache(maxsize=4096)
def name_ok(name: str) -> bool:
    """Whether a run-supplied tool or parameter name may stand as structure: nothing in it is a value other
    than an identifier with at most two digits (``address2``, ``SKU``); a key that is a secret, a card, an
    email or a long number is a value wherever it appears."""
    return all(f.kind == "id" and sum(ch.isdigit() for ch in f.text) <= 2 for f in findings(name))
